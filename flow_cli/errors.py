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
    ├── RunIdTaken               a child's or successor's derived run id belongs to another run
    ├── ForkDiverges             a fork's copied history does not replay on its build
    ├── NonDeterministicCall     workflow code read the clock, randomness or a fresh id
    ├── CommandNotReturned       workflow code built a command and returned another one
    ├── SuspensionCaught         workflow code caught Flow's suspension (a bare ``except``)
    ├── UnknownPatch             ``ctx.patched(name)`` names a marker the build does not declare
    ├── UpdateRejected           an update handler refused the update (its reason is the message)
    ├── UpdateIdReused           an update id already applied with another name or other args
    ├── SignalKeyReused          a signal key already delivered with another payload
    ├── HandlerFailed            a query or update handler raised (nothing was written)
    │   └── CommandInHandler     a query or update handler called a ctx command method
    ├── RunBuildNotLoaded        a query or update needs the run's build, not loaded here
    ├── HookNotFound             no hook was ever created with that token
    │   └── HookOfAnotherRun     the token is another run's than the one named
    ├── HookAlreadyResolved      the hook's callback was already delivered
    ├── HookTokenInUse           another hook already owns that token
    ├── StepTimedOut             a step attempt ran past its timeout
    ├── HeartbeatTimedOut        a step attempt went silent past its heartbeat_timeout
    ├── StepCancelled            info.heartbeat() in an attempt that is no longer wanted
    ├── StepNotUnknown           flow step resolve on a step whose outcome is not unknown
    ├── ConfigError              flow.toml or a runtime reference is unusable
    ├── InputError               a payload is not valid JSON or has the wrong shape
    │   ├── BuildAmbiguous       several builds define the workflow to start; none is default
    │   ├── UndeclaredName       a query, update or signal name the workflow does not declare
    │   ├── ScheduleInvalid      a schedule's cron, interval, zone, overlap or range is wrong
    │   ├── ScheduleExists       a schedule with that id exists already
    │   └── ScheduleNotFound     no schedule with that id
    ├── NoLiveHost               no live worker hosts the build runs would move to
    ├── StepOutputNotJSON        a step returned a value Flow cannot store (fails without retry)
    └── StoreError               the database is missing, locked, unreachable or corrupt
        ├── StoreUnreachable     it cannot be reached or opened (says nothing of its contents)
        │   └── StoreUnavailable locked or unreachable for now: waiting and retrying helps
        ├── DatabaseMissing      there is no Flow database at that location
        ├── DatabaseCorrupt      stored data cannot be read back (`flow check` says what to do)
        └── StoreRefused         the database refused one run's data: retrying will not help

Messages say what happened, where, and what to do next; the ids are attributes so that the
command line can render them without parsing strings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar


class FlowError(Exception):
    """Root of every error Flow raises on purpose."""


def _run_named(run_id: str) -> str:
    """How the message of an error of one run begins."""
    return f"Run {run_id!r}: "


class _OfRun(FlowError):
    """An error of one run, which ``run_id`` holds (the command line names it without parsing
    the message)."""

    def __init__(self, run_id: str, message: str) -> None:
        super().__init__(message)
        self.run_id = run_id


class _RunError(_OfRun):
    """An error of one run whose message begins with the run's id."""

    def __init__(self, run_id: str, message: str) -> None:
        super().__init__(run_id, _run_named(run_id) + message)


class RunNotFound(_OfRun):
    def __init__(self, run_id: str) -> None:
        super().__init__(run_id, f"Run {run_id!r} does not exist. List runs with `flow runs`.")


class RunAlreadyExists(_OfRun):
    def __init__(self, run_id: str, detail: str) -> None:
        super().__init__(
            run_id,
            f"Run {run_id!r} already exists with a different {detail}. "
            "Choose another --id, or start it with the same workflow and input.",
        )
        self.detail = detail


class ForkIdTaken(RunAlreadyExists):
    """``flow fork --id NEW`` names a run that exists (whatever its spec)."""

    def __init__(self, run_id: str) -> None:
        _OfRun.__init__(self, run_id, f"Run {run_id!r} already exists; give the fork another --id.")
        self.detail = "id"


class RunFinished(_OfRun):
    def __init__(self, run_id: str, status: str, action: str) -> None:
        super().__init__(run_id, f"Run {run_id!r} has already ended ({status}); cannot {action}.")
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


class EventConflict(_RunError):
    """Another writer appended to the run first; re-read the history and decide again."""

    def __init__(self, run_id: str, expected_sequence: int, actual_sequence: int | None) -> None:
        super().__init__(
            run_id,
            f"expected to append after sequence {expected_sequence}, "
            f"but the history is at {actual_sequence}. Re-read the history and retry.",
        )
        self.expected_sequence = expected_sequence
        self.actual_sequence = actual_sequence


