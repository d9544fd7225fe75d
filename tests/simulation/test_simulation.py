"""The deterministic simulation (issue 8): many seeds, each a reproducible run of the real engine.

``pytest tests/simulation`` runs 1,000 seeds (``--sim-seeds N`` or ``FLOW_SIM_SEEDS`` to change
that); a failing seed prints the one line that reproduces it: ``pytest tests/simulation --seed N``.
Each bug the simulator found stays below as a regression test with its seed.
"""

from __future__ import annotations

import os
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from flow_cli.store.protocol import RunFilter
from simulation import hostile
from simulation.sim import (
    Report,
    Simulation,
    World,
    history_problems,
    made_by,
    simulate,
)

CHUNKS = 10
DEFAULT_SEEDS = 1000


def _seeds(config: pytest.Config) -> list[int]:
    one = config.getoption("--seed")
    if one is not None:
        return [one]
    count = config.getoption("--sim-seeds") or int(os.environ.get("FLOW_SIM_SEEDS", DEFAULT_SEEDS))
    return list(range(count))


def _failures(seeds: list[int]) -> tuple[list[str], Counter[str], int]:
    failures: list[str] = []
    faults: Counter[str] = Counter()
    runs = 0
    for seed in seeds:
        try:
            report: Report = simulate(seed)
        except Exception as exc:  # the engine raised out of a worker action: also a bug
            failures.append(
                f"seed {seed}: {type(exc).__name__}: {exc}\n"
                f"  reproduce: pytest tests/simulation --seed {seed}"
            )
            continue
        faults.update(report.faults)
        runs += report.runs
        if report.problems:
            shown = "\n  ".join(report.problems[:10])
            failures.append(
                f"seed {seed}: {len(report.problems)} invariant violations:\n  {shown}\n"
                f"  reproduce: pytest tests/simulation --seed {seed}"
            )
    return failures, faults, runs


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_simulated_seeds_keep_every_invariant(
    request: pytest.FixtureRequest, chunk: int, capsys: pytest.CaptureFixture[str]
) -> None:
    seeds = _seeds(request.config)
    mine = seeds[chunk::CHUNKS]
    if not mine:
        pytest.skip("no seed in this chunk")
    failures, faults, runs = _failures(mine)
    with capsys.disabled():
        if request.config.getoption("verbose") > 0:
            print(f"\n  {len(mine)} seeds, {runs} runs, faults {dict(sorted(faults.items()))}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("seed", range(8))
def test_the_slower_sqlite_variant(tmp_path: Path, seed: int) -> None:
    from flow_cli.store.sqlite import SQLiteStore

    path = tmp_path / f"sim-{seed}.db"
    report = simulate(seed, actions=80, store_factory=lambda: SQLiteStore(path))
    reproduce = (
        f"pytest 'tests/simulation/test_simulation.py::test_the_slower_sqlite_variant[{seed}]'"
    )
    assert report.problems == [], f"reproduce: {reproduce}"
    assert report.runs > 0


def test_a_seed_replays_exactly() -> None:
    first, second = simulate(12345), simulate(12345)
    assert (first.actions, first.runs, first.crashes, first.faults) == (
        second.actions,
        second.runs,
        second.crashes,
        second.faults,
    )
    assert first.faults["crash_before_commit"] and first.faults["crash_after_commit"]


# -- crashes inside child creation and continue_as_new ------------------------------------------


def _creating(method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    creates = args[1] if len(args) > 1 else kwargs.get("creates", ())
    return method == "commit" and bool(creates)


@pytest.mark.parametrize("kind", ["crash_before_commit", "crash_after_commit", "event_conflict"])
@pytest.mark.parametrize("workflow", ["parent", "looper"])
@pytest.mark.parametrize("nth", [1, 2])
def test_a_fault_in_the_commit_that_creates_runs(workflow: str, kind: str, nth: int) -> None:
    """The commit that starts a child or a successor fails: it happens once, or not at all."""
    # The workers' commits are the target: the client leaves every decision to them.
    sim = Simulation(nth, actions=0, eager_start=False)
    seen = Counter[str]()

    def target(method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
        if not _creating(method, args, kwargs):
            return None
        seen["creating"] += 1
        return kind if seen["creating"] == nth else None

    sim.faults.target = target
    sim.started["r-0"] = (workflow, None)
    sim.client.start(workflow, None, run_id="r-0")
    for _ in range(200):
        sim.step_workers_only()
    report = sim.finish()
    assert seen["creating"] >= nth, "the fault never fired"
    assert report.faults[kind] == 1
    assert report.problems == []
    runs = {r.run_id: r for r in sim.raw.find_runs(RunFilter())}
    if workflow == "parent":
        assert sorted(runs) == ["r-0", "r-0/kid", "r-0/kid2"], sorted(runs)
    else:
        assert sorted(runs) == ["r-0", "r-0~1", "r-0~2"], sorted(runs)


def test_the_checks_see_a_broken_history() -> None:
    from flow_cli.model.events import EventEnvelope, StepCompleted

    sim = Simulation(1, actions=0)
    sim.client.start("steps", None, run_id="s-0")
    first = sim.raw.read_history("s-0")[0]
    done = StepCompleted(step_id="a", attempt=1, output=None)
    broken = [
        first,
        EventEnvelope(run_id="s-0", sequence=2, recorded_at=first.recorded_at, event=done),
        EventEnvelope(run_id="s-0", sequence=4, recorded_at=first.recorded_at, event=done),
    ]
    assert history_problems(broken) == [
        "history is not gapless: [1, 2, 4]",
        "step 'a' completed 2 times",
    ]


# -- hostile-but-valid JSON, and NUL (issue 25) -------------------------------------------------


class _KeptOpen:
    """The fixture's store, which the fixture (not the simulation) closes."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def close(self) -> None:
        pass


def test_hostile_values_round_trip_and_nul_is_refused(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every hostile-but-valid value reads back exactly from a run input, a signal payload, a
    hook payload and a step output; a NUL is refused at the door with nothing written, and a
    step returning one fails once with ``StepOutputNotJSON`` (its handler invoked once)."""
    monkeypatch.setattr(World, "fail_rate", 0.0)
    monkeypatch.setattr(World, "slow_rate", 0.0)
    valid = hostile.catalogue()
    offered = valid + list(hostile.NUL_VALUES)
    sim = Simulation(0, actions=0, store_factory=lambda: _KeptOpen(store))
    sim.faults.enabled = False
    accepted = [
        run_id
        for i, value in enumerate(offered)
        if sim.start_run("hostile", value, run_id := f"hostile-{i}")
    ]
    sim.start_run("cleanup", None, "sleeper")  # takes every signal while it sleeps
    for i in range(len(offered)):
        sim.start_run("hook", None, f"hook-{i}")
    for worker in sim.workers:
        worker.tick(until_idle=True)
    for value in offered:
        sim.send_signal("sleeper", value)
    tokens = sim._open_hooks()
    assert len(tokens) == len(offered)
    for token, value in zip(tokens, offered, strict=True):
        sim.resolve(token, value)
    report = sim.finish()

    assert report.problems == []
    nul = len(offered) - len(valid)
    made_nul = [r for r in accepted if hostile.has_nul(made_by(zlib.crc32(r.encode())))]
    assert made_nul, "no hostile run's step returned a NUL"
    kinds = ("start", "signal", "hook")
    tracked = {f"accepted:{kind}": len(valid) for kind in kinds}
    # The NUL rule: refused at the door with nothing written; a step output holding one fails
    # once, without retry.
    assert report.hostile == {**tracked, **{f"refused:{kind}": nul for kind in kinds}}
    for run_id in made_nul:
        calls = [(c.step_id, c.attempt) for c in World.invocations if c.run_id == run_id]
        assert calls.count(("h", 1)) == 1 and ("h", 2) not in calls, (run_id, calls)
