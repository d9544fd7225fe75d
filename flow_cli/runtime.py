"""The authoring API: ``Runtime``, ``@runtime.workflow``, ``@runtime.step``, step ``info``, and
``@runtime.query`` / ``@runtime.update``."""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal, TypeVar

from flow_cli.errors import (
    HINT_MISSING_RETURN,
    ConfigError,
    InputError,
    StepCancelled,
    WorkflowError,
    WorkflowNotFound,
)
from flow_cli.model import deciding
from flow_cli.model.attributes import AttributeValue, check_attributes
from flow_cli.model.commands import COMMAND_TYPES, RuntimeCommand
from flow_cli.model.context import STEP_NAME_ATTRIBUTE, WorkflowContext, seconds_or_none
from flow_cli.model.decision import Proposal
from flow_cli.model.jsonval import JsonValue
from flow_cli.model.limits import DeclaredLimit, check_concurrency, parse_rate
from flow_cli.model.names import check_name
from flow_cli.model.snapshot import WorkflowRunSnapshot
from flow_cli.model.suspension import Suspend

WorkflowFn = Callable[[WorkflowContext], RuntimeCommand]
Handler = Callable[[WorkflowContext, Any], Any]
"""A query or update handler: ``fn(ctx, args) -> JSON``."""
StepFn = Callable[[Any, "StepInfo"], Any]
F = TypeVar("F", bound=Callable[..., Any])


OnLost = Literal["retry", "unknown"]


class AttemptVanished(BaseException):
    """Raised by a test's fake handler (``flow_cli.testing.vanish``): the attempt's worker is
    gone mid-attempt. Nothing is recorded; the heartbeats it sent are stored (as its last
    lease renewal would have); its lease lapses and whoever finds it decides (run it again,
    fail it past its timeout, or record its outcome unknown)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StepOptions:
    """The defaults ``@runtime.step`` gives every attempt of a handler (a schedule's own
    ``timeout`` / ``heartbeat_timeout`` win)."""

    timeout: float | None = None
    heartbeat_timeout: float | None = None
    on_lost: OnLost = "retry"


class AttemptControl:
    """The running attempt's side of ``StepInfo``: its heartbeats and whether it is still
    wanted. Shared between the handler's thread and the worker that watches it."""

    def __init__(self, load: Callable[[], JsonValue] | None = None) -> None:
        self._load = load
        """Reads the previous attempt's last heartbeat details, when first asked for."""
        self._previous: JsonValue = None
        self.details: JsonValue = None
        self.beats = 0
        self.last_beat = time.monotonic()
        self._why: str | None = None
        self._lock = threading.Lock()

    def beat(self, details: JsonValue) -> None:
        with self._lock:
            self.details = details
            self.beats += 1
            self.last_beat = time.monotonic()

    @property
    def previous(self) -> JsonValue:
        """Details of the previous attempt's last heartbeat (read once, on first use)."""
        load, self._load = self._load, None
        if load is not None:
            self._previous = load()
        return self._previous

    def latest(self) -> tuple[int, JsonValue]:
        """How many heartbeats so far, and the last one's details."""
        with self._lock:
            return self.beats, self.details

    def cancel(self, why: str) -> None:
        """Mark the attempt unwanted; its next ``heartbeat()`` raises ``StepCancelled``."""
        with self._lock:
            if self._why is None:
                self._why = why

    @property
    def cancelled(self) -> str | None:
        return self._why


