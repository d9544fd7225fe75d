"""``flow upgrade``: re-pin open runs from one build to another, once they replay there.

A run is pinned to the build that started it (rule 10). To move runs in flight to new code, each
open run of build ``from_build`` is replayed against ``to_build``'s code at every recorded
decision — the very check ``flow replay-check`` makes (``replay_history``, which runs the decision
function) — and, when nothing diverges, a ``build_upgraded`` event ``{"from", "to"}`` is appended
with ``append_if_sequence`` on the sequence that was checked. The same commit moves the run's
index row and its step tasks to the new build, so from then on only workers hosting
``to_build`` decide the run and run its steps. A run that moved between the check and the
append (``EventConflict``) is read and checked again, a bounded number of times.

Refused, with the reasons: a run whose history diverges from ``to_build``'s code (its recorded
patch markers included: ``to_build`` must know them; a step or child workflow it scheduled that
``to_build`` does not host diverges too, so an open step can always run there), or whose history
cannot be replayed. Runs keep their patch markers. Runs that ended, and runs pinned to another
build, are never touched.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from flow_cli.engine.engine import Engine
from flow_cli.engine.replay_check import Divergence, replay_history
from flow_cli.engine.streams import Write
from flow_cli.errors import BuildNotHosted, EventConflict, InputError, RunNotFound, StoreError
from flow_cli.model.events import BuildUpgraded
from flow_cli.model.snapshot import project
from flow_cli.model.status import RunStatus
from flow_cli.runtime import Runtime
from flow_cli.store.protocol import RunFilter

MAX_CHECKS = 20
"""Times one run is checked when it keeps moving between the check and the append."""

OPEN_STATUSES = tuple(s for s in RunStatus if not s.terminal)


@dataclass(frozen=True, slots=True)
class Refusal:
    """A run left on its build, and why."""

    run_id: str
    divergences: tuple[Divergence, ...]
    """Where ``to_build``'s code disagrees with the history (empty when the reason is another)."""
    reason: str
    """One sentence."""

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "divergences": [d.to_json() for d in self.divergences],
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class Skipped:
    """A run named or found that is not an open run of ``from_build``: not touched."""

    run_id: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"run_id": self.run_id, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class UpgradeReport:
    """What ``upgrade_runs`` did (or, with ``dry_run``, would do)."""

    from_build: str
    to_build: str
    dry_run: bool
    upgraded: tuple[str, ...]
    """Runs re-pinned to ``to_build`` (with ``dry_run``: that would be)."""
    refused: tuple[Refusal, ...]
    skipped: tuple[Skipped, ...] = ()
    rechecked: int = 0
    """Checks made again because the run moved between its check and the append."""

    @property
    def ok(self) -> bool:
        return not self.refused

    def to_json(self) -> dict[str, Any]:
        """The shape of ``flow upgrade --json``."""
        return {
            "from": self.from_build,
            "to": self.to_build,
            "dry_run": self.dry_run,
            "upgraded": list(self.upgraded),
            "refused": [r.to_json() for r in self.refused],
            "skipped": [s.to_json() for s in self.skipped],
        }


def upgrade_runs(
    engine: Engine,
    from_build: str,
    to_build: str,
    *,
    where: RunFilter | None = None,
    run_ids: Sequence[str] | None = None,
    dry_run: bool = False,
    progress: Callable[[str], None] | None = None,
) -> UpgradeReport:
    """Re-pin the open runs of ``from_build`` that replay cleanly on ``to_build``.

    The runs are ``run_ids`` when given (an empty sequence selects none), else those matching
    ``where`` (narrowed to open runs of ``from_build``), else every open run of ``from_build``.
    ``to_build`` must be one of the engine's runtimes; ``from_build`` need not be (its code
    may be gone already). With ``dry_run`` every run is checked and nothing is written.
    ``progress`` is called with each run id once it is done.

    Raises ``InputError`` (same build twice, filters that cannot select open runs of
    ``from_build``), ``BuildNotHosted`` (``to_build`` unknown), ``RunNotFound`` (a named run
    does not exist; nothing is changed then) and ``StoreError`` (the database failed; when runs
    were re-pinned before it, the message names them).
    """
    if from_build == to_build:
        raise InputError(
            f"--from and --to are both {from_build!r}; name the build the runs are pinned to "
            "and the build to move them to."
        )
    runtime = engine.runtimes.get(to_build)
    if runtime is None:
        raise BuildNotHosted(to_build, list(engine.runtimes))
    targets = _targets(engine, from_build, where, run_ids)
    upgraded: list[str] = []
    refused: list[Refusal] = []
    skipped: list[Skipped] = []
    rechecked = 0
    for run_id in targets:
        try:
            outcome, again = _upgrade_one(engine, runtime, run_id, from_build, dry_run)
        except StoreError as error:
            if not upgraded or dry_run:
                raise
            # The runs moved so far stay moved: say which, or the operator cannot tell.
            shown = ", ".join(upgraded[:3]) + (
                f" and {len(upgraded) - 3} more" if len(upgraded) > 3 else ""
            )
            raise StoreError(
                f"{str(error).rstrip('.')} — flow upgrade stopped at run {run_id}, after "
                f"re-pinning {len(upgraded)} run(s) to {to_build} ({shown}); run it again for "
                "the rest."
            ) from error
        rechecked += again
        if isinstance(outcome, Refusal):
            refused.append(outcome)
        elif isinstance(outcome, Skipped):
            skipped.append(outcome)
        else:
            upgraded.append(run_id)
        if progress is not None:
            progress(run_id)
    return UpgradeReport(
        from_build=from_build,
        to_build=to_build,
        dry_run=dry_run,
        upgraded=tuple(upgraded),
        refused=tuple(refused),
        skipped=tuple(skipped),
        rechecked=rechecked,
    )


