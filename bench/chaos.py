"""Chaos: SIGKILLs of workers and bulk CLI commands while runs keep arriving, then invariants.

    .venv/bin/python bench/chaos.py [--minutes 10] [--backend sqlite|postgres] [--pg URL]
                                    [--workers 3] [--seed N]

A fresh database (SQLite file, or a PostgreSQL schema of its own), 2-3 real `flow worker`
processes hosting bench/chaos_workflows.py, and a driver that for `--minutes` keeps:

- starting runs of every shape (step chains, retries, timers, signals, hooks, children, long
  sleepers) with `flow start --from-jsonl` and single `flow start`s;
- signalling every run waiting on "go" (`flow signal go --waiting-on signal:go --yes`),
  cancelling the long sleepers over filters (`flow cancel --workflow doomed --yes`) and resolving
  open hooks (`flow hook resolve -`);
- SIGKILLing, at random moments, a worker (restarted at once) or one of those CLI commands
  mid-flight.

Then it drains (no more kills; signals, hooks and cancels delivered until every run ends) and
checks every history: sequences 1..n without gaps, no step completed twice, every committed
``step_completed`` backed by its invocation in the side-effect ledger, every acknowledged start,
signal and cancel (exit 0, or a "done" result line) in history, every run terminal or
legitimately waiting, and `flow check` clean. Prints a summary; exit 1 on any violation.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

from common import DEFAULT_PG, ROOT, fresh_database, stop  # noqa: E402

from flow_cli.model.events import EventEnvelope  # noqa: E402
from flow_cli.model.snapshot import project  # noqa: E402

FLOW = str(Path(sys.executable).parent / "flow")
TERMINAL = {"run_completed", "run_failed", "run_cancelled", "run_continued_as_new"}


# -- the invariants (also used by tests/test_chaos_checker.py on a tiny in-process scenario) ----


@dataclass
class Acknowledged:
    """What the CLI told the driver it did: exit 0 or a "done" result line."""

    starts: set[str] = field(default_factory=set)
    signals: dict[str, set[str]] = field(default_factory=dict)
    """run id -> tags of the signal payloads acknowledged for it."""
    cancels: dict[str, set[str]] = field(default_factory=dict)
    """run id -> reasons of the cancel requests acknowledged for it."""


def read_ledger(path: Path) -> set[tuple[str, str, int]]:
    """The invocations the step handlers recorded: (run id, step id, attempt)."""
    found: set[tuple[str, str, int]] = set()
    if not path.exists():
        return found
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[2].isdigit():
            found.add((parts[0], parts[1], int(parts[2])))
    return found


def check_histories(
    histories: dict[str, list[EventEnvelope]],
    ledger: set[tuple[str, str, int]],
    acked: Acknowledged,
    now: datetime,
) -> list[str]:
    """Every invariant violation found, one sentence each (empty: all hold)."""
    problems: list[str] = []
    for run_id, history in sorted(histories.items()):
        sequences = [e.sequence for e in history]
        if sequences != list(range(1, len(history) + 1)):
            problems.append(f"run {run_id}: sequences are not 1..{len(history)}: {sequences[:20]}")
            continue
        keys = [e.event.event_key() for e in history]
        if not keys or keys[0] != "run_started" or "run_started" in keys[1:]:
            problems.append(f"run {run_id}: run_started is not exactly the first event")
            continue
        ends = [i for i, k in enumerate(keys) if k in TERMINAL]
        if len(ends) > 1 or (ends and ends[0] != len(keys) - 1):
            problems.append(f"run {run_id}: terminal events at {ends} of {len(keys)}")
        completed = Counter(
            e.event.step_id for e in history if e.event.event_key() == "step_completed"
        )
        problems.extend(
            f"run {run_id}: step {s!r} completed {n} times" for s, n in completed.items() if n > 1
        )
        for envelope in history:
            event: Any = envelope.event
            if event.event_key() != "step_completed":
                continue
            if (run_id, event.step_id, event.attempt) not in ledger:
                problems.append(
                    f"run {run_id}: step {event.step_id!r} attempt {event.attempt} completed "
                    "but its invocation is missing from the ledger"
                )
        problems.extend(f"run {run_id}: {p}" for p in _waiting_problems(history, now))
    for run_id in sorted(acked.starts - histories.keys()):
        problems.append(f"run {run_id}: its start was acknowledged but the run does not exist")
    problems.extend(_missing_facts(histories, acked.signals, "signal_received", "signal"))
    problems.extend(_missing_facts(histories, acked.cancels, "cancel_requested", "cancel"))
    return problems


def _waiting_problems(history: list[EventEnvelope], now: datetime) -> list[str]:
    """A run that is not terminal must be waiting on something that has not arrived yet."""
    snap = project(history)
    if snap.terminal:
        return []
    if snap.decision_error is not None:
        return [f"open ({snap.status.value}) with a failing decision: {snap.decision_error}"]
    if snap.unsettled_steps:
        return [f"open ({snap.status.value}) with {snap.unsettled_steps} unsettled step(s)"]
    if any(deadline <= now for deadline in snap.open_deadlines.values()):
        return [f"open ({snap.status.value}) with a timer already due"]
    if not snap.has_open_work():
        return [f"open ({snap.status.value}) but waiting on nothing"]
    return []


def _missing_facts(
    histories: dict[str, list[EventEnvelope]],
    acked: dict[str, set[str]],
    event_key: str,
    what: str,
) -> Iterable[str]:
    for run_id, tags in sorted(acked.items()):
        history = histories.get(run_id, [])
        seen = set()
        for envelope in history:
            event: Any = envelope.event
            if event.event_key() != event_key:
                continue
            if event_key == "signal_received":
                payload = event.payload
                seen.add(payload.get("tag") if isinstance(payload, dict) else None)
            else:
                seen.add(event.reason)
        # A run may have ended before a cancel reached it: then the request was "done" only if
        # it was written, and one cancel_requested is all a run keeps (asking twice is harmless).
        if event_key == "cancel_requested" and seen:
            continue
        for tag in sorted(tags - seen):
            yield f"run {run_id}: {what} {tag!r} was acknowledged but is not in its history"


# -- the driver ---------------------------------------------------------------------------------


@dataclass
class Chaos:
    url: str
    scratch: Path
    rng: random.Random
    n_workers: int
    acked: Acknowledged = field(default_factory=Acknowledged)
    kills: Counter[str] = field(default_factory=Counter)
    commands: Counter[str] = field(default_factory=Counter)
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    counter: int = 0
    typical: dict[str, float] = field(default_factory=dict)
    """A moving average of each command's duration: kills aim inside it."""

    @property
    def ledger(self) -> Path:
        return self.scratch / "ledger.tsv"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(HERE)])
        env["FLOW_CONFIG"] = str(self.scratch / "flow.toml")
        env["FLOW_DB"] = self.url
        env["FLOW_CHAOS_LEDGER"] = str(self.ledger)
        return env

    def spawn_worker(self) -> subprocess.Popen[bytes]:
        log = open(self.scratch / "workers.log", "ab")  # noqa: SIM115 - the child keeps it
        try:
            return subprocess.Popen(
                [FLOW, "worker", "--concurrency", "4", "--lease-seconds", "5"],
                env=self.env(),
                cwd=self.scratch,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        finally:
            log.close()

    def cli(
        self, kind: str, args: list[str], stdin: str | None = None, kill: bool = True
    ) -> tuple[int | None, str]:
        """Run `flow ARGS`; with ``kill``, SIGKILL it at a random moment 30% of the time.

        Returns (exit code, or None when killed; stdout so far)."""
        self.commands[kind] += 1
        proc = subprocess.Popen(
            [FLOW, *args],
            env=self.env(),
            cwd=self.scratch,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        killed = False
        began = time.monotonic()
        if stdin is not None and proc.stdin is not None:
            proc.stdin.write(stdin)
            proc.stdin.close()
            proc.stdin = None
        if kill and kind in self.typical and self.rng.random() < 0.3:
            try:
                proc.wait(self.rng.uniform(0.3, 1.0) * self.typical[kind])
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
                killed = True
                self.kills[f"cli {kind}"] += 1
        out, _err = proc.communicate(timeout=300)
        if not killed:
            took = time.monotonic() - began
            self.typical[kind] = 0.8 * self.typical.get(kind, took) + 0.2 * took
        return (None if killed else proc.returncode), out

    def _acked_lines(self, out: str) -> list[str]:
        """Run ids of the "done" (or, for starts, "skipped": it existed) result lines."""
        ids = []
        for line in out.splitlines():
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if isinstance(data, dict) and data.get("result") in ("done", "skipped"):
                ids.append(data["run_id"])
        return ids

    # -- actions ---------------------------------------------------------------------------------

    def new_run(self) -> dict[str, Any]:
        self.counter += 1
        shape = self.rng.choices(
            ["chain", "retry", "timer", "signal", "hook", "parent", "doomed"],
            weights=[30, 15, 15, 15, 10, 10, 5],
        )[0]
        value: dict[str, Any] = {
            "chain": {"steps": self.rng.randint(2, 8)},
            "retry": {"fails": self.rng.randint(0, 3)},
            "timer": {"secs": self.rng.randint(1, 20)},
            "parent": {"steps": self.rng.randint(1, 4)},
        }.get(shape, {})
        return {"run_id": f"{shape}-{self.counter}", "workflow": shape, "input": value}

    def start_batch(self) -> None:
        lines = [self.new_run() for _ in range(self.rng.randint(5, 25))]
        path = self.scratch / "batch.jsonl"
        path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
        code, out = self.cli("start --from-jsonl", ["start", "--from-jsonl", str(path), "--jsonl"])
        if code == 0:
            self.acked.starts.update(line["run_id"] for line in lines)
        else:
            self.acked.starts.update(self._acked_lines(out))

    def start_one(self) -> None:
        line = self.new_run()
        args = ["start", line["workflow"], "--id", line["run_id"]]
        code, _ = self.cli("start", [*args, "--input", json.dumps(line["input"])])
        if code == 0:
            self.acked.starts.add(line["run_id"])

    def signal_waiting(self) -> None:
        tag = f"sig-{self.counter}-{self.commands['signal']}"
        args = ["signal", "go", "--waiting-on", "signal:go", "--yes", "--jsonl"]
        _, out = self.cli("signal", [*args, "--payload", json.dumps({"tag": tag})])
        for run_id in self._acked_lines(out):
            self.acked.signals.setdefault(run_id, set()).add(tag)

    def cancel_doomed(self) -> None:
        reason = f"chaos-{self.commands['cancel']}"
        args = ["cancel", "--workflow", "doomed", "--status", "Suspended,Running,Pending"]
        _, out = self.cli("cancel", [*args, "--yes", "--jsonl", "--reason", reason])
        for line in out.splitlines():
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if isinstance(data, dict) and data.get("result") == "done":
                self.acked.cancels.setdefault(data["run_id"], set()).add(reason)

    def resolve_hooks(self) -> None:
        code, out = self.cli("hook list", ["hook", "list", "--open", "--jsonl"], kill=False)
        if code != 0 or not out.strip():
            return
        self.cli("hook resolve", ["hook", "resolve", "-", "--payload", '{"chaos": 1}'], stdin=out)

    def kill_worker(self) -> None:
        index = self.rng.randrange(len(self.workers))
        self.workers[index].send_signal(signal.SIGKILL)
        self.workers[index].wait()
        self.kills["worker"] += 1
        self.workers[index] = self.spawn_worker()

    # -- phases ----------------------------------------------------------------------------------

    def run(self, minutes: float) -> None:
        self.workers = [self.spawn_worker() for _ in range(self.n_workers)]
        end = time.monotonic() + minutes * 60
        next_kill = time.monotonic() + self.rng.uniform(2, 10)
        actions = [self.start_batch, self.start_one, self.signal_waiting, self.resolve_hooks]
        while time.monotonic() < end:
            action = self.rng.choices([*actions, self.cancel_doomed], [40, 15, 20, 15, 10])[0]
            action()
            if time.monotonic() >= next_kill:
                self.kill_worker()
                next_kill = time.monotonic() + self.rng.uniform(2, 10)

    def drain(self, timeout: float) -> None:
        """No more kills: deliver what runs wait for until every run ends (or ``timeout``)."""
        import chaos_workflows

        from flow_cli.engine.engine import Engine
        from flow_cli.errors import FlowError
        from flow_cli.model.status import RunStatus
        from flow_cli.store import open_store

        engine = Engine(open_store(self.url), [chaos_workflows.runtime])
        try:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                open_runs = [r for r in engine.list_runs() if not r.status.terminal]
                if not open_runs:
                    return
                for record in open_runs:
                    if record.status != RunStatus.SUSPENDED:
                        continue
                    try:
                        snap = engine.snapshot(record.run_id)
                        if snap.waiting_signals.get("go"):
                            engine.signal(record.run_id, "go", {"tag": "drain"})
                        for hook in snap.hooks.values():
                            if not hook.resolved:
                                engine.resolve_hook(hook.token, {"drain": 1})
                        if record.workflow == "doomed":
                            engine.cancel(record.run_id, "drain")
                    except FlowError:
                        pass  # it moved on meanwhile
                time.sleep(2)
        finally:
            engine.close()

    def histories(self) -> dict[str, list[EventEnvelope]]:
        from flow_cli.store import open_store
        from flow_cli.store.protocol import RunFilter

        store = open_store(self.url)
        try:
            return {r.run_id: store.read_history(r.run_id) for r in store.find_runs(RunFilter())}
        finally:
            store.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--backend", default="sqlite", choices=["sqlite", "postgres"])
    parser.add_argument("--pg", default=DEFAULT_PG, help="PostgreSQL server (a fresh schema)")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--drain-seconds", type=float, default=300.0)
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    print(f"chaos: {args.backend}, {args.minutes} min, {args.workers} workers, seed {seed}")

    with fresh_database(args.backend, args.pg) as (url, scratch):
        (scratch / "flow.toml").write_text(
            '[flow]\nruntimes = ["chaos_workflows:runtime"]\nbuild_id = "chaos-1"\n',
            encoding="utf-8",
        )
        chaos = Chaos(url, scratch, random.Random(seed), args.workers)
        t0 = time.monotonic()
        try:
            chaos.run(args.minutes)
            chaos_seconds = time.monotonic() - t0
            chaos.drain(args.drain_seconds)
        finally:
            stop(chaos.workers)
        histories = chaos.histories()
        problems = check_histories(
            histories, read_ledger(chaos.ledger), chaos.acked, datetime.now(UTC)
        )
        check = subprocess.run(
            [FLOW, "check"], env=chaos.env(), cwd=scratch, capture_output=True, text=True
        )
        if check.returncode != 0:
            problems.append(f"flow check exited {check.returncode}: {check.stdout}{check.stderr}")
        if problems:
            kept = Path(f"/tmp/chaos-{args.backend}-{seed}")
            shutil.rmtree(kept, ignore_errors=True)
            shutil.copytree(scratch, kept)
            print(f"scratch directory kept in {kept}")

    statuses = Counter(project(h).status.value for h in histories.values())
    events = sum(len(h) for h in histories.values())
    print(f"chaos phase: {chaos_seconds:.0f} s; drain and checks: {time.monotonic() - t0:.0f} s")
    print(f"runs: {len(histories)} ({dict(sorted(statuses.items()))}); events: {events}")
    print(
        f"acknowledged: {len(chaos.acked.starts)} starts, "
        f"{sum(len(t) for t in chaos.acked.signals.values())} signals, "
        f"{sum(len(t) for t in chaos.acked.cancels.values())} cancels"
    )
    print(f"commands: {dict(sorted(chaos.commands.items()))}")
    print(f"kills: {sum(chaos.kills.values())} ({dict(sorted(chaos.kills.items()))})")
    print(f"violations: {len(problems)}")
    for problem in problems[:50]:
        print(f"  {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
