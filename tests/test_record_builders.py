"""The builders the hot path uses instead of dataclass constructors: each makes exactly what the
plain way makes (``kind(...)``, ``dataclasses.replace``, a field-by-field ``to_data``)."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from flow_cli.engine.streams import Pending
from flow_cli.model.carried import carried, replaced
from flow_cli.model.events import (
    EVENT_TYPES,
    DecisionFailed,
    Event,
    EventEnvelope,
    RunStarted,
    StepScheduled,
    StepStarted,
    _encode,
    event_from_data,
)
from flow_cli.model.retry import RetryPolicy
from flow_cli.model.snapshot import WorkflowRunSnapshot
from flow_cli.model.spec import WorkflowSpec
from flow_cli.model.states import StepState
from flow_cli.model.status import StepStatus
from flow_cli.store.protocol import KEEP

NOW = datetime(2026, 12, 5, 12, 0, 0, 123456, tzinfo=UTC)
SPEC = WorkflowSpec(workflow="w", input={"a": [1, 2]}, runtime_build_id="b1")

# One value per declared field type of an event (a type missing here fails the test below).
VALUES: dict[str, Any] = {
    "str": "text with ünïcode",
    "str | None": "maybe",
    "int": 7,
    "bool": True,
    "float | None": 2.5,
    "datetime": NOW,
    "datetime | None": NOW,
    "JsonValue": {"nested": [1, "two", None, {"x": 1.5}]},
    "RetryPolicy": RetryPolicy(max_attempts=4, non_retryable=("ValueError",)),
    "WorkflowSpec": SPEC,
    "CancellationPolicy": "cancel",
    "tuple[str, ...]": ("a", "b"),
    "tuple[str, ...] | None": ("c",),
}


def _field_by_field(event: Event) -> dict[str, Any]:
    """``to_data`` as written before it was generated per kind: every field through
    ``_encode``, the ``WRITTEN_WHEN_SET`` ones dropped at their default."""
    renamed = dict(event.JSON_NAMES)
    data = {}
    for f in dataclasses.fields(event):
        value = getattr(event, f.name)
        if f.name in event.WRITTEN_WHEN_SET and value == f.default:
            continue
        data[renamed.get(f.name, f.name)] = _encode(value)
    return data


def _every_kind(fill: dict[str, Any]) -> list[Event]:
    made = []
    for kind in EVENT_TYPES.values():
        missing = [f.type for f in dataclasses.fields(kind) if f.type not in fill]
        assert not missing, f"{kind.__name__}: add a value for {missing} to VALUES"
        made.append(kind(**{f.name: fill[f.type] for f in dataclasses.fields(kind)}))
    return made


@pytest.mark.parametrize("sparse", [False, True], ids=["set", "defaults"])
def test_to_data_of_every_kind_is_the_field_by_field_encoding(sparse: bool) -> None:
    fill = dict(VALUES)
    if sparse:  # the optional fields at None: the WRITTEN_WHEN_SET ones are left out
        fill.update({t: None for t in fill if t.endswith("| None")})
    for event in _every_kind(fill):
        data = event.to_data()
        expected = _field_by_field(event)
        assert data == expected
        assert list(data) == list(expected)  # the stored JSON's key order
        assert json.dumps(data, ensure_ascii=False) == json.dumps(expected, ensure_ascii=False)
        assert event_from_data(event.event_key(), data).to_data() == data


def test_carried_makes_what_the_constructor_makes() -> None:
    scheduled = StepScheduled(
        step_id="s1", name="charge", input={"amount": 3}, retry=RetryPolicy(), timeout=5.0
    )
    state = carried(
        StepState, scheduled, status=StepStatus.SCHEDULED, sequence=4, attempt=1, scheduled_at=NOW
    )
    assert state == StepState(
        step_id="s1",
        name="charge",
        input={"amount": 3},
        retry=RetryPolicy(),
        batch_id=None,
        timeout=5.0,
        heartbeat_timeout=None,
        status=StepStatus.SCHEDULED,
        sequence=4,
        attempt=1,
        scheduled_at=NOW,
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        state.status = StepStatus.RUNNING  # type: ignore[misc]


def test_carried_refuses_a_field_given_twice_unknown_or_missing() -> None:
    scheduled = StepScheduled(step_id="s1", name="charge", input=None, retry=RetryPolicy())
    given = {"status": StepStatus.SCHEDULED, "sequence": 4, "attempt": 1}
    with pytest.raises(TypeError, match="name"):
        carried(StepState, scheduled, name="other", **given)
    with pytest.raises(TypeError, match="colour"):
        carried(StepState, scheduled, colour="red", **given)
    with pytest.raises(TypeError, match="status"):
        carried(StepState, scheduled, sequence=4, attempt=1)


def test_replaced_is_dataclasses_replace_for_every_field() -> None:
    assert not hasattr(StepState, "__post_init__")
    at = datetime(2026, 1, 2, tzinfo=UTC)
    step = StepState(
        step_id="a",
        name="inc",
        input={"x": 1},
        retry=RetryPolicy(),
        batch_id=None,
        status=StepStatus.SCHEDULED,
        sequence=3,
        attempt=1,
        scheduled_at=at,
    )
    values = {
        "step_id": "b",
        "name": "n",
        "input": [1],
        "retry": RetryPolicy(max_attempts=5),
        "batch_id": "g",
        "status": StepStatus.RUNNING,
        "sequence": 9,
        "attempt": 2,
        "attempts": 2,
        "output": {"y": 2},
        "error": {"type": "E"},
        "next_attempt_at": at,
        "lease_until": at,
        "worker": "w",
        "scheduled_at": at,
        "started_at": at,
        "finished_at": at,
        "cancel_reason": "r",
        "settled_sequence": 12,
        "timeout": 2.0,
        "heartbeat_timeout": 0.5,
        "runs": 2,
        "attempt_started_at": at,
    }
    assert set(values) == {f.name for f in dataclasses.fields(StepState)}
    for name, value in values.items():
        assert replaced(step, **{name: value}) == dataclasses.replace(step, **{name: value})
    assert replaced(step) == step
    assert replaced(step) is not step
    assert replaced(step, **values) == dataclasses.replace(step, **values)
    with pytest.raises(TypeError, match="colour"):
        replaced(step, colour="red")


def _snapshot() -> WorkflowRunSnapshot:
    return WorkflowRunSnapshot.start(
        EventEnvelope(
            run_id="r1", sequence=1, recorded_at=NOW, event=RunStarted(spec=SPEC, seed="0" * 32)
        )
    )


def _scheduled() -> StepScheduled:
    return StepScheduled(step_id="s1", name="charge", input=None, retry=RetryPolicy())


def test_a_write_of_a_run_that_never_failed_leaves_its_failing_columns_alone() -> None:
    pending = Pending.on(_snapshot(), NOW)
    pending.add([_scheduled()])
    index = pending.stream_write().index
    assert index.failing is KEEP
    assert index.error is KEEP


def test_a_write_that_fails_or_recovers_a_decision_sets_the_failing_columns() -> None:
    failed = DecisionFailed(error_type="ValueError", message="bad")
    pending = Pending.on(_snapshot(), NOW)
    pending.add([failed])
    assert pending.stream_write().index.failing == "ValueError: bad"
    # The run failed before these events and does no more: its row's failing is cleared.
    recovering = Pending.on(pending.snapshot, NOW)
    recovering.add([_scheduled()])
    index = recovering.stream_write().index
    assert index.failing is None
    assert index.error is None


def test_a_write_after_a_commit_of_the_same_pending_knows_the_run_was_failing() -> None:
    pending = Pending.on(_snapshot(), NOW)
    pending.add([DecisionFailed(error_type="ValueError", message="bad")])
    pending.expected_sequence = pending.snapshot.last_sequence
    pending.events = []
    pending.data = []
    pending.failed_before = "ValueError"  # as Streams.committed leaves it
    pending.add([_scheduled(), StepStarted(step_id="s1", attempt=1, worker="w", lease_until=NOW)])
    assert pending.stream_write().index.failing is None
