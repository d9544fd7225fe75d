"""Runs the console samples of docs/ and compares them with what flow prints.

A page is a session: its checked ``console`` blocks run in order in one scratch directory (one
SQLite database), so a walkthrough is checked end to end, each block seeing what the earlier ones
made. Markers, each an HTML comment on a line of its own (the reader of the rendered page sees
none of them):

``<!-- output checked by tests/test_docs.py -->``
    right above a ``console`` block: each ``$ command`` runs (a line ending in ``\\`` continues
    onto the next) and what it prints, stdout and stderr interleaved, must match the lines under
    it once volatile parts are blanked (:func:`blank`). A documented line ``...`` stands for one or
    more printed lines.
``<!-- output not checked: REASON -->``
    right above a ``console`` block that cannot be checked, with the reason.
``<!-- setup: SHELL -->`` (or ``<!-- setup:``, lines of shell, ``-->``)
    a step the walkthrough needs but a console block cannot show (a worker started in the
    background, killed, time passing); it runs at that point of the session, its output is
    discarded and a failure is reported. It may use the functions of :data:`SETUP_PRELUDE`; a
    background process started with ``start_bg`` is stopped when the session ends (SIGTERM,
    then SIGKILL). A file ``session.env`` it writes is sourced before each later block (for
    a page that says its terminal is wider, ``export COLUMNS=120``).
"""

from __future__ import annotations

import fcntl
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

CHECKED = "<!-- output checked by tests/test_docs.py -->"
UNCHECKED = re.compile(r"<!-- output not checked: (\S.*\S) -->")
SETUP = "<!-- setup:"

EXAMPLE_CONFIG = """\
[flow]
database = "sqlite:///flow.db"
build_id = "shop-2026.12.1"
runtimes = [
    "workflows_example.orders:runtime",
    "workflows_example.orders_v1:runtime",
    "workflows_example.orders_broken:runtime",
]
"""

SCRATCH = "/srv/shop"
"""The scratch directory as the docs name it (in tracebacks, say)."""

