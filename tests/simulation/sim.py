"""A deterministic simulator of Flow: the real engine, many virtual workers, faults, one seed.

Everything that can vary comes from ``random.Random(seed)``: which virtual worker acts next,
what it does, when the ``ManualClock`` jumps, which external facts arrive, and which store call
fails how. The run is single-threaded, so a seed replays exactly.

Pieces:

- ``FaultyStore`` wraps any ``EventStore`` through ``__getattr__`` (so it keeps working while
  store internals change) and injects, per call of a writing method: a crash before the call
  (the worker dies, nothing was written), a crash after it (written, but the worker dies before
  it learns so: "acknowledgement lost"), or an ``EventConflict`` raised instead of committing.
- Virtual workers are ``Engine`` instances over that one store, each with its own worker id,
  sharing the clock. An action is "lease runs and decide one", "lease steps and execute one",
  a clock jump (leases expire, timers fire, backoffs end), or an external fact: start, signal,
  resolve a hook, cancel. A crashed worker is dropped and replaced by a fresh one.
- Step handlers record every invocation together with what the store held at that moment.
- Hostile-but-valid JSON (``hostile.py``) goes into run inputs, signal and hook payloads and
  step outputs: it must round-trip exactly, except a NUL, which must be refused at the door
  with nothing written, or fail its step at once with ``StepOutputNotJSON``.

After the faulty phase, faults stop and the world runs on (signals delivered, hooks resolved,
the clock moving) until every run is terminal; then ``check`` verifies the invariants.
Only the public ``Engine`` API and the ``EventStore`` protocol are used.
"""

from __future__ import annotations

import contextlib
import functools
import random
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flow_cli import RetryPolicy, Runtime, StepFailedError
from flow_cli.engine.engine import Engine
from flow_cli.engine.replay_check import replay_history
from flow_cli.errors import EventConflict, FlowError, InputError, StoreError
from flow_cli.model.clock import ManualClock
from flow_cli.model.events import EventEnvelope
from flow_cli.model.snapshot import WorkflowRunSnapshot
from flow_cli.store.memory import MemoryStore
from flow_cli.store.protocol import RunFilter
from simulation import hostile

LEASE_SECONDS = 10.0
WRITES = frozenset(
    {
        "create_run",
        "commit",
        "append_if_sequence",
        "lease_runs",
        "lease_steps",
        "park_run",
        "renew_step",
    }
)
"""Store methods that change state: the ones a fault can hit."""
CONFLICTABLE = frozenset({"commit", "append_if_sequence"})


class Crash(BaseException):
    """The virtual worker's process died (BaseException: no engine code may swallow it)."""

    def __init__(self, kind: str, method: str) -> None:
        super().__init__(f"{kind} in {method}")
        self.kind = kind