class LimitFull(EventConflict):
    """A commit would start a step attempt that its step's limit has no room for: nothing was
    written. Decided again, the attempt is left ready for a lease that counts it."""

    def __init__(self, run_id: str, expected_sequence: int, name: str) -> None:
        super().__init__(run_id, expected_sequence, expected_sequence)
        self.args = (
            f"Run {run_id!r}: the limit of step {name!r} has no room for an attempt started "
            "in this commit. Decide again; the attempt waits for a lease.",
        )
        self.name = name


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
    cause: str | None = None
    """What is known of the cause beyond the field (``MOVES_WITH_NOW``), for the hint."""

    @property
    def hint(self) -> str:
        """What to do about it, chosen by the cause (see ``mismatch_hint``)."""
        return mismatch_hint(self)


HINT_CLOCK = "did workflow code read the clock? derive deadlines from ctx.now or ctx.started_at"
HINT_MOVING_DEADLINE = (
    "the deadline moves with ctx.now (ctx.now + a duration is later at every decision): "
    "derive it from ctx.started_at, or use timeout= (counted from the decision that opened the "
    "wait)"
)
HINT_REUSED_ID = "ids are unique within a run: give each call its own id (e.g. f'send-{recipient}')"
HINT_PATCHED = (
    "a change under the same build: guard it with ctx.patched('...') or start new runs "
    "under a new build id"
)
HINT_MISSING_RETURN = (
    "the workflow returned None: return the command, e.g. `return ctx.complete(result)`"
)
MOVES_WITH_NOW = "moves-with-now"
"""``Mismatch.cause`` of a deadline that is ctx.now plus the same duration at every decision."""
REUSED_ID_FIELD = "id"
"""The ``Mismatch.field`` of one identity used twice in one decision."""


def mismatch_hint(mismatch: Mismatch) -> str:
    """The hint that fits a mismatch's cause.

    A moved deadline is nearly always a clock read; a reused id is named as such; anything
    else is a change of code under the same build.
    """
    if mismatch.field == "deadline":
        return HINT_MOVING_DEADLINE if mismatch.cause == MOVES_WITH_NOW else HINT_CLOCK
    if mismatch.field == REUSED_ID_FIELD:
        return HINT_REUSED_ID
    return HINT_PATCHED


class NonDeterminismError(_OfRun):
    """The workflow code proposed a decision that history contradicts."""

    def __init__(self, run_id: str, sequence: int, mismatches: Sequence[Mismatch]) -> None:
        parts = "; ".join(
            "{}: {} was recorded as {} but the workflow now proposes {}".format(
                m.identity, m.field, *_side_by_side(m.recorded, m.produced)
            )
            if m.field != REUSED_ID_FIELD
            else "{}: used twice in one decision, first with {} then with {}".format(
                m.identity, *_side_by_side(m.recorded, m.produced)
            )
            for m in mismatches
        )
        hints = list(dict.fromkeys(m.hint for m in mismatches))
        super().__init__(
            run_id, f"Run {run_id!r} at sequence {sequence}: {parts}. Hint: {'; '.join(hints)}."
        )
        self.sequence = sequence
        self.mismatches = tuple(mismatches)


class WorkflowError(_RunError):
    """The workflow code raised, or returned something that is not one command."""

    def __init__(self, run_id: str, error_type: str, message: str) -> None:
        said = message.removeprefix(_run_named(run_id))  # the run is named once
        super().__init__(run_id, f"workflow code failed with {error_type}: {said}")
        self.error_type = error_type
        self.detail = message


class NonDeterministicCall(_RunError):
    """Workflow code called the wall clock, module-level ``random`` or ``uuid`` while deciding:
    the value would differ on replay."""

    def __init__(self, run_id: str, call: str, replacement: str) -> None:
        super().__init__(
            run_id,
            f"workflow code called {call} while deciding; it gives another "
            f"value on every replay. Hint: use {replacement} instead (steps may call it).",
        )
        self.call = call
        self.replacement = replacement


class CommandNotReturned(_RunError):
    """Workflow code built a command (``ctx.schedule_step`` ...) and returned another one: the
    command it built would never happen."""

    def __init__(self, run_id: str, built: str, returned: str) -> None:
        super().__init__(
            run_id,
            f"workflow code built {built} but returned {returned}, so it would "
            "never happen. Hint: return it, or gather it with ctx.all_steps (ctx.all_children, "
            "ctx.schedule_steps).",
        )
        self.built = built
        self.returned = returned


