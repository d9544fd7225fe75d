"""Walking many runs a page at a time (``flow_cli.engine.paging``): the same runs in the same
order as one query, never more than a page asked of the store, on every store; and ``flow
doctor``'s report the same whatever the page size."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta

import pytest
from engine_workflows import make_engine

from flow_cli import Runtime, WorkflowContext
from flow_cli.engine.engine import Engine
from flow_cli.engine.paging import paged, paged_by_status
from flow_cli.model.clock import ManualClock
from flow_cli.model.commands import RuntimeCommand
from flow_cli.model.status import RunStatus
from flow_cli.ops import disk_sort
from flow_cli.ops.doctor import diagnose
from flow_cli.store.protocol import EventStore, RunFilter, RunRecord

runtime = Runtime(build_id="paging-1")


@runtime.workflow("waits")
def waits(ctx: WorkflowContext) -> RuntimeCommand:
    return ctx.complete(ctx.receive("go", "go"))


@runtime.workflow("sleeps")
def sleeps(ctx: WorkflowContext) -> RuntimeCommand:
    ctx.sleep("nap", timedelta(days=1))
    return ctx.complete(None)


@runtime.workflow("done")
def done(ctx: WorkflowContext) -> RuntimeCommand:
    return ctx.complete(1)


@pytest.fixture
def engine(store: EventStore, clock: ManualClock) -> Engine:
    engine = make_engine(store, [runtime], clock)
    for n in range(9):
        # Every third run starts at the same instant as the one before: the cursor's tie-break
        # (creation order) is walked too.
        if n % 3:
            clock.advance(timedelta(seconds=1))
        engine.start(("waits", "sleeps", "done")[n % 3], None, run_id=f"r{n}")
    engine.tick(until_idle=True)
    return engine


class Recorder:
    """A ``fetch`` that remembers what it was asked."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.asked: list[RunFilter] = []

    def __call__(self, where: RunFilter) -> Sequence[RunRecord]:
        self.asked.append(where)
        return self.engine.find_runs(where)


def ids(records: Sequence[RunRecord]) -> list[str]:
    return [r.run_id for r in records]


@pytest.mark.parametrize("size", [1, 2, 4, 9, 50])
def test_paged_lists_what_one_query_lists(engine: Engine, size: int) -> None:
    for where in (
        RunFilter(),
        RunFilter(statuses=(RunStatus.SUSPENDED,)),
        RunFilter(statuses=(RunStatus.COMPLETED, RunStatus.SUSPENDED)),
        RunFilter(workflow="waits"),
        RunFilter(limit=5),
        RunFilter(after="r6"),
        RunFilter(after="r7", limit=3),
    ):
        recorder = Recorder(engine)
        walked = ids(list(paged(recorder, where, size)))
        assert walked == ids(engine.find_runs(where)), where
        # Never more than a page asked for; each page after the first starts after the last
        # run of the one before.
        assert all(asked.limit is not None and asked.limit <= size for asked in recorder.asked)
        assert recorder.asked[0].after == where.after
        for before, asked in zip(recorder.asked, recorder.asked[1:], strict=False):
            assert asked.after is not None and asked.after != before.after
            assert (
                walked.index(asked.after)
                == sum(a.limit or 0 for a in recorder.asked[: recorder.asked.index(asked)]) - 1
            )


def test_paged_by_status_walks_each_status_by_itself(engine: Engine) -> None:
    where = RunFilter(statuses=(RunStatus.SUSPENDED, RunStatus.COMPLETED))
    recorder = Recorder(engine)
    walked = ids(list(paged_by_status(recorder, where, 2)))
    assert sorted(walked) == sorted(ids(engine.find_runs(where)))
    assert len(walked) == len(set(walked)) == 9
    assert {len(asked.statuses) for asked in recorder.asked} == {1}
    with pytest.raises(ValueError):
        list(paged_by_status(recorder, replace(where, limit=3), 2))


def test_doctor_reports_the_same_whatever_the_page_size(engine: Engine) -> None:
    now = engine.clock.now() + timedelta(hours=2)
    whole = diagnose(engine, RunFilter(), now, page_size=10_000)
    assert whole.total == 6  # three wait on a signal, three sleep
    asked: list[RunFilter] = []
    real = engine.run_states

    def run_states(where: RunFilter) -> list:  # type: ignore[type-arg]
        asked.append(where)
        return real(where)

    engine.run_states = run_states  # type: ignore[method-assign]
    for size in (1, 2, 5):
        asked.clear()
        report = diagnose(engine, RunFilter(), now, page_size=size)
        assert report.to_json() == whole.to_json()
        assert asked and all(w.limit is not None and w.limit <= size for w in asked)
    kept = diagnose(engine, RunFilter(), now, page_size=2, keep=1)
    assert kept.summary == whole.summary and kept.total == whole.total and kept.ok == whole.ok
    causes = [d.cause for d in whole.runs]
    assert [d.run_id for d in kept.runs] == [
        d.run_id for n, d in enumerate(whole.runs) if causes.index(d.cause) == n
    ]  # the longest-waiting run of each cause
    # With a limit: one page, in listing order, and its cursor.
    limited = diagnose(engine, RunFilter(limit=2), now)
    assert limited.next_after is not None and len(limited.runs) == 2


def test_doctor_sorted_on_disk_lists_what_it_lists_in_memory(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Past HOLD diagnoses ``flow doctor --json`` sorts them in a temporary file (memory flat
    # in the open runs): the same runs, in the same order, counted the same.
    now = engine.clock.now() + timedelta(hours=2)
    held = diagnose(engine, RunFilter(), now, page_size=2)
    monkeypatch.setattr(disk_sort, "HOLD", 2)
    spilled = diagnose(engine, RunFilter(), now, page_size=2)
    assert not isinstance(spilled.runs, list)  # read back from disk
    assert list(spilled.runs) == list(held.runs) and len(spilled.runs) == 6
    assert spilled.to_json() == held.to_json()
    assert (spilled.summary, spilled.ok, spilled.total) == (held.summary, held.ok, held.total)
    assert spilled.runs[1:4] == held.runs[1:4] and spilled.runs[-1] == held.runs[-1]
    assert spilled.runs[::2] == held.runs[::2]