def _targets(
    engine: Engine,
    from_build: str,
    where: RunFilter | None,
    run_ids: Sequence[str] | None,
) -> list[str]:
    if run_ids is not None:  # named runs, maybe none (an empty stdin): never every run of B1
        ids = list(dict.fromkeys(run_ids))
        for run_id in ids:
            if engine.find_run(run_id) is None:
                raise RunNotFound(run_id)
        return ids
    where = where or RunFilter()
    if where.build_id is not None and where.build_id != from_build:
        raise InputError(
            f"--build-id {where.build_id!r} contradicts --from {from_build!r}; "
            "flow upgrade acts on runs of the --from build only."
        )
    statuses = tuple(s for s in (where.statuses or OPEN_STATUSES) if not s.terminal)
    if not statuses:
        raise InputError(
            "--status names only ended runs, and runs that ended are never upgraded; "
            "select Pending, Running, Suspended or Cancelling runs."
        )
    records = engine.find_runs(replace(where, build_id=from_build, statuses=statuses))
    return [r.run_id for r in records]


def _upgrade_one(
    engine: Engine, runtime: Runtime, run_id: str, from_build: str, dry_run: bool
) -> tuple[Refusal | Skipped | str, int]:
    """Check and re-pin one run; the second value counts the checks made again."""
    for attempt in range(MAX_CHECKS):
        history = engine.history(run_id)
        snap = project(history)
        if snap.terminal:
            return Skipped(run_id, f"it has ended ({snap.status.value}); not touched"), attempt
        pinned = snap.spec.runtime_build_id
        if pinned != from_build:
            return Skipped(run_id, f"it is pinned to build {pinned!r}, not {from_build!r}"), attempt
        checked = replay_history(runtime, history)
        if checked.error is not None:
            reason = f"its history could not be replayed: {checked.error}"
            return Refusal(run_id, checked.divergences, reason), attempt
        divergences = checked.divergences
        if divergences:
            return Refusal(run_id, divergences, _reason(divergences, runtime.build_id)), attempt
        if dry_run:
            return run_id, attempt
        now = engine.clock.now()
        event = BuildUpgraded(from_build=from_build, to_build=runtime.build_id)
        try:
            # On the sequence just checked: a run that moved meanwhile is checked again. Due
            # now, so that a worker of the new build looks at it at once (a run stuck on a
            # failed decision gets the fixed code's answer without waiting for its back-off).
            engine.commit_facts([Write(snap, [event], decide_at=now)], now=now)
        except EventConflict:
            continue
        return run_id, attempt
    reason = (
        f"it kept moving while it was checked ({MAX_CHECKS} times); run flow upgrade again "
        "once it is quieter"
    )
    return Refusal(run_id, (), reason), MAX_CHECKS - 1


def _reason(divergences: Sequence[Divergence], build: str) -> str:
    first = divergences[0]
    more = len(divergences) - 1
    others = f" and {more} more" if more else ""
    what = f"{first.identity} {first.field} at event {first.sequence} diverges"
    return f"it does not replay on {build}: {what}{others}"


__all__ = ["MAX_CHECKS", "Refusal", "Skipped", "UpgradeReport", "upgrade_runs"]
