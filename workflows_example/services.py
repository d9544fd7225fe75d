"""Stand-ins for the external systems the example steps call (stock, payments, mail).

Each one deduplicates by idempotency key, the way a real payment or inventory API does: the
step may run more than once (Flow steps run at least once), the effect is applied once. The
ledger is a JSON-lines file so that separate worker processes share it; set
``FLOW_EXAMPLE_LEDGER`` to choose where it lives.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Any


def ledger_path() -> Path:
    return Path(os.environ.get("FLOW_EXAMPLE_LEDGER", "flow-example-ledger.jsonl"))


def apply_once(key: str, effect: dict[str, Any]) -> bool:
    """Record ``effect`` under idempotency ``key`` unless already there. True if applied now."""
    path = ledger_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        # Every line starts with its key as written below: a text search, not a JSON parse of
        # every line, so applying the n-th effect does not cost n parses (a load test applies
        # thousands).
        text = "\n" + handle.read()
        head = '\n{"key": ' + json.dumps(key)
        if head + "," in text or head + "}" in text:
            return False
        handle.write(json.dumps({"key": key, **effect}) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
        return True


def record_call(key: str, attempt: int) -> None:
    """Log that a step handler was invoked (tests count invocations against effects)."""
    path = ledger_path().with_suffix(".calls")
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({"key": key, "attempt": attempt}) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def read_calls() -> list[dict[str, Any]]:
    path = ledger_path().with_suffix(".calls")
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def read_ledger() -> list[dict[str, Any]]:
    path = ledger_path()
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