class SuspensionCaught(_RunError):
    """Workflow code caught the suspension a sequential helper raises (``ctx.step`` ...) and
    went on: the helper's command would never happen."""

    def __init__(self, run_id: str, identity: str, returned: str) -> None:
        super().__init__(
            run_id,
            f"workflow code caught Flow's suspension of {identity} and went on "
            f"to {returned}; {identity} would never run. Hint: do not wrap ctx helpers in a bare "
            "`except:` or `except BaseException:`; catch the exceptions you mean "
            "(`except StepFailedError:`, `except Exception:`).",
        )
        self.identity = identity
        self.returned = returned


class UnknownPatch(_RunError):
    """``ctx.patched(name)`` names a patch marker the run's build does not declare."""

    def __init__(self, run_id: str, name: str, declared: Sequence[str]) -> None:
        known = ", ".join(repr(p) for p in sorted(declared)) or "none"
        super().__init__(
            run_id,
            f"ctx.patched({name!r}) names a patch marker the build does not "
            f"declare (declared: {known}). Hint: add it to Runtime(patches=[...]) or fix the "
            "name.",
        )
        self.name = name
        self.declared = tuple(declared)


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


class _HookOfRun(FlowError):
    """A hook named by its token, with the run and hook that own it."""

    def __init__(self, message: str, token: str, run_id: str, hook_id: str) -> None:
        super().__init__(message)
        self.token = token
        self.run_id = run_id
        self.hook_id = hook_id


class HookAlreadyResolved(_HookOfRun):
    def __init__(self, token: str, run_id: str, hook_id: str) -> None:
        super().__init__(
            f"Hook {hook_id!r} of run {run_id!r} (token {token!r}) was already resolved; "
            "a hook takes exactly one callback.",
            token,
            run_id,
            hook_id,
        )


class HookTokenInUse(_HookOfRun):
    def __init__(self, token: str, run_id: str, hook_id: str) -> None:
        super().__init__(
            f"Token {token!r} already belongs to hook {hook_id!r} of run {run_id!r}; "
            "derive hook tokens with ctx.new_token(name).",
            token,
            run_id,
            hook_id,
        )


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


class UndeclaredName(InputError):
    """A query, update or signal name that the run's workflow does not declare."""

    def __init__(self, run_id: str, kind: str, name: str, declared: Sequence[str]) -> None:
        names = ", ".join(sorted(declared)) if declared else "none"
        kinds = "queries" if kind == "query" else f"{kind}s"
        super().__init__(
            f"Run {run_id!r}: its workflow declares no {kind} {name!r}. Declared {kinds}: {names}."
        )
        self.run_id = run_id
        self.kind = kind
        self.name = name
        self.declared = tuple(sorted(declared))


class UpdateRejected(FlowError):
    """Raise it in an ``@runtime.update`` handler to refuse the update: nothing is recorded
    and the caller gets ``reason`` (``flow update`` exits 1 with ``rejected: reason``)."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"rejected: {reason}")
        self.reason = reason


class UpdateIdReused(_RunError):
    """An update id that was already applied with another name or other args."""

    def __init__(self, run_id: str, update_id: str, detail: str) -> None:
        super().__init__(
            run_id,
            f"update id {update_id!r} was already applied with {detail}; "
            "an update id names one request. Send this one under another --id.",
        )
        self.update_id = update_id


class SignalKeyReused(_RunError):
    """A signal idempotency key already delivered with another payload."""

    def __init__(self, run_id: str, name: str, key: str, sequence: int) -> None:
        super().__init__(
            run_id,
            f"signal {name!r} with key {key!r} was already delivered (event "
            f"{sequence}) with another payload; a key names one message. Send this one under "
            "another --key.",
        )
        self.key = key
        self.sequence = sequence


class HandlerFailed(_RunError):
    """A query or update handler raised something else than ``UpdateRejected``."""

    def __init__(self, run_id: str, kind: str, name: str, handler: str, error: str) -> None:
        super().__init__(
            run_id,
            f"{kind} handler {handler} ({name!r}) raised {error}; nothing was "
            "written. Fix the handler and deploy it.",
        )
        self.kind = kind
        self.name = name
        self.handler = handler


class CommandInHandler(HandlerFailed):
    """A query or update handler called a command method of its read-only ``ctx``."""


class RunBuildNotLoaded(_OfRun):
    """A query or update runs the run's own build code, which is not loaded in this process."""

    def __init__(self, run_id: str, build_id: str, loaded: Sequence[str]) -> None:
        hint = f" Loaded builds: {', '.join(sorted(loaded))}." if loaded else ""
        super().__init__(
            run_id,
            f"Run {run_id!r} is pinned to build {build_id!r}, which is not loaded here; its "
            f"handlers run with its own code. Add that build to flow.toml's runtimes.{hint}",
        )
        self.build_id = build_id