_WORKER_ID = re.compile(r"\b[\w.-]+:(\d+):[0-9a-f]{6}\b")
_VOLATILE = (
    (re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?"), "<time>"),
    (re.compile(r"\b\d{4}-\d\d-\d\d/"), "<day>/"),  # an archive's day directory
    (re.compile(r"\b[0-9a-f]{32}\b"), "<token>"),
    (re.compile(r"-[0-9a-f]{12}\b"), "-<id>"),
    (re.compile(r"-fork-[0-9a-f]{6}\b"), "-fork-<id>"),
    (re.compile(r"\b\d+(\.\d+)? ?(ms|s|min|m|h)\b"), "<duration>"),
    (re.compile(r'File "[^"]*/'), 'File "<dir>/'),
    (re.compile(r"(_seconds_sum) \d+(\.\d+(e-?\d+)?)?"), r"\1 <n>"),
    (re.compile(r" {2,}"), "  "),
    (re.compile(r"─+"), "─"),
)


def blank(text: str) -> str:
    """``text`` with what differs from run to run replaced by placeholders: times, tokens,
    generated id suffixes, durations and ages, worker ids and the pids in them, source
    directories in tracebacks, sums of measured seconds; runs of spaces and of table rules are
    shortened, since a column's width follows the widest (volatile) value in it."""
    return "\n".join(_blank_line(line) for line in text.split("\n"))


def _blank_line(line: str) -> str:
    pids = {match.group(1) for match in _WORKER_ID.finditer(line)}
    line = _WORKER_ID.sub("<worker>", line)
    for pid in pids:  # the pid column of `flow workers`, beside its worker id
        line = re.sub(rf"(?<![\w.:-]){pid}(?![\w.:-])", "<pid>", line)
    for pattern, replacement in _VOLATILE:
        line = pattern.sub(replacement, line)
    return line.rstrip()


def matches(documented: str, printed: str) -> bool:
    """Whether ``printed`` is what ``documented`` shows, a line ``...`` matching one or more."""
    want, got = blank(documented).split("\n"), blank(printed).split("\n")
    if "..." not in want:
        return want == got
    pattern = r"\n".join(
        r"(?:[^\n]*\n)*?[^\n]*" if line == "..." else re.escape(line) for line in want
    )
    return re.fullmatch(pattern, "\n".join(got), re.S) is not None


@dataclass(frozen=True)
class Block:
    """A ``console`` block: the lines of its body are ``lines[first:end]`` of its page."""

    first: int
    end: int
    checked: bool
    reason: str | None


@dataclass(frozen=True)
class Setup:
    """A hidden setup step: a shell script, and the line it starts on."""

    line: int
    script: str


def parse(lines: list[str]) -> Iterator[Block | Setup]:
    """The console blocks and setup steps of a page, in order."""
    number = 0
    while number < len(lines):
        line = lines[number].strip()
        if line.startswith(SETUP):
            start = number
            rest = line[len(SETUP) :]
            if rest.endswith("-->"):
                script = rest[:-3].strip()
            else:
                body = [rest] if rest.strip() else []
                number += 1
                while lines[number].strip() != "-->":
                    body.append(lines[number])
                    number += 1
                script = "\n".join(body)
            yield Setup(start + 1, script)
        elif line == "```console":
            end = lines.index("```", number + 1)
            above = lines[number - 1].strip() if number else ""
            reason = UNCHECKED.fullmatch(above)
            yield Block(number + 1, end, above == CHECKED, reason.group(1) if reason else None)
            number = end
        number += 1


def commands_and_outputs(body: list[str]) -> tuple[list[str], list[str]]:
    """A block's commands (continuation lines joined) and the output documented under each."""
    commands: list[str] = []
    outputs: list[str] = []
    continued = False
    for line in body:
        if continued:
            commands[-1] += "\n" + line
        elif line.startswith("$ "):
            commands.append(line[2:])
            outputs.append("")
        else:
            outputs[-1] += ("\n" if outputs[-1] else "") + line
            continue
        continued = line.endswith("\\")
    return commands, outputs


_SITECUSTOMIZE = """\
import socket

socket.gethostname = lambda: "vm"
"""
"""Every host is ``vm``, as in the docs: a longer host name in a worker id would wrap a table's
rows at other places (the pid and the rest of the worker id are blanked)."""


def _env(workdir: Path) -> dict[str, str]:
    venv_bin = str(Path(sys.executable).parent)
    site = workdir / ".harness"
    if not site.exists():
        site.mkdir()
        (site / "sitecustomize.py").write_text(_SITECUSTOMIZE, encoding="utf-8")
    return {
        "PATH": f"{venv_bin}:/usr/bin:/bin",
        "PYTHONPATH": f"{site}:{ROOT}",
        "HOME": str(workdir),
        "XDG_DATA_HOME": str(workdir / "data"),
        "COLUMNS": "100",
        "NO_COLOR": "1",
        "LANG": "C.UTF-8",
    }


def run_commands(commands: list[str], workdir: Path) -> list[str]:
    """Run ``commands`` in one shell (so ``$?`` carries over); what each printed."""
    script = ["set +e", "if [ -f session.env ]; then . ./session.env; fi"]
    for number, command in enumerate(commands):
        script += ["__status=$?", f"printf '@@%d@@\\n' {number}", "(exit $__status)", command]
    printed = _run_bash(["bash", "-c", "\n".join(script)], workdir)[1]
    outputs: list[list[str]] = []
    for line in printed.replace(str(workdir), SCRATCH).rstrip("\n").split("\n"):
        if re.fullmatch(r"@@\d+@@", line):
            outputs.append([])
        elif outputs:
            outputs[-1].append(line)
    return ["\n".join(lines) for lines in outputs]


SETUP_PRELUDE = """\
alive() { [ -e /proc/$1 ] && ! grep -q '^State:.*Z' /proc/$1/status; }
start_bg() { "$@" >> bg.log 2>&1 & echo $! >> bg.pids; }
stop_bg() {
  for p in $(cat bg.pids 2>/dev/null); do kill -TERM $p 2>/dev/null || true; done
  for p in $(cat bg.pids 2>/dev/null); do while alive $p; do sleep 0.05; done; done
  rm -f bg.pids
}
wait_for() {
  for i in $(seq 600); do if eval "$1" >/dev/null 2>&1; then return 0; fi; sleep 0.05; done
  echo "timed out waiting for: $1"; return 1
}
"""
"""Shell functions for setup steps: ``start_bg CMD...`` runs a command in the background (its
output in ``bg.log``), ``stop_bg`` stops them all with SIGTERM and waits, ``wait_for 'CMD'``
retries CMD until it succeeds (30 s at most)."""


def run_setup(script: str, workdir: Path) -> tuple[int, str]:
    """Run a setup step; its exit status and what it printed."""
    return _run_bash(["bash", "-e", "-c", SETUP_PRELUDE + script], workdir)


TIMEOUT = 120
"""Seconds a block or a setup step may take: a sample that waits for ever (a worker nobody
stops) is killed with everything it started in the foreground, and reported."""


def _run_bash(argv: list[str], workdir: Path) -> tuple[int, str]:
    with subprocess.Popen(
        argv,
        cwd=workdir,
        env=_env(workdir),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    ) as process:
        try:
            printed, _ = process.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            printed, _ = process.communicate()
            return -1, printed + f"\n<killed after {TIMEOUT} s>"
    return process.returncode, printed


def stop_background(workdir: Path) -> None:
    """Stop what the page's setup steps left running: SIGTERM, then SIGKILL after 10 s."""
    path = workdir / "bg.pids"
    if not path.exists():
        return
    pids = [int(p) for p in path.read_text().split()]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = []
        for pid in pids:
            try:
                os.kill(pid, sig)
                alive.append(pid)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while alive and time.monotonic() < deadline:
            alive = [pid for pid in alive if _running(pid)]
            time.sleep(0.05)
        if not alive:
            break
        pids = alive
    path.unlink()


def _running(pid: int) -> bool:
    try:
        finished, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not our child: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return Path(f"/proc/{pid}").exists() and "zombie" not in _state(pid)
    return finished == 0


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().lower()
    except OSError:
        return "zombie"


def check_page(path: Path, workdir: Path, *, update: bool) -> list[str]:
    """Run the page's setup steps and checked blocks in order in ``workdir``; the differences
    (or, with ``update``, rewrite the blocks with what flow printed)."""
    workdir.mkdir()
    (workdir / "flow.toml").write_text(EXAMPLE_CONFIG, encoding="utf-8")
    (workdir / "workflows_example").symlink_to(ROOT / "workflows_example")
    lines = path.read_text(encoding="utf-8").split("\n")
    problems: list[str] = []
    replacements: list[tuple[int, int, list[str]]] = []
    with _port_lock(lines):
        _run_page(path, lines, workdir, problems, replacements)
    if update:
        for first, end, body in reversed(replacements):
            lines[first:end] = body
        path.write_text("\n".join(lines), encoding="utf-8")
    return problems


@contextmanager
def _port_lock(lines: list[str]) -> Iterator[None]:
    """A page whose worker serves metrics binds the port its text names: two test runs on one
    machine (other checkouts, say) take turns rather than fail to bind."""
    if not any("--metrics-port" in line and line.startswith("$ ") for line in lines):
        yield
        return
    with open(Path(tempfile.gettempdir()) / "flow-docs-metrics-port.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run_page(
    path: Path,
    lines: list[str],
    workdir: Path,
    problems: list[str],
    replacements: list[tuple[int, int, list[str]]],
) -> None:
    try:
        for item in parse(lines):
            if isinstance(item, Setup):
                status, printed = run_setup(item.script, workdir)
                if status != 0:
                    problems.append(
                        f"{path.name}:{item.line}: setup exited {status}\n{item.script}\n"
                        f"--- printed\n{printed}"
                    )
                continue
            if not item.checked:
                continue
            commands, expected = commands_and_outputs(lines[item.first : item.end])
            printed_all = run_commands(commands, workdir)
            new_body: list[str] = []
            for command, want, got in zip(commands, expected, printed_all, strict=True):
                kept = want if matches(want, got) else got
                new_body += [f"$ {command}", *([kept] if kept else [])]
                if not matches(want, got):
                    problems.append(
                        f"{path.name}:{item.first}: $ {command}\n--- documented\n{want}\n"
                        f"--- printed\n{got}"
                    )
            replacements.append((item.first, item.end, "\n".join(new_body).split("\n")))
    finally:
        stop_background(workdir)


def unchecked_blocks(paths: list[Path]) -> tuple[list[str], list[str]]:
    """The console blocks not checked: those without a marker, and those that say why not
    (``file:line``, then the reason)."""
    unmarked: list[str] = []
    reasoned: list[str] = []
    for path in paths:
        for item in parse(path.read_text(encoding="utf-8").split("\n")):
            if isinstance(item, Block) and not item.checked:
                where = f"{path.name}:{item.first}"
                if item.reason:
                    reasoned.append(f"{where} ({item.reason})")
                else:
                    unmarked.append(where)
    return unmarked, reasoned


def pages() -> list[Path]:
    """The pages of docs/ that hold checked console blocks."""
    return [
        path
        for path in sorted(DOCS.glob("*.md"))
        if any(
            isinstance(item, Block) and item.checked
            for item in parse(path.read_text(encoding="utf-8").split("\n"))
        )
    ]