@dataclass
class Faults:
    """Fault probabilities per writing store call; ``enabled`` is switched off to quiesce."""

    rng: random.Random
    crash_before: float = 0.02
    crash_after: float = 0.02
    conflict: float = 0.03
    store_error: float = 0.02
    """A ``StoreError`` (connection lost, file locked) the process survives: half of them raised
    before the call, half after it committed (the acknowledgement was lost)."""
    enabled: bool = True
    injected: Counter[str] = field(default_factory=Counter)
    where: Counter[str] = field(default_factory=Counter)
    """Injected faults by ``kind:method``."""

    target: Callable[[str, tuple[Any, ...], dict[str, Any]], str | None] | None = None
    """Picks a fault for chosen calls (deterministic tests); ``None``: random faults only."""

    def pick(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
        if not self.enabled:
            return None
        if self.target is not None:
            return self.target(method, args, kwargs)
        roll = self.rng.random()
        if roll < self.crash_before:
            return "crash_before_commit"
        roll -= self.crash_before
        if roll < self.crash_after:
            return "crash_after_commit"
        roll -= self.crash_after
        if method in CONFLICTABLE and roll < self.conflict:
            return "event_conflict"
        roll -= self.conflict
        if roll < self.store_error / 2:
            return "store_error_before_commit"
        roll -= self.store_error / 2
        if roll < self.store_error / 2:
            return "store_error_after_commit"
        return None


class FaultyStore:
    """Any store, with faults injected into its writing methods."""

    def __init__(self, inner: Any, faults: Faults) -> None:
        self._inner = inner
        self._faults = faults

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in WRITES or not callable(attr):
            return attr
        faults = self._faults

        def call(*args: Any, **kwargs: Any) -> Any:
            fault = faults.pick(name, args, kwargs)
            if fault is not None:
                faults.injected[fault] += 1
                faults.where[f"{fault}:{name}"] += 1
            if fault == "crash_before_commit":
                raise Crash(fault, name)
            if fault == "event_conflict":
                run_id = _run_id_of(name, args, kwargs)
                raise EventConflict(run_id, -1, None)
            if fault == "store_error_before_commit":
                raise StoreError(f"simulated: connection lost before {name}")
            result = attr(*args, **kwargs)
            if fault == "crash_after_commit":
                raise Crash(fault, name)
            if fault == "store_error_after_commit":
                raise StoreError(f"simulated: connection lost after {name} committed")
            return result

        return call


def _run_id_of(method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    if method == "append_if_sequence":
        return str(args[0] if args else kwargs.get("run_id"))
    writes = args[0] if args else kwargs.get("writes", [])
    return str(writes[0].run_id) if writes else "?"


# -- the workflows ---------------------------------------------------------------------------


@dataclass
class Invocation:
    run_id: str
    step_id: str
    attempt: int
    completed_before: bool
    """Whether ``step_completed`` of this step was already committed when the handler ran."""


class World:
    """What the step handlers can see: the raw store and the simulation's random source."""

    store: Any = None
    sim: Any = None
    depth: int = 0
    rng: random.Random = random.Random(0)
    invocations: list[Invocation] = []  # noqa: RUF012 - reset per simulation
    fail_rate: float = 0.3
    slow_rate: float = 0.15


RETRY = RetryPolicy(max_attempts=4, initial_interval=1.0, max_interval=5.0)


def build_runtime() -> Runtime:
    rt = Runtime(build_id="sim-1")

    @rt.workflow("steps")
    def steps(ctx: Any) -> Any:
        a = ctx.step("a", "work", {"n": 1}, retry=RETRY)
        b = ctx.step("b", "work", {"n": a["n"] + 1}, retry=RETRY)
        return ctx.complete({"sum": a["n"] + b["n"]})

    @rt.workflow("surface")
    def surface(ctx: Any) -> Any:
        policy = RetryPolicy(max_attempts=2, initial_interval=1.0, on_exhausted="surface")
        try:
            ctx.step("x", "work", {"n": 5}, retry=policy)
        except StepFailedError:
            return ctx.complete("gave up")
        return ctx.complete("done")

    @rt.workflow("timer")
    def timer(ctx: Any) -> Any:
        ctx.sleep("nap", 30)
        ctx.step("after", "work", {"n": 2}, retry=RETRY)
        return ctx.complete("woke")

    @rt.workflow("signal")
    def signal(ctx: Any) -> Any:
        payload = ctx.receive("w", "go")
        return ctx.complete({"got": payload})

    @rt.workflow("hook")
    def hook(ctx: Any) -> Any:
        if not ctx.hook_resolved("h"):
            return ctx.create_hook("h", ctx.new_token("h"), {"for": ctx.run_id})
        return ctx.complete({"hook": ctx.hook("h")})

    @rt.workflow("parent")
    def parent(ctx: Any) -> Any:
        outcome = ctx.child("kid", "steps", {"from": ctx.run_id})
        more = ctx.child("kid2", "signal", None, "abandon")
        return ctx.complete({"kid": outcome.kind, "kid2": more.kind})

    @rt.workflow("looper")
    def looper(ctx: Any) -> Any:
        generation = ctx.input.get("gen", 0) if isinstance(ctx.input, dict) else 0
        ctx.step("s", "work", {"n": generation}, retry=RETRY)
        if generation >= 2:
            return ctx.complete({"generations": generation + 1})
        return ctx.continue_as_new({"gen": generation + 1})

    @rt.workflow("cleanup")
    def cleanup(ctx: Any) -> Any:
        if ctx.cancel_requested:
            ctx.step("undo", "work", {"n": 9}, retry=RETRY)
            return ctx.cancelled()
        ctx.sleep("long", 600)
        return ctx.complete("slept")

    @rt.workflow("hostile")
    def hostile_run(ctx: Any) -> Any:
        """Echoes its (hostile) input through a step, then returns a hostile step output."""
        policy = RetryPolicy(max_attempts=3, initial_interval=1.0, on_exhausted="surface")
        try:
            echoed = ctx.step("e", "echo", ctx.input, retry=policy)
        except StepFailedError:
            echoed = "gave up"
        seed = zlib.crc32(ctx.run_id.encode())
        try:
            made = ctx.step("h", "hostile_out", {"seed": seed}, retry=policy)
        except StepFailedError:
            made = "refused"
        return ctx.complete({"echo": echoed, "made": made})

    @rt.step("work")
    def work(input: Any, info: Any) -> Any:
        _invoked(info)
        if World.rng.random() < World.fail_rate:
            raise RuntimeError(f"flaky attempt {info.attempt}")
        return {"n": input["n"] if isinstance(input, dict) else 0}

    @rt.step("echo")
    def echo(input: Any, info: Any) -> Any:
        _invoked(info)
        if World.rng.random() < World.fail_rate:
            raise RuntimeError(f"flaky attempt {info.attempt}")
        return input

    @rt.step("hostile_out")
    def hostile_out(input: Any, info: Any) -> Any:
        _invoked(info)
        return made_by(input["seed"])

    return rt


def made_by(seed: int) -> Any:
    """What the ``hostile_out`` step returns for ``seed``: the same on every attempt."""
    rng = random.Random(seed)
    return hostile.with_nul(rng) if seed % 5 == 0 else hostile.hostile(rng)


def _invoked(info: Any) -> None:
    """Record a step invocation (and, sometimes, let the world move on while it runs)."""
    history = World.store.read_history(info.run_id)
    completed = any(
        e.event.event_key() == "step_completed" and e.event.step_id == info.step_id for e in history
    )
    World.invocations.append(Invocation(info.run_id, info.step_id, info.attempt, completed))
    if World.sim is not None and World.depth == 0 and World.rng.random() < World.slow_rate:
        # A slow step: its lease runs out while it runs, and other workers act meanwhile.
        World.depth += 1
        try:
            World.sim.while_a_step_runs()
        finally:
            World.depth -= 1


WORKFLOWS = (
    "steps",
    "surface",
    "timer",
    "signal",
    "hook",
    "parent",
    "looper",
    "cleanup",
    "hostile",
)
HOSTILE_RATE = 0.3
"""Share of signal and hook payloads that are hostile (every ``hostile`` run's input is)."""
NUL_RATE = 0.2
"""Share of the hostile values that hold a NUL."""


# -- the simulation -----------------------------------------------------------------------------


@dataclass
class Report:
    seed: int
    actions: int = 0
    runs: int = 0
    crashes: int = 0
    store_errors: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    where: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    hostile: Counter[str] = field(default_factory=Counter)
    """Hostile values offered, by ``refused:KIND`` / ``accepted:KIND``."""


class Simulation:
    def __init__(
        self,
        seed: int,
        *,
        workers: int = 3,
        actions: int = 120,
        store_factory: Callable[[], Any] = MemoryStore,
        eager_start: bool | None = None,
    ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.clock = ManualClock()
        self.raw = store_factory()
        self.faults = Faults(random.Random(seed * 7919 + 1))
        self.store = FaultyStore(self.raw, self.faults)
        self.runtime = build_runtime()
        self.n_workers = workers
        self.n_actions = actions
        self.spawned = 0
        self.workers = [self._spawn() for _ in range(workers)]
        # Half the seeds start runs eagerly (the client decides them in their creating commit,
        # Engine's default), half leave every decision to the workers.
        eager = seed % 2 == 0 if eager_start is None else eager_start
        self.client = Engine(
            self.store, [self.runtime], clock=self.clock, worker_id="client", eager_start=eager
        )
        self.started: dict[str, tuple[str, Any]] = {}
        """Runs a client asked to start: run id -> (workflow, input)."""
        self.hostile_facts: list[tuple[str, str, Any]] = []
        """Hostile payloads accepted: (run id, "signal" or the hook's token, payload)."""
        self.report = Report(seed)
        World.store = self.raw
        World.sim = self
        World.depth = 0
        World.rng = random.Random(seed * 104729 + 7)
        World.invocations = []

    def _spawn(self) -> Engine:
        self.spawned += 1
        return Engine(self.store, [self.runtime], clock=self.clock, worker_id=f"w{self.spawned}")

    # -- actions ---------------------------------------------------------------------------------

    def run(self) -> Report:
        for _ in range(self.n_actions):
            self.step()
        return self.finish()

    def step_workers_only(self) -> None:
        """One worker action or a small clock jump (no external facts)."""
        roll = self.rng.random()
        if roll < 0.45:
            self._worker_action(decide=True)
        elif roll < 0.9:
            self._worker_action(decide=False)
        else:
            self.clock.advance(self.rng.choice((1.0, LEASE_SECONDS + 1, 35.0)))

    def finish(self) -> Report:
        """Stop the faults, let every run end, check the invariants."""
        self.quiesce()
        self.check()
        self.report.faults = self.faults.injected
        self.report.where = self.faults.where
        self.report.runs = len(self.raw.find_runs(RunFilter()))
        self.raw.close()
        return self.report

    def step(self) -> None:
        self.report.actions += 1
        roll = self.rng.random()
        if roll < 0.35:
            self._worker_action(decide=True)
        elif roll < 0.70:
            self._worker_action(decide=False)
        elif roll < 0.82:
            self._jump()
        else:
            self._external()

    def _worker_action(self, *, decide: bool) -> None:
        index = self.rng.randrange(len(self.workers))
        worker = self.workers[index]
        try:
            if decide:
                for run_id in worker.work.lease_runs(LEASE_SECONDS, 1):
                    worker.decide(run_id)
            else:
                for lease in worker.work.lease_steps(LEASE_SECONDS, 1):
                    worker.work.execute_step(lease, LEASE_SECONDS)
        except Crash:
            self.report.crashes += 1
            self.workers[index] = self._spawn()  # the process died; a new one takes its place
        except StoreError:
            self.report.store_errors += 1  # a worker logs it and carries on with the next pass

    def while_a_step_runs(self) -> None:
        """Called from inside a step handler: time passes and other workers act."""
        self.clock.advance(self.rng.choice((1.0, LEASE_SECONDS + 1)))
        for _ in range(self.rng.randrange(1, 4)):
            self._worker_action(decide=self.rng.random() < 0.5)

    def _jump(self) -> None:
        self.clock.advance(self.rng.choice((0.5, 2.0, 6.0, LEASE_SECONDS + 1, 35.0, 700.0)))

    def _external(self) -> None:
        roll = self.rng.random()
        try:
            if roll < 0.45 or not self.started:
                workflow = self.rng.choice(WORKFLOWS)
                value: Any = {"k": len(self.started)}
                if workflow == "hostile":
                    value = hostile.value(self.rng, NUL_RATE)
                self.start_run(workflow, value, f"{workflow}-{len(self.started)}")
            elif roll < 0.65:
                self.send_signal(self.rng.choice(self._all_runs()), self._payload({"at": roll}))
            elif roll < 0.85:
                open_hooks = self._open_hooks()
                if open_hooks:
                    self.resolve(self.rng.choice(open_hooks), self._payload({"ok": True}))
            else:
                self.client.cancel(self.rng.choice(self._all_runs()), "simulated operator")
        except Crash:
            # The client's call failed (before or after its commit); quiesce retries starts.
            self.report.crashes += 1
        except FlowError:
            pass  # run finished, hook already resolved, ...: what a real client sees too

    def _payload(self, usual: Any) -> Any:
        if self.rng.random() < HOSTILE_RATE:
            return hostile.value(self.rng, NUL_RATE)
        return usual

    def start_run(self, workflow: str, value: Any, run_id: str) -> bool:
        """Start a run as a client does; False when its input was refused at the door."""
        # Recorded first: after a crash the client does not know if it was created.
        self.started[run_id] = (workflow, value)
        start = functools.partial(self.client.start, workflow, value, run_id=run_id)
        if self._offered("start", value, run_id, start, workflow == "hostile"):
            return True
        del self.started[run_id]  # refused: quiesce must not start it again
        return False

    def send_signal(self, run_id: str, payload: Any) -> bool:
        """Signal "go" as a client does; False when the payload was refused at the door."""
        signal = functools.partial(self.client.signal, run_id, "go", payload)
        tracked = not _plain(payload)
        if not self._offered("signal", payload, run_id, signal, tracked):
            return False
        if tracked:
            self.hostile_facts.append((run_id, "signal", payload))
        return True

    def resolve(self, token: str, payload: Any) -> bool:
        """Resolve a hook as a client does; False when the payload was refused at the door."""
        record = self.raw.find_hook(token)
        run_id = record.run_id if record is not None else "?"
        resolve = functools.partial(self.client.resolve_hook, token, payload)
        if not self._offered("hook", payload, run_id, resolve, not _plain(payload)):
            return False
        if not _plain(payload):
            self.hostile_facts.append((run_id, token, payload))
        return True

    def _offered(
        self, kind: str, value: Any, run_id: str, call: Callable[[], Any], tracked: bool
    ) -> bool:
        """Offer ``value`` through ``call``; False when it was refused at the door.

        A refusal must be for a NUL only, and must have written nothing to ``run_id``; an
        acceptance of a NUL is a violation where the rule is in place."""
        before = self._history_length(run_id)
        try:
            call()
        except InputError as exc:
            self.report.hostile[f"refused:{kind}"] += 1
            problems = self.report.problems
            if not hostile.has_nul(value):
                problems.append(f"run {run_id}: {kind} of a valid value refused: {exc}")
            if self._history_length(run_id) != before:
                problems.append(f"run {run_id}: a refused {kind} wrote to its history")
            return False
        if tracked:
            self.report.hostile[f"accepted:{kind}"] += 1
        if hostile.has_nul(value):
            self.report.problems.append(f"run {run_id}: {kind} of a value holding NUL accepted")
        return True

    def _history_length(self, run_id: str) -> int | None:
        record = self.raw.get_run(run_id)
        return None if record is None else int(record.last_sequence)

    def _all_runs(self) -> list[str]:
        return [r.run_id for r in self.raw.find_runs(RunFilter())] or list(self.started)

    def _open_hooks(self) -> list[str]:
        tokens = []
        for record in self.raw.find_runs(RunFilter()):
            if record.status.terminal:
                continue
            snap = _project(self.raw.read_history(record.run_id))
            tokens.extend(h.token for h in snap.hooks.values() if not h.resolved)
        return sorted(tokens)

    # -- after the faults -------------------------------------------------------------------------

    def quiesce(self, rounds: int = 60) -> None:
        """No more faults: deliver what runs wait for and let the clock run until all ended."""
        self.faults.enabled = False
        for run_id, (workflow, value) in self.started.items():  # retry unacknowledged starts
            self.client.start(workflow, value, run_id=run_id)
        for _ in range(rounds):
            for worker in self.workers:
                worker.tick(until_idle=True, lease_seconds=LEASE_SECONDS)
            pending = [r for r in self.raw.find_runs(RunFilter()) if not r.status.terminal]
            if not pending:
                return
            for record in pending:
                if record.workflow != "signal":
                    continue
                with contextlib.suppress(FlowError):
                    self.client.signal(record.run_id, "go", "late")
            for token in self._open_hooks():
                with contextlib.suppress(FlowError):
                    self.client.resolve_hook(token, "late")
            self.clock.advance(LEASE_SECONDS * 80)

    def check(self) -> None:
        problems = self.report.problems
        records = {r.run_id: r for r in self.raw.find_runs(RunFilter())}
        for run_id, record in sorted(records.items()):
            history = self.raw.read_history(run_id)
            problems.extend(f"run {run_id}: {p}" for p in history_problems(history))
            snap = _project(history)
            if not snap.terminal:
                problems.append(
                    f"run {run_id}: not terminal after quiescing ({snap.status}, "
                    f"failing: {record.failing})"
                )
            if record.status != snap.status:
                problems.append(
                    f"run {run_id}: index status {record.status} but history says {snap.status}"
                )
            if record.last_sequence != len(history):
                problems.append(
                    f"run {run_id}: index last_sequence {record.last_sequence} "
                    f"but history has {len(history)} events"
                )
            replay = replay_history(self.runtime, history)
            if not replay.ok:
                problems.append(
                    f"run {run_id}: replay fails: {replay.error} {list(replay.divergences)}"
                )
        problems.extend(self.hostile_problems())
        for call in World.invocations:
            if call.completed_before:
                problems.append(
                    f"run {call.run_id}: step {call.step_id!r} attempt {call.attempt} was "
                    "invoked after its step_completed was committed"
                )

    def hostile_problems(self) -> list[str]:
        """Accepted hostile values read back exactly; NUL step outputs failed once."""
        found: list[str] = []
        for run_id, (workflow, value) in self.started.items():
            if workflow != "hostile":
                continue
            history = self.raw.read_history(run_id)
            found.extend(f"run {run_id}: {p}" for p in hostile_run_problems(history, value))
        for run_id, where, payload in self.hostile_facts:
            if not any(_carries(e, where, payload) for e in self.raw.read_history(run_id)):
                found.append(f"run {run_id}: its {where} payload did not read back exactly")
        return found


def _plain(payload: Any) -> bool:
    """Whether ``payload`` is one of the simulation's usual small payloads."""
    return isinstance(payload, dict) and (payload.keys() in ({"at"}, {"ok"}))


def _carries(envelope: EventEnvelope, where: str, payload: Any) -> bool:
    event: Any = envelope.event
    key = event.event_key()
    if where == "signal":
        return key == "signal_received" and hostile.same(event.payload, payload)
    return key == "hook_resolved" and event.token == where and hostile.same(event.payload, payload)


def hostile_run_problems(history: list[EventEnvelope], value: Any) -> list[str]:
    """A ``hostile`` run's input, echo and step output read back exactly, or its NUL output
    failed its step once with ``StepOutputNotJSON``."""
    found = []
    first: Any = history[0].event
    if not hostile.same(first.spec.input, value):
        found.append("its input did not read back exactly")
    events: list[Any] = [e.event for e in history]
    echoed = [e.output for e in events if e.event_key() == "step_completed" and e.step_id == "e"]
    if any(not hostile.same(output, value) for output in echoed):
        found.append("the echo step's output did not read back exactly")
    made = made_by(zlib.crc32(history[0].run_id.encode()))
    of_h = [e for e in events if getattr(e, "step_id", None) == "h"]
    completed = [e for e in of_h if e.event_key() == "step_completed"]
    failed = [e for e in of_h if e.event_key() == "step_failed"]
    if not completed and not failed:
        return found  # cancelled before its attempt ended
    if hostile.has_nul(made):
        kinds = [(f.error_type, f.attempt, f.exhausted) for f in failed]
        if completed or len(failed) != 1 or failed[0].error_type != "StepOutputNotJSON":
            found.append(f"a step output holding NUL: completed {len(completed)}, failed {kinds}")
        elif not failed[0].exhausted or of_h[-1] is not failed[0]:
            found.append(f"a step output holding NUL was retried: {kinds}")
    elif failed or any(not hostile.same(e.output, made) for e in completed):
        found.append("the hostile step's output did not read back exactly")
    return found


def _project(history: list[EventEnvelope]) -> WorkflowRunSnapshot:
    snap = WorkflowRunSnapshot.start(history[0])
    for envelope in history[1:]:
        snap.apply(envelope)
    return snap


def history_problems(history: list[EventEnvelope]) -> list[str]:
    found = []
    sequences = [e.sequence for e in history]
    if sequences != list(range(1, len(history) + 1)):
        found.append(f"history is not gapless: {sequences}")
    keys = [e.event.event_key() for e in history]
    if not keys or keys[0] != "run_started" or "run_started" in keys[1:]:
        found.append("run_started is not exactly the first event")
    terminal = [
        i
        for i, k in enumerate(keys)
        if k in ("run_completed", "run_failed", "run_cancelled", "run_continued_as_new")
    ]
    if len(terminal) > 1 or (terminal and terminal[0] != len(keys) - 1):
        found.append(f"terminal events at {terminal} of {len(keys)}")
    completed = Counter(e.event.step_id for e in history if e.event.event_key() == "step_completed")
    found.extend(f"step {s!r} completed {n} times" for s, n in completed.items() if n > 1)
    return found


def simulate(seed: int, **options: Any) -> Report:
    return Simulation(seed, **options).run()
