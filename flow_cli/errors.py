"""Every failure a caller of Flow can act on has its own exception type.

    FlowError
    ├── RunNotFound              no run with that id
    ├── RunAlreadyExists         same run id, different spec
    ├── RunFinished              signal / hook / cancel for a run that already ended
    ├── WorkflowNotFound         no hosted runtime defines that workflow
    ├── BuildNotHosted           no hosted runtime has that build id
    ├── EventConflict            append_if_sequence saw a stale expected sequence
    ├── NonDeterminismError      a command re-issued a recorded identity with other parameters
    ├── WorkflowError            workflow code raised or returned something that is not a command
    ├── HookNotFound             no hook was ever created with that token
    │   └── HookOfAnotherRun     the token is another run's than the one named
    ├── HookAlreadyResolved      the hook's callback was already delivered
    ├── HookTokenInUse           another hook already owns that token
    ├── ConfigError              flow.toml or a runtime reference is unusable
    ├── InputError               a payload is not valid JSON or has the wrong shape
    │   └── BuildAmbiguous       several builds define the workflow to start; none is default
    ├── NoLiveHost               no live worker hosts the build runs would move to
    └── StoreError               the database is missing, locked, unreachable or corrupt

Messages say what happened, where, and what to do next; the ids are attributes so that the
command line can render them without parsing strings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


class FlowError(Exception):
    """Root of every error Flow raises on purpose."""


class RunNotFound(FlowError):
    def __init__(self, run_id: str) -> None:
        super().__init__(f"Run {run_id!r} does not exist. List runs with `flow runs`.")
        self.run_id = run_id


class RunAlreadyExists(FlowError):
    def __init__(self, run_id: str, detail: str) -> None:
        super().__init__(
            f"Run {run_id!r} already exists with a different {detail}. "
            "Choose another --id, or start it with the same workflow and input."
        )
        self.run_id = run_id
        self.detail = detail


class RunFinished(FlowError):
    def __init__(self, run_id: str, status: str, action: str) -> None:
        super().__init__(f"Run {run_id!r} has already ended ({status}); cannot {action}.")
        self.run_id = run_id
        self.status = status
        self.action = action


class WorkflowNotFound(FlowError):
    def __init__(self, workflow: str, known: Sequence[str] = ()) -> None:
        hint = f" Known workflows: {', '.join(sorted(known))}." if known else ""
        super().__init__(f"No runtime defines workflow {workflow!r}.{hint}")
        self.workflow = workflow


class BuildNotHosted(FlowError):
    def __init__(self, build_id: str, hosted: Sequence[str] = ()) -> None:
        hint = f" Hosted builds: {', '.join(sorted(hosted))}." if hosted else ""
        super().__init__(f"No runtime with build id {build_id!r} is loaded.{hint}")
        self.build_id = build_id


class NoLiveHost(FlowError):
    """No live worker hosts the build runs would be moved to (``flow upgrade --to``)."""

    def __init__(self, build_id: str) -> None:
        super().__init__(
            f"no live worker hosts build {build_id!r}: runs moved to it would wait, unhosted "
            f"(flow doctor: build-unhosted). Start a worker hosting {build_id!r} first (see "
            "`flow workers`), or pass --allow-unhosted to move them anyway."
        )
        self.build_id = build_id


class EventConflict(FlowError):
    """Another writer appended to the run first; re-read the history and decide again."""

    def __init__(self, run_id: str, expected_sequence: int, actual_sequence: int | None) -> None:
        super().__init__(
            f"Run {run_id!r}: expected to append after sequence {expected_sequence}, "
            f"but the history is at {actual_sequence}. Re-read the history and retry."
        )
        self.run_id = run_id
        self.expected_sequence = expected_sequence
        self.actual_sequence = actual_sequence


@dataclass(frozen=True, slots=True)
class Mismatch:
    """One field of one identity that differs between history and the proposed command."""

    identity: str
    """The identity, e.g. ``step 'reserve-stock'``."""
    field: str
    """The field that differs, e.g. ``input``."""
    recorded: Any
    """The value in history (``None`` when the identity was never recorded)."""
    produced: Any
    """The value the workflow code proposes now."""

    @property
    def hint(self) -> str:
        """What to do about it, chosen by the cause (see ``mismatch_hint``)."""
        return mismatch_hint(self)


HINT_CLOCK = "did workflow code read the clock? derive deadlines from ctx.now or ctx.started_at"
HINT_REUSED_ID = "ids are unique within a run: give each call its own id (e.g. f'send-{recipient}')"
HINT_PATCHED = (
    "a change under the same build: guard it with ctx.patched('...') or start new runs "
    "under a new build id"
)
HINT_MISSING_RETURN = (
    "the workflow returned None: return the command, e.g. `return ctx.complete(result)`"
)
REUSED_ID_FIELD = "id"
"""The ``Mismatch.field`` of one identity used twice in one decision."""


def mismatch_hint(mismatch: Mismatch) -> str:
    """The hint that fits a mismatch's cause.

    A moved deadline is nearly always a clock read; a reused id is named as such; anything
    else is a change of code under the same build.
    """
    if mismatch.field == "deadline":
        return HINT_CLOCK
    if mismatch.field == REUSED_ID_FIELD:
        return HINT_REUSED_ID
    return HINT_PATCHED


class NonDeterminismError(FlowError):
    """The workflow code proposed a decision that history contradicts."""

    def __init__(self, run_id: str, sequence: int, mismatches: Sequence[Mismatch]) -> None:
        parts = "; ".join(
            f"{m.identity}: {m.field} was recorded as {_short(m.recorded)} "
            f"but the workflow now proposes {_short(m.produced)}"
            if m.field != REUSED_ID_FIELD
            else f"{m.identity}: used twice in one decision, first with {_short(m.recorded)} "
            f"then with {_short(m.produced)}"
            for m in mismatches
        )
        hints = list(dict.fromkeys(m.hint for m in mismatches))
        super().__init__(
            f"Run {run_id!r} at sequence {sequence}: {parts}. Hint: {'; '.join(hints)}."
        )
        self.run_id = run_id
        self.sequence = sequence
        self.mismatches = tuple(mismatches)


class WorkflowError(FlowError):
    """The workflow code raised, or returned something that is not one command."""

    def __init__(self, run_id: str, error_type: str, message: str) -> None:
        super().__init__(f"Run {run_id!r}: workflow code failed with {error_type}: {message}")
        self.run_id = run_id
        self.error_type = error_type
        self.detail = message


class HookNotFound(FlowError):
    def __init__(self, token: str) -> None:
        super().__init__(
            f"No hook has token {token!r}. Check the token in `flow show RUN` (hooks)."
        )
        self.token = token


class HookOfAnotherRun(HookNotFound):
    """The token exists, but ``--run`` (``run_id=``) named another run than its owner."""

    def __init__(self, token: str, owner: str, run_id: str) -> None:
        FlowError.__init__(
            self,
            f"Hook token {token!r} belongs to run {owner!r}, not to run {run_id!r}; "
            f"name run {owner!r} with --run, or leave --run out.",
        )
        self.token = token
        self.owner = owner
        self.run_id = run_id


class HookAlreadyResolved(FlowError):
    def __init__(self, token: str, run_id: str, hook_id: str) -> None:
        super().__init__(
            f"Hook {hook_id!r} of run {run_id!r} (token {token!r}) was already resolved; "
            "a hook takes exactly one callback."
        )
        self.token = token
        self.run_id = run_id
        self.hook_id = hook_id


class HookTokenInUse(FlowError):
    def __init__(self, token: str, run_id: str, hook_id: str) -> None:
        super().__init__(
            f"Token {token!r} already belongs to hook {hook_id!r} of run {run_id!r}; "
            "derive hook tokens with ctx.new_token(name)."
        )
        self.token = token
        self.run_id = run_id
        self.hook_id = hook_id


class ConfigError(FlowError):
    """flow.toml, FLOW_DB or a runtime reference cannot be used."""


class InputError(FlowError):
    """A payload or argument is malformed (bad JSON, wrong shape)."""


class BuildAmbiguous(InputError):
    """Several loaded builds define the workflow to start, and none is the default."""

    def __init__(self, workflow: str, builds: Sequence[str]) -> None:
        super().__init__(
            f"workflow {workflow!r} is defined by builds {', '.join(builds)} and none is the "
            "default (flow.toml's build_id): pass --build-id B to say which one starts it."
        )
        self.workflow = workflow
        self.builds = tuple(builds)


class RunStillOpen(FlowError):
    """A run's result was asked for (without waiting) before the run ended."""


class StoreError(FlowError):
    """The database is missing, locked, unreachable or not a Flow database."""


def _short(value: Any, limit: int = 120) -> str:
    import json

    try:
        text = json.dumps(value, sort_keys=True, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