@dataclass(frozen=True, slots=True, kw_only=True)
class StepInfo:
    """What a step handler knows about the attempt it runs."""

    run_id: str
    step_id: str
    name: str
    attempt: int
    """1-based; a re-run after a crash keeps the same number."""
    worker: str
    trace_context: str | None = None
    """The W3C ``traceparent`` of this attempt's span when the run records a trace context
    (``flow start --traceparent``): send it on with the calls the handler makes."""
    control: AttemptControl = field(default_factory=AttemptControl, compare=False, repr=False)

    def idempotency_key(self, resource: str) -> str:
        """``"{run_id}:{step_id}:{resource}"``: send it with every external side effect."""
        return f"{self.run_id}:{self.step_id}:{resource}"

    def heartbeat(self, details: JsonValue = None) -> None:
        """Say the attempt is alive (resets its ``heartbeat_timeout``) and keep ``details``
        (JSON) as its progress: the next attempt reads them as ``info.last_heartbeat``.
        Cheap: no history event; the worker stores the latest details with its lease renewal.
        Raises ``StepCancelled`` once the attempt is no longer wanted."""
        why = self.control.cancelled
        if why is not None:
            raise StepCancelled(self.step_id, why)
        self.control.beat(details)

    @property
    def last_heartbeat(self) -> JsonValue:
        """The details of the previous attempt's last heartbeat (``None`` on a first attempt
        or when it sent none): resume from that checkpoint."""
        return self.control.previous

    @property
    def cancelled(self) -> bool:
        """True once the attempt timed out, lost its lease, or its run is cancelling."""
        return self.control.cancelled is not None


