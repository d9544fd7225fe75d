"""Properties (acceptance 8) over random workflows driven in random orders.

A ``program`` run interprets random operations (steps that succeed, fail or retry, batches,
timers, signals, hooks, children, a continuation, a failure); a random sequence of outside
actions (ticks, clock moves, signals, hook callbacks, cancellations) drives it. Then, for every
run it produced:

* ``project(history)`` equals the snapshot folded one event at a time, at every prefix, and the
  engine's cached snapshot;
* every event survives the codec (``event_from_data(key, e.to_data())`` and the envelope's
  ``to_json`` / ``from_json``, through real JSON text);
* the history keeps the invariants: gapless sequences, one terminal event at most and it is
  last, never two ``step_completed`` for one step;
* replaying it against the code that recorded it finds no divergence.
"""

from __future__ import annotations

import json
from typing import Any

from engine_workflows import check_history_invariants, make_engine, program_runtime
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from flow_cli.engine.engine import Engine
from flow_cli.engine.replay_check import replay_history
from flow_cli.errors import HookAlreadyResolved, HookNotFound, RunFinished
from flow_cli.model.clock import ManualClock
from flow_cli.model.events import EventEnvelope, event_from_data
from flow_cli.model.snapshot import WorkflowRunSnapshot, project
from flow_cli.runtime import Runtime
from flow_cli.store.memory import MemoryStore

HANDLERS = st.sampled_from(["ok", "fail", "flaky"])
SIGNALS = st.sampled_from(["a", "b"])

SIMPLE_OPS = st.one_of(
    st.tuples(st.just("step"), HANDLERS),
    st.tuples(st.just("wait"), st.integers(0, 20)),
    st.tuples(st.just("signal"), SIGNALS),
    st.tuples(st.just("hook")),
)
OPS = st.one_of(
    SIMPLE_OPS,
    st.tuples(st.just("batch"), st.lists(HANDLERS, min_size=1, max_size=3)),
    st.tuples(
        st.just("child"),
        st.sampled_from(["cancel", "abandon"]),
        st.lists(SIMPLE_OPS, max_size=2),
    ),
    st.tuples(st.just("continue")),
    st.tuples(st.just("fail")),
    st.tuples(st.just("first"), st.integers(0, 20)),
    st.tuples(st.just("updates")),
)
PROGRAMS = st.fixed_dictionaries({"ops": st.lists(OPS, max_size=5), "cleanup": st.booleans()})
ACTIONS = st.one_of(
    st.just(("tick",)),
    st.tuples(st.just("advance"), st.integers(1, 15)),
    st.tuples(st.just("signal"), st.integers(0, 9), SIGNALS),
    st.tuples(st.just("hook"), st.integers(0, 9)),
    st.tuples(st.just("cancel"), st.integers(0, 9)),
    st.tuples(st.just("update"), st.integers(0, 9)),
)

SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _run_ids(engine: Engine) -> list[str]:
    return sorted(r.run_id for r in engine.list_runs())


def _open_tokens(engine: Engine) -> list[str]:
    tokens = []
    for run_id in _run_ids(engine):
        for hook in engine.snapshot(run_id).hooks.values():
            tokens.append(hook.token)
    return sorted(tokens)


def _act(engine: Engine, clock: ManualClock, action: tuple[Any, ...]) -> None:
    """One outside action; refusals the API documents (a finished run, a used hook) are fine."""
    runs = _run_ids(engine)
    try:
        match action:
            case ("tick",):
                engine.tick(until_idle=True)
            case ("advance", seconds):
                clock.advance(seconds)
            case ("signal", index, name):
                engine.signal(runs[index % len(runs)], name, {"sent": index})
            case ("hook", index):
                tokens = _open_tokens(engine)
                if tokens:
                    engine.resolve_hook(tokens[index % len(tokens)], {"hook": index})
            case ("cancel", index):
                engine.cancel(runs[index % len(runs)], f"cancel {index}")
            case ("update", index):
                engine.update(runs[index % len(runs)], "note", {"sent": index})
    except (RunFinished, HookAlreadyResolved):
        pass


def _check_run(engine: Engine, runtime: Runtime, run_id: str) -> None:
    history = engine.history(run_id)
    check_history_invariants(history)

    # Folding one event at a time equals projecting every prefix from scratch.
    folded = WorkflowRunSnapshot.start(history[0])
    assert folded == project(history[:1])
    for k in range(1, len(history)):
        folded.apply(history[k])
        assert folded == project(history[: k + 1])
    assert folded == project(history)
    assert engine.snapshot(run_id) == folded

    # The codec, through real JSON text.
    for envelope in history:
        key = envelope.event.event_key()
        data = json.loads(json.dumps(envelope.event.to_data()))
        assert event_from_data(key, data) == envelope.event
        text = json.dumps(envelope.to_json())
        assert EventEnvelope.from_json(run_id, json.loads(text)) == envelope

    # The recording code replays its own history without a divergence.
    result = replay_history(runtime, history)
    assert result.error is None, result.error
    assert result.ok, [d.to_json() for d in result.divergences]


@SETTINGS
@given(program=PROGRAMS, actions=st.lists(ACTIONS, max_size=15))
def test_random_runs_project_fold_round_trip_and_replay(
    program: dict[str, Any], actions: list[tuple[Any, ...]]
) -> None:
    runtime = program_runtime()
    clock = ManualClock()
    store = MemoryStore()
    engine = make_engine(store, [runtime], clock)
    engine.start("program", program, run_id="root")
    for action in actions:
        _act(engine, clock, action)
    # Let everything that can settle, settle.
    for _ in range(3):
        engine.tick(until_idle=True)
        clock.advance(60)
    engine.tick(until_idle=True)

    for run_id in _run_ids(engine):
        _check_run(engine, runtime, run_id)


class EngineMachine(RuleBasedStateMachine):
    """The engine on a MemoryStore under random starts and outside actions."""

    @initialize()
    def setup(self) -> None:
        self.runtime = program_runtime()
        self.clock = ManualClock()
        self.engine = make_engine(MemoryStore(), [self.runtime], self.clock)
        self.started = 0

    @rule(program=PROGRAMS)
    def start(self, program: dict[str, Any]) -> None:
        self.started += 1
        result = self.engine.start("program", program, run_id=f"run-{self.started}")
        assert result.created

    @rule(action=ACTIONS)
    def act(self, action: tuple[Any, ...]) -> None:
        if self.started:
            _act(self.engine, self.clock, action)

    @rule(token=st.text(min_size=1, max_size=8))
    def unknown_hook(self, token: str) -> None:
        if token in _open_tokens(self.engine):
            return
        before = {r: len(self.engine.history(r)) for r in _run_ids(self.engine)}
        try:
            self.engine.resolve_hook(token, None)
        except HookNotFound:
            pass
        else:  # pragma: no cover - the assertion below explains it
            raise AssertionError(f"resolve_hook accepted unknown token {token!r}")
        assert {r: len(self.engine.history(r)) for r in _run_ids(self.engine)} == before

    @invariant()
    def histories_are_well_formed(self) -> None:
        for run_id in _run_ids(self.engine):
            history = self.engine.history(run_id)
            check_history_invariants(history)
            assert self.engine.snapshot(run_id) == project(history)
            record = self.engine.get_run(run_id)
            assert record.last_sequence == len(history)
            assert record.status is project(history).status


EngineMachine.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
test_engine_state_machine = EngineMachine.TestCase