class ScheduleInvalid(InputError):
    """A schedule's definition cannot be used: the message says what and shows a right one."""

    def __init__(self, schedule_id: str, problem: str, example: str) -> None:
        super().__init__(f"schedule {schedule_id!r}: {problem}; e.g. {example}")
        self.schedule_id = schedule_id
        self.problem = problem
        self.example = example


class ScheduleExists(InputError):
    """``flow schedule create`` with an id that is taken."""

    def __init__(self, schedule_id: str) -> None:
        super().__init__(
            f"schedule {schedule_id!r} exists already; change it with "
            f"`flow schedule update {schedule_id} ...` or pick another id."
        )
        self.schedule_id = schedule_id


class ScheduleNotFound(InputError):
    """No schedule has that id."""

    def __init__(self, schedule_id: str) -> None:
        super().__init__(
            f"no schedule {schedule_id!r}; `flow schedule list` shows the schedules there are."
        )
        self.schedule_id = schedule_id


class LimitInvalid(InputError):
    """A flow-control limit that cannot be used (``flow limits set``, ``@runtime.step(rate=)``):
    the message says what is wrong and what a right one looks like."""

    def __init__(self, problem: str, example: str) -> None:
        super().__init__(f"{problem}; e.g. {example}")
        self.problem = problem
        self.example = example


class RunStillOpen(FlowError):
    """A run's result was asked for (without waiting) before the run ended."""


class ArchiveFailed(FlowError):
    """An archive file or its manifest could not be written (a full disk, permissions): the
    runs of that batch were not deleted."""

    def __init__(self, directory: str, reason: str) -> None:
        super().__init__(
            f"cannot write the archive {directory}: {reason}; the runs not archived were not "
            "deleted (free space or fix permissions, then run flow prune again)."
        )


class StoreError(FlowError):
    """The database is missing, locked, unreachable or not a Flow database."""


class DatabaseCorrupt(StoreError):
    """Stored data cannot be read: a damaged page, text that is not UTF-8, an event or row that
    does not decode. ``detail`` says what, without the raw bytes; ``flow check`` says what to do.
    """

    def __init__(self, where: str, detail: str) -> None:
        super().__init__(
            f"Flow database {where} is corrupt: {detail}; run `flow check` for what to do."
        )
        self.where = where
        self.detail = detail


class StoreUnreachable(StoreError):
    """The database cannot be reached or opened: the server is down or refuses this user, or
    the file is missing, unreadable or locked. It says nothing about what the database holds,
    so ``flow check`` must not call it damage (restoring a backup over live data would be)."""


class DatabaseMissing(StoreError):
    """There is no Flow database at that location (a SQLite file that does not exist, a
    PostgreSQL schema Flow never created). ``where`` names what is missing."""

    def __init__(self, message: str, where: str) -> None:
        super().__init__(message)
        self.where = where


class StoreUnavailable(StoreUnreachable):
    """The database is locked by another process or its server is unreachable: an outage,
    which a worker waits out (one line when it starts, one when it ends)."""


class StoreRefused(StoreError):
    """The database refused the data of one commit (a value it cannot hold): not an outage.
    Other runs' commits go on; the run is shown failing its decision (``flow doctor``)."""


class _OfStep(FlowError):
    """An error of one step attempt, whose step ``step`` holds (the name its message begins
    with)."""

    def __init__(self, step: str, message: str) -> None:
        super().__init__(message)
        self.step = step


class _OverTime(_OfStep):
    """A step attempt ran past one of its time limits (``seconds``): it is recorded failed and
    retried per the step's policy."""

    def __init__(self, step: str, seconds: float, message: str) -> None:
        super().__init__(step, message)
        self.seconds = seconds


class StepOutputNotJSON(_OfStep):
    """A step handler returned a value Flow cannot store: not JSON (a set, bytes, a datetime,
    NaN, a non-string key) or a string holding NUL. The attempt fails without retry: running
    the step again would repeat its side effects and return the same kind of value."""

    def __init__(self, step: str, problem: str) -> None:
        super().__init__(
            step,
            f"Step {step!r} returned a value Flow cannot store: {problem}. Return JSON "
            "(dict, list, str, int, float, bool or None), e.g. convert sets to lists, "
            "datetimes to ISO text and bytes to base64.",
        )
        self.problem = problem