class Runtime:
    """Workflows and steps of one build of your code.

    ``build_id`` pins runs to this code; ``patches`` are the patch markers new runs record.
    """

    def __init__(self, build_id: str, patches: Iterable[str] = ()) -> None:
        if not build_id:
            raise ConfigError("Runtime(build_id=...) must not be empty")
        self.build_id = build_id
        self.patches = tuple(patches)
        deciding.install()  # refuse the clock, randomness and fresh ids in workflow code
        self.workflows: dict[str, WorkflowFn] = {}
        self.steps: dict[str, StepFn] = {}
        self.step_options: dict[str, StepOptions] = {}
        """Step name → the defaults its ``@runtime.step`` gave."""
        self.signals: dict[str, tuple[str, ...]] = {}
        """Workflow name → the signal names it declares (absent: it accepts any name)."""
        self.queries: dict[str, dict[str, Handler]] = {}
        """Workflow name → query name → handler ``fn(ctx, args)``."""
        self.updates: dict[str, dict[str, Handler]] = {}
        """Workflow name → update name → handler ``fn(ctx, args)``."""
        self.attributes: dict[str, Callable[[Any], Mapping[str, Any]]] = {}
        """Workflow name → its ``attributes=`` function: ``fn(input) -> {key: value}``."""
        self.limits: dict[str, DeclaredLimit] = {}
        """``step:NAME`` / ``workflow:NAME`` → the limits the decorator declared (every
        workflow and step has an entry, unlimited ones too: a worker registers them all, so
        ``flow limits set`` knows them)."""

    def workflow(
        self,
        name: str,
        *,
        signals: Iterable[str] | None = None,
        attributes: Callable[[Any], Mapping[str, Any]] | None = None,
        concurrency: int | None = None,
        concurrency_key: str | None = None,
    ) -> Callable[[F], F]:
        """Register a workflow function ``fn(ctx) -> command`` under ``name``.

        ``signals``: the signal names its runs accept, recorded in each run's spec; a signal
        with another name is refused at the door. Leave it out to accept any name.

        ``attributes``: ``fn(input) -> {key: value}``, the search attributes each run starts
        with (``attributes=lambda input: {"customer": input["customer"]}``); values are
        strings, numbers or booleans. ``flow start --attr`` adds to them and wins on a key.

        ``concurrency``: at most this many runs of the workflow in progress at once, fleet-wide
        (from their first decision to their end); with ``concurrency_key``, per distinct value
        of that field of the run's input. A run over the limit stays ``Pending``; runs are
        admitted in start order. ``flow limits set workflow:NAME`` overrides it.
        """
        if attributes is not None and not callable(attributes):
            raise ConfigError(
                f"workflow {name!r}: attributes= takes a function of the input, "
                f"not {type(attributes).__name__}"
            )
        declared = None if signals is None else tuple(dict.fromkeys(signals))
        for signal in declared or ():
            check_name(signal, "signal name")
        check_concurrency(concurrency)
        if concurrency_key is not None and concurrency is None:
            raise ConfigError(f"workflow {name!r}: concurrency_key needs a concurrency")
        limit = DeclaredLimit(
            target=f"workflow:{name}", concurrency=concurrency, key=concurrency_key
        )

        def register(fn: F) -> F:
            if name in self.workflows:
                raise ConfigError(f"build {self.build_id!r} defines workflow {name!r} twice")
            self.workflows[name] = fn
            self.limits[limit.target] = limit
            if declared is not None:
                self.signals[name] = declared
            if attributes is not None:
                self.attributes[name] = attributes
            return fn

        return register

    def start_attributes(
        self, workflow: str, input: JsonValue, given: Mapping[str, Any] | None = None
    ) -> dict[str, AttributeValue] | None:
        """The search attributes a run of ``workflow`` starts with: its ``attributes=``
        function's, then ``given`` over them; ``None`` when there are none. Raises
        ``InputError`` for a value that is not a string, number or boolean, or when the
        function raises."""
        found: dict[str, AttributeValue] = {}
        fn = self.attributes.get(workflow)
        where = f"workflow {workflow!r} attributes="
        if fn is not None:
            try:
                made = fn(input)
            except Exception as exc:
                raise InputError(
                    f"{where} raised {type(exc).__name__}: {exc} (with input {input!r})"
                ) from None
            found.update(check_attributes(made, where))
        if given:
            found.update(check_attributes(given, "attributes"))
        return found or None

    def query(self, workflow: str, name: str) -> Callable[[F], F]:
        """Register query ``name`` of ``workflow``: ``fn(ctx, args) -> JSON``.

        It runs in the asking process on the run's current history with a read-only ``ctx``
        (a command method raises) and writes nothing (``flow query``, ``engine.query``).
        """
        return self._handler(self.queries, "query", workflow, name)

    def update(self, workflow: str, name: str) -> Callable[[F], F]:
        """Register update ``name`` of ``workflow``: ``fn(ctx, args) -> JSON``.

        It validates the request on the run's current history (raise ``UpdateRejected`` to
        refuse it) and answers; the answer is recorded (``update_applied``) and the workflow
        reads it with ``ctx.updates(name)`` (``flow update``, ``engine.update``).
        """
        return self._handler(self.updates, "update", workflow, name)

    def _handler(
        self, table: dict[str, dict[str, Handler]], kind: str, workflow: str, name: str
    ) -> Callable[[F], F]:
        check_name(name, f"{kind} name")

        def register(fn: F) -> F:
            handlers = table.setdefault(workflow, {})
            if name in handlers:
                raise ConfigError(
                    f"build {self.build_id!r} defines {kind} {name!r} of workflow {workflow!r} "
                    "twice"
                )
            handlers[name] = fn
            return fn

        return register

    def step(
        self,
        name: str,
        *,
        timeout: timedelta | float | None = None,
        heartbeat_timeout: timedelta | float | None = None,
        on_lost: OnLost = "retry",
        concurrency: int | None = None,
        rate: str | None = None,
    ) -> Callable[[F], F]:
        """Register a step handler ``fn(input, info) -> output`` (sync or async) as ``name``.

        The function remembers its name, so workflows can pass it to ``ctx.step`` directly.
        ``timeout`` / ``heartbeat_timeout`` bound each attempt unless the workflow gives its
        own; ``on_lost="unknown"``: an attempt whose worker vanished is not run again but
        recorded ``step_outcome_unknown`` for an operator to resolve.

        ``concurrency``: at most this many attempts of the step in flight at once, fleet-wide;
        ``rate`` (``"20/1s"``, ``"100/1m"``, ``"1000/1h"``): at most that many attempts
        started per period. A step over a limit waits ready (no attempt is used); the database
        enforces both across every worker. ``flow limits set step:NAME`` overrides them.
        """
        if on_lost not in ("retry", "unknown"):
            raise ConfigError(f"step {name!r}: on_lost must be 'retry' or 'unknown'")
        limit = DeclaredLimit(
            target=f"step:{name}",
            concurrency=check_concurrency(concurrency),
            rate=None if rate is None else parse_rate(rate),
        )
        options = StepOptions(
            timeout=seconds_or_none(timeout, "timeout"),
            heartbeat_timeout=seconds_or_none(heartbeat_timeout, "heartbeat_timeout"),
            on_lost=on_lost,
        )

        def register(fn: F) -> F:
            if name in self.steps:
                raise ConfigError(f"build {self.build_id!r} defines step {name!r} twice")
            known = getattr(fn, STEP_NAME_ATTRIBUTE, name)
            if known != name:
                raise ConfigError(
                    f"{fn.__qualname__} is already registered as step {known!r}; one function "
                    "has one step name"
                )
            setattr(fn, STEP_NAME_ATTRIBUTE, name)
            self.steps[name] = fn
            self.limits[limit.target] = limit
            if options != StepOptions():
                self.step_options[name] = options
            return fn

        return register

    def decide(self, snapshot: WorkflowRunSnapshot) -> RuntimeCommand:
        """Call the workflow once on ``snapshot`` and return its one command.

        Raises ``WorkflowNotFound`` for an unknown workflow, ``WorkflowError`` when the code
        returns something that is not a command; exceptions of the code propagate.
        """
        return self.propose(snapshot).command

    def propose(self, snapshot: WorkflowRunSnapshot) -> Proposal:
        """Like ``decide``, also saying whether the code stopped at a blocking helper."""
        fn = self.workflows.get(snapshot.spec.workflow)
        if fn is None:
            raise WorkflowNotFound(snapshot.spec.workflow, list(self.workflows))
        previous = deciding.enter(snapshot.run_id)
        try:
            proposal = self.call(fn, WorkflowContext(snapshot, self.patches), snapshot)
        except BaseException as exc:
            refused = deciding.leave(previous)
            if refused is not None and refused is not exc:
                # The code caught the refused call and failed otherwise: the call is the cause.
                raise refused from None
            raise
        refused = deciding.leave(previous)
        if refused is not None:
            raise refused  # the code caught it and went on
        return proposal

    def call(self, fn: WorkflowFn, ctx: WorkflowContext, snapshot: WorkflowRunSnapshot) -> Proposal:
        """Call workflow ``fn`` once with ``ctx`` and check how it ended (``ctx._ended``)."""
        try:
            command = fn(ctx)
        except Suspend as suspend:
            ctx._ended(suspend.command, suspend)
            return Proposal(suspend.command, suspend.blocking, tuple(ctx._attribute_calls))
        proposal = self.proposal(snapshot, command)
        ctx._ended(proposal.command)
        if ctx._attribute_calls:
            proposal = Proposal(proposal.command, attributes=tuple(ctx._attribute_calls))
        return proposal

    def proposal(self, snapshot: WorkflowRunSnapshot, command: object) -> Proposal:
        """What the workflow function returned, checked to be one command."""
        if command is None:
            raise WorkflowError(
                snapshot.run_id,
                "InvalidCommand",
                f"workflow {snapshot.spec.workflow!r} returned None. Hint: {HINT_MISSING_RETURN}",
            )
        if not isinstance(command, COMMAND_TYPES):
            raise WorkflowError(
                snapshot.run_id,
                "InvalidCommand",
                f"workflow {snapshot.spec.workflow!r} returned {type(command).__name__}; "
                "return exactly one ctx command (ctx.schedule_step, ctx.complete, ...)",
            )
        return Proposal(command)

    def run_step(self, name: str, input: JsonValue, info: StepInfo) -> Any:
        """Run step handler ``name``; a coroutine function is driven to completion."""
        handler = self.steps.get(name)
        if handler is None:
            raise LookupError(f"build {self.build_id!r} has no step handler {name!r}")
        result = handler(input, info)
        if inspect.isawaitable(result):
            import asyncio

            return asyncio.run(_await(result))
        return result


async def _await(value: Awaitable[Any]) -> Any:
    return await value
