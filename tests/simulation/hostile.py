"""Hostile-but-valid JSON for the simulator (issue 25): what users really send, and NUL.

Every value here is valid JSON that Flow must store and give back exactly (key order aside):
bidi and control characters, emoji and astral characters, long strings, 99 levels of nesting,
1,000-digit integers, 1e308 and -0.0, empty keys and keys that look like SQL or JSON paths.
The one exception is a string holding U+0000 (in a key or a value): Flow refuses it at the door
(``Engine.start``/``signal``/``resolve_hook`` raise an input error, nothing is written) and a
step returning one fails at once with ``StepOutputNotJSON`` (no retry), because PostgreSQL's
``jsonb`` cannot hold it and both backends must behave the same.

Lone surrogates (``"\\ud800"``) are left out on purpose: a string holding one has no UTF-8
encoding, so it is not a JSON text any system can exchange (RFC 8259 §8.1, I-JSON), and Flow
owes it no round trip.
"""

from __future__ import annotations

import functools
import math
import random
from typing import Any

JsonValue = Any

DEPTH = 99
"""Nesting levels of the deep value: Flow's limit is 100 (``MAX_DEPTH``)."""
BIG = 10**999
"""The largest integer Flow accepts: 1,000 digits."""
LONG = 10_000
"""Characters of the long strings (about 100 KB of UTF-8 with their multi-byte characters)."""

STRINGS = (
    "",
    " ",
    "\u202eevil\u202c.exe",  # bidi override
    "\u2066isolate\u2069\u200f",
    "\x1b[31mred\x1b[0m\x07\x08",  # ESC, BEL, BS
    "\t\r\n\x0b\x0c\x1f\x7f",
    "\u200b\u200d\ufeff\ufffe",  # zero width, BOM, a noncharacter
    "😀👩‍👩‍👧‍👦🏳️‍🌈",  # emoji, joiners
    "𝄞𐍈\U0010ffff\U00020000",  # astral characters
    "é\u0301 Å ﬃ",  # combining and compatibility forms
    "\\u0000",  # the six characters, not a NUL
    "\"'`;--",
    "null",
    "</script><script>alert(1)</script>",
)
KEYS = (
    "",
    " ",
    "'; DROP TABLE runs; --",
    "1 OR 1=1",
    "$.input[0]",
    "$..*",
    "a.b.c",
    "{path}",
    "->>'x'",
    "\\",
    '"',
    "key\nwith\nnewlines",
    "😀",
    "\u202e",
    "__proto__",
    "constructor",
)
FLOATS = (1e308, -1e308, -0.0, 0.0, 5e-324, 2.2250738585072014e-308, 0.1, 1.7976931348623157e308)
INTS = (BIG, -BIG, 2**63, -(2**63) - 1, 2**64, 2**53 + 1, 0, -1)


def _nested(rng: random.Random, leaf: JsonValue) -> JsonValue:
    value = leaf
    for level in range(DEPTH):
        value = [value] if rng.random() < 0.5 else {rng.choice(KEYS) + str(level): value}
    return value


def _long(rng: random.Random) -> str:
    unit = rng.choice(("x", "é", "😀", "\u202e", "ab"))
    return unit * (LONG // len(unit))


def hostile(rng: random.Random) -> JsonValue:
    """One hostile-but-valid value (no NUL anywhere)."""
    kind = rng.randrange(7)
    if kind == 0:
        return {key: rng.choice(STRINGS) for key in rng.sample(KEYS, 6)}
    if kind == 1:
        return _nested(rng, rng.choice((*STRINGS, *INTS[:3], *FLOATS[:3])))
    if kind == 2:
        return [rng.choice(INTS) for _ in range(3)]
    if kind == 3:
        return {"f": list(FLOATS), "neg_zero": -0.0, "i": rng.choice(INTS)}
    if kind == 4:
        return {rng.choice(KEYS): _long(rng)}
    if kind == 5:
        return rng.choice((*STRINGS, *INTS, *FLOATS, True, False, None))
    return {"": {"": [rng.choice(STRINGS), {rng.choice(KEYS): [rng.choice(FLOATS), None]}]}}


NUL_VALUES = (
    "\x00",
    "a\x00b",
    {"k": "a\u0000b"},
    {"a\x00": 1},
    {"": ["ok", "\x00"]},
    [[[{"x": ["\x00tail"]}]]],
    {"ok": "fine", "nested": {"also\x00key": None}},
    "x" * 1000 + "\x00",
)
"""Values holding U+0000 in one string: a key, a value, deep inside, or alone."""


def with_nul(rng: random.Random) -> JsonValue:
    return rng.choice(NUL_VALUES)


def catalogue() -> list[JsonValue]:
    """Every kind of hostile-but-valid value once, with a 1 MB string (Flow's limit on one
    value's JSON text is 2 MiB)."""
    deep_list: JsonValue = "bottom"
    deep_dict: JsonValue = -0.0
    for level in range(DEPTH):
        deep_list = [deep_list]
        deep_dict = {KEYS[level % len(KEYS)]: deep_dict}
    return [
        *STRINGS,
        {key: STRINGS[i % len(STRINGS)] for i, key in enumerate(KEYS)},
        list(INTS),
        *INTS,
        *FLOATS,
        True,
        False,
        None,
        [],
        {},
        deep_list,
        deep_dict,
        _nested(random.Random(1), BIG),
        "x" * 500_000 + "é" * 100_000 + "😀" * 50_000 + "\u202e",
    ]


def value(rng: random.Random, nul_rate: float) -> JsonValue:
    return with_nul(rng) if rng.random() < nul_rate else hostile(rng)


def has_nul(value: JsonValue) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, dict):
            if any("\x00" in key for key in item):
                return True
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def same(a: JsonValue, b: JsonValue) -> bool:
    """Exactly equal as JSON, key order aside: 1 is not 1.0 nor True, -0.0 is not 0.0."""
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if type(x) is not type(y):
            return False
        if isinstance(x, float):
            if x != y or math.copysign(1.0, x) != math.copysign(1.0, y):
                return False
        elif isinstance(x, dict):
            if x.keys() != y.keys():
                return False
            stack.extend((x[k], y[k]) for k in x)
        elif isinstance(x, list):
            if len(x) != len(y):
                return False
            stack.extend(zip(x, y, strict=True))
        elif x != y:
            return False
    return True


@functools.cache
def nul_rule_in_place() -> bool:
    """Whether this build refuses NUL (``check_limits`` raises on it).

    The simulator's NUL expectations (refused at the door, ``StepOutputNotJSON``) are checked
    only then: on a build without the rule NUL values round-trip like the others. Remove this
    guard once the rule is merged (issue 25), so that a build accepting NUL fails the seeds.
    """
    from flow_cli.model.jsonval import check_limits

    try:
        check_limits("a\x00b")
    except ValueError:
        return True
    return False