class StepTimedOut(_OverTime):
    """A step attempt ran past its ``timeout``. The attempt is recorded failed and retried per
    the step's policy; whatever the handler returns later is discarded."""

    def __init__(self, step: str, seconds: float) -> None:
        super().__init__(
            step,
            seconds,
            f"Step {step!r} ran past its timeout of {seconds:g}s; the attempt was failed and "
            "its late result will be discarded. Raise the step's timeout, or make the handler "
            "give up sooner.",
        )


class HeartbeatTimedOut(_OverTime):
    """A step attempt went silent (no ``info.heartbeat()``) for longer than its
    ``heartbeat_timeout``; failed and retried per its policy like ``StepTimedOut``."""

    def __init__(self, step: str, seconds: float) -> None:
        super().__init__(
            step,
            seconds,
            f"Step {step!r} sent no heartbeat for {seconds:g}s (its heartbeat_timeout); the "
            "attempt was failed. Call info.heartbeat() more often than that, or raise the "
            "heartbeat_timeout.",
        )


class StepCancelled(_OfStep):
    """Raised by ``info.heartbeat()`` once the attempt is no longer wanted (it timed out, lost
    its lease, or the run is cancelling): stop working and let it propagate."""

    def __init__(self, step: str, why: str) -> None:
        super().__init__(
            step,
            f"Step {step!r}: this attempt is cancelled ({why}); its result will be discarded. "
            "Let this exception propagate.",
        )
        self.why = why


class StepNotUnknown(_OfRun):
    """``flow step resolve`` on a step whose outcome is not unknown (it has no
    ``step_outcome_unknown`` waiting, or someone settled it first): nothing was written."""

    def __init__(self, run_id: str, step_id: str, state: str) -> None:
        super().__init__(
            run_id,
            f"step {step_id!r} of run {run_id!r} is {state}, not unknown: only an attempt "
            "recorded step_outcome_unknown is resolved. See `flow show` for its state.",
        )
        self.step_id = step_id
        self.state = state


SHOWN_CHARS = 120
"""How much of a recorded or produced value a message shows."""


def _text(value: Any) -> str:
    import json

    try:
        return json.dumps(value, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return repr(value)


def _side_by_side(recorded: Any, produced: Any, limit: int = SHOWN_CHARS) -> tuple[str, str]:
    """Both values as JSON text, cut to ``limit`` characters around their first difference.

    Cutting each at its start would hide a difference that lies further in (two step inputs
    equal but for a time stamp at the end): both sides show the same window, starting a little
    before the first character where they differ, so the difference stays visible.
    """
    a, b = _text(recorded), _text(produced)
    if len(a) <= limit and len(b) <= limit:
        return a, b
    first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
    if first is None:
        first = min(len(a), len(b))
    # Shifted only when the difference would fall outside a window that starts at 0.
    start = 0 if first + limit // 4 < limit else first - limit // 4
    return _window(a, start, limit), _window(b, start, limit)


def _window(text: str, start: int, limit: int) -> str:
    if start == 0 and len(text) <= limit:
        return text
    head = "…" if start > 0 else ""
    body = text[start : start + limit - len(head)]
    tail = "…" if start + len(body) < len(text) else ""
    return head + (body[: len(body) - len(tail)] if tail else body) + tail


class RunIdTaken(_OfRun):
    """A run id the engine derives for a child or a successor belongs to another run."""

    def __init__(self, run_id: str) -> None:
        super().__init__(
            run_id,
            f"Run id {run_id!r}, which the engine derives for a child or a continuation, "
            "already belongs to another run; choose another child id, or start this run "
            "under another id.",
        )


class Diverging(Protocol):
    """What an error says of one divergence (``flow_cli.engine.replay_check.Divergence``)."""

    @property
    def identity(self) -> str: ...

    @property
    def field(self) -> str: ...

    @property
    def recorded(self) -> Any: ...

    @property
    def produced(self) -> Any: ...


D = TypeVar("D", bound=Diverging)


class ForkDiverges(FlowError, Generic[D]):
    """The fork's history would not replay on its build (exit 3, like replay-check)."""

    def __init__(self, run_id: str, divergences: Sequence[D]) -> None:
        first = divergences[0] if divergences else None
        where = (
            f": {first.identity} {first.field} was {first.recorded!r}, now {first.produced!r}"
            if first is not None
            else ""
        )
        super().__init__(
            f"Fork of run {run_id!r} refused: the copied history does not replay on its build "
            f"({len(divergences)} divergence{'s' if len(divergences) != 1 else ''}{where}); "
            "fork from an earlier step, without --input, or onto a build that replays it."
        )
        self.divergences = tuple(divergences)
