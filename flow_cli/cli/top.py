"""``flow top``: a live terminal view of the runs index, built on Textual (extra ``tui``).

Only ``cmd_top`` imports this module, and only once it has checked that Textual is installed.
Every view is one indexed page: the header counts by status (``count_runs``), the doctor's
causes over the first ``DOCTOR_RUNS`` open runs, the workers registry, and one page of
``find_runs``; nothing ever loads all runs. The action keys call the engine as the CLI verbs
do (``Engine.cancel``, ``Engine.terminate``, ``Engine.signal``) after a confirmation, and are
not offered at all in read-only mode.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar

from rich.console import Group, RenderableType
from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Button, DataTable, Footer, Input, Label, Static

from flow_cli.cli.filters import FilterArgs
from flow_cli.errors import FlowError, InputError
from flow_cli.model.status import RunStatus

if TYPE_CHECKING:
    from flow_cli.engine.engine import Engine
    from flow_cli.store.protocol import RunFilter, RunRecord

PAGE_ROWS = 100
"""Runs in one page of the table (``n``/``p`` page through the index with its cursor)."""

DOCTOR_RUNS = 500
"""The open runs the header's doctor causes look at: a bounded read however large the index."""

ACTIONS = frozenset({"cancel", "terminate", "signal", "retry"})
"""The actions that write; read-only mode offers none of them."""
RUN_BINDINGS = (
    Binding("c", "cancel", "cancel"),
    Binding("t", "terminate", "terminate"),
    Binding("s", "signal", "signal"),
    Binding("R", "retry", "retry now"),
)
"""The keys of ``ACTIONS``, on the runs table and on one run's screen alike."""

_FLAGS = {"--failing": "failing", "--top-level": "top_level"}
_VALUED = {
    "--status": "status",
    "--workflow": "workflow",
    "--build-id": "build_id",
    "--since": "since",
    "--until": "until",
    "--waiting-on": "waiting_on",
    "--idle-for": "idle_for",
    "--error-type": "error_type",
    "--attr": "attr",
}


def parse_filter_bar(text: str) -> RunFilter:
    """The filter bar's text, written as the options of ``flow runs`` (``--status Failed
    --workflow orders``), as a ``RunFilter``. Raises ``InputError`` with one sentence."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise InputError(f"filter: {exc}") from None
    values: dict[str, Any] = {name: None for name in _VALUED.values()}
    values.update(status=[], attr=[], failing=False, top_level=False, limit=None, after=None)
    index = 0
    while index < len(words):
        word, equals, given = words[index].partition("=")
        if word in _FLAGS and not equals:
            values[_FLAGS[word]] = True
        elif word in _VALUED:
            if not equals:
                index += 1
                if index == len(words):
                    raise InputError(f"filter: {word} needs a value.")
                given = words[index]
            if word in ("--status", "--attr"):
                values[_VALUED[word]].append(given)
            else:
                values[_VALUED[word]] = given
        else:
            known = ", ".join([*_VALUED, *_FLAGS])
            raise InputError(f"filter: {words[index]!r} is not a filter; use {known}.")
        index += 1
    return FilterArgs(**values).to_filter()


@dataclass(frozen=True, slots=True)
class Header:
    """What the header line shows, read in one refresh."""

    by_status: dict[str, int]
    total: int
    causes: dict[str, int]
    workers_live: int
    workers_gone: int

    def render(self) -> Text:
        text = Text()
        text.append(f"{self.total} runs  ", style="bold")
        for status in RunStatus:
            count = self.by_status.get(status.value, 0)
            if count:
                text.append(f"{status.value} {count}  ")
        text.append("\nworkers ", style="bold")
        text.append(f"{self.workers_live} live, {self.workers_gone} gone")
        stuck = {cause: n for cause, n in self.causes.items() if n}
        text.append("   doctor ", style="bold")
        text.append(", ".join(f"{c} {n}" for c, n in stuck.items()) or "nothing to report")
        return text


class StatusCounter:
    """Counts runs by status from indexes only, whatever the size of the index.

    ``count_runs(by="status")`` groups every row: 0.3 s over a million runs on SQLite. Counting
    one status reads its stretch of the status index, which is as long as that status is
    common; so every status but the most common one is counted on its own, and the most common
    one is the total (the smallest index, read whole) minus the others: on a million runs, nine
    tenths Completed, that is a 10 ms read instead of 300.
    """

    def __init__(self) -> None:
        self.largest = RunStatus.COMPLETED
        """The status the last reading found most common (a guess before the first)."""

    def count(self, engine: Engine) -> tuple[dict[str, int], int]:
        """Runs per status (statuses without runs left out, as ``count_runs`` groups) and the
        total."""
        from flow_cli.store.protocol import RunFilter

        total = engine.count_runs(RunFilter()).total
        counts = {
            status: engine.count_runs(RunFilter(statuses=(status,))).total
            for status in RunStatus
            if status is not self.largest
        }
        counts[self.largest] = total - sum(counts.values())
        self.largest = max(counts, key=lambda status: counts[status])
        found = {status.value: n for status, n in counts.items() if n}
        return dict(sorted(found.items())), total


def read_header(engine: Engine, now: datetime, counter: StatusCounter | None = None) -> Header:
    """Counts by status, the doctor's causes over at most ``DOCTOR_RUNS`` open runs, workers."""
    from flow_cli.ops.doctor import diagnose
    from flow_cli.store.protocol import RunFilter

    by_status, total = (counter or StatusCounter()).count(engine)
    report = diagnose(engine, RunFilter(limit=DOCTOR_RUNS), now, limited=engine.limits.targets())
    workers = engine.list_workers()
    live = sum(1 for w in workers if w.live(now))
    return Header(
        by_status=by_status,
        total=total,
        causes=report.summary,
        workers_live=live,
        workers_gone=len(workers) - live,
    )


class Confirm(ModalScreen[bool]):
    """Asks yes or no; ``y`` and ``n`` answer too."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "yes"),
        Binding("n,escape", "answer(False)", "no"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(self.question, id="question")
            with Horizontal():
                yield Button("Yes (y)", id="yes", variant="error")
                yield Button("No (n)", id="no")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class SignalPrompt(ModalScreen[tuple[str, str] | None]):
    """Asks for a signal's name and its JSON payload (empty: no payload)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "dismiss_none", "cancel")]

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label("Signal name and JSON payload (enter sends, escape gives up)")
            yield Input(placeholder="name", id="signal-name")
            yield Input(placeholder='payload, e.g. {"tracking": "1Z"}', id="signal-payload")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        name = self.query_one("#signal-name", Input).value.strip()
        if event.input.id == "signal-name" and name:
            self.query_one("#signal-payload", Input).focus()
            return
        if name:
            self.dismiss((name, self.query_one("#signal-payload", Input).value))

    def action_dismiss_none(self) -> None:
        self.dismiss(None)


class _NothingToRetry(FlowError):
    """``engine.retry`` found nothing waiting for a back-off: said, not an error."""


class RunDetail(Screen[None]):
    """One run: what ``flow show`` prints, its history as a timeline, its children (enter
    opens one; escape comes back)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,backspace", "back", "back"),
        *RUN_BINDINGS,
    ]

    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id

    @property
    def top(self) -> TopApp:
        """The ``flow top`` application showing this screen."""
        top = self.app
        assert isinstance(top, TopApp)
        return top

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(id="detail")
            yield Label("children (enter opens one)", id="children-title")
            yield DataTable(id="children", cursor_type="row")
            yield Static(id="timeline")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#children", DataTable).add_columns("child", "run", "status")
        self.load()

    def load(self) -> None:
        from flow_cli.cli import render
        from flow_cli.cli.cmd_read import children_status, show_data

        top = self.top
        data, record = show_data(top.engine, self.run_id)
        statuses = children_status(top.engine, data)
        self.query_one("#detail", Static).update(
            render.show_view(data, record.failing, statuses, all_steps=True)
        )
        table = self.query_one("#children", DataTable)
        table.clear()
        for child_id, child in data["children"].items():
            status = statuses.get(child["run_id"], child["status"])
            table.add_row(child_id, child["run_id"], status, key=child["run_id"])
        events = [e.to_json() for e in top.engine.history(self.run_id)]
        timeline: RenderableType = Group(
            Text("history", style="bold"), render.history_table(events)
        )
        self.query_one("#timeline", Static).update(timeline)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            self.app.push_screen(RunDetail(event.row_key.value))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        top = self.app
        return not (action in ACTIONS and isinstance(top, TopApp) and top.read_only)

    def action_back(self) -> None:
        self.app.pop_screen()

    def action_cancel(self) -> None:
        self.top.ask_cancel(self.run_id)

    def action_terminate(self) -> None:
        self.top.ask_terminate(self.run_id)

    def action_signal(self) -> None:
        self.top.ask_signal(self.run_id)

    def action_retry(self) -> None:
        self.top.ask_retry(self.run_id)


class TopApp(App[None]):
    """The ``flow top`` application over an open ``Engine``."""

    TITLE = "flow top"
    CSS = """
    #header { height: 2; background: $boost; padding: 0 1; }
    #filter { height: 3; }
    #message { height: 1; color: $warning; padding: 0 1; }
    #panes { height: auto; max-height: 12; padding: 0 1; }
    #runs { height: 1fr; }
    #children { height: auto; max-height: 10; }
    Confirm, SignalPrompt { align: center middle; }
    #dialog { width: 70; height: auto; border: thick $accent; background: $surface; padding: 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "quit"),
        Binding("slash", "focus_filter", "filter"),
        Binding("r", "refresh_now", "refresh"),
        Binding("n", "next_page", "next page"),
        Binding("p", "previous_page", "previous page"),
        Binding("w", "pane('workers')", "workers"),
        Binding("b", "pane('builds')", "builds"),
        Binding("S", "pane('schedules')", "schedules"),
        *RUN_BINDINGS,
    ]

    def __init__(
        self, engine: Engine, *, read_only: bool = False, refresh_seconds: float = 1.0
    ) -> None:
        super().__init__()
        self.engine = engine
        self.read_only = read_only
        self.refresh_seconds = refresh_seconds
        self.where: RunFilter = parse_filter_bar("")
        self.cursors: list[str | None] = [None]
        """The ``after`` cursor of each page visited; the last is the page shown."""
        self.page: list[RunRecord] = []
        self.header: Header | None = None
        self.pane: str | None = None
        self.counter = StatusCounter()

    def compose(self) -> ComposeResult:
        yield Static(id="header")
        yield Input(placeholder="filters as for flow runs, e.g. --status Failed", id="filter")
        yield Static(id="message")
        yield Static(id="panes")
        yield DataTable(id="runs", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        if self.read_only:
            self.sub_title = "read-only"
        table = self.query_one("#runs", DataTable)
        for column in ("run", "workflow", "status", "build", "created", "reason"):
            table.add_column(column, key=column)
        self.refresh_view()
        self.set_interval(self.refresh_seconds, self.refresh_view)
        table.focus()

    def refresh_view(self) -> None:
        """Read the header and the page shown again (at least once a second)."""
        now = datetime.now(UTC)
        try:
            self.header = read_header(self.engine, now, self.counter)
            self.page = self.engine.find_runs(
                replace(self.where, limit=PAGE_ROWS, after=self.cursors[-1])
            )
        except FlowError as exc:
            self.say(str(exc))
            return
        self.query_one("#header", Static).update(self.header.render())
        self._fill_table()
        if self.pane is not None:
            self._show_pane()

    def _fill_table(self) -> None:
        from flow_cli.cli import render

        table = self.query_one("#runs", DataTable)
        selected = self.selected_run()
        table.clear()
        for record in self.page:
            table.add_row(
                record.run_id,
                record.workflow,
                render.status_text(record.status.value),
                record.build_id,
                render.when(record.created_at),
                record.error or record.failing or record.waiting_on or "",
                key=record.run_id,
            )
        if selected is not None:
            for row, record in enumerate(self.page):
                if record.run_id == selected:
                    table.move_cursor(row=row)

    def selected_run(self) -> str | None:
        """The run under the table's cursor."""
        table = self.query_one("#runs", DataTable)
        if table.row_count == 0:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return key

    def say(self, line: str) -> None:
        self.query_one("#message", Static).update(Text(line))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id != "filter":
            return
        try:
            self.where = parse_filter_bar(event.value)
        except InputError as exc:
            self.say(str(exc))
            return
        self.say("")
        self.cursors = [None]
        self.refresh_view()
        self.query_one("#runs", DataTable).focus()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id == "runs" and event.row_key.value is not None:
            self.push_screen(RunDetail(event.row_key.value))

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        # Sorts the page shown; the index itself is always read newest first.
        event.data_table.sort(event.column_key)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return not (action in ACTIONS and self.read_only)

    def action_focus_filter(self) -> None:
        self.query_one("#filter", Input).focus()

    def action_refresh_now(self) -> None:
        self.refresh_view()

    def action_next_page(self) -> None:
        if len(self.page) == PAGE_ROWS:
            self.cursors.append(self.page[-1].run_id)
            self.refresh_view()

    def action_previous_page(self) -> None:
        if len(self.cursors) > 1:
            self.cursors.pop()
            self.refresh_view()

    def action_pane(self, name: str) -> None:
        self.pane = None if self.pane == name else name
        self._show_pane()

    def _show_pane(self) -> None:
        from flow_cli.cli.cmd_fleet import worker_rows
        from flow_cli.cli.cmd_schedule import schedule_row
        from flow_cli.cli.render_fleet import builds_table, workers_table
        from flow_cli.cli.render_schedules import schedules_table
        from flow_cli.ops.builds import build_reports

        panes = self.query_one("#panes", Static)
        now = datetime.now(UTC)
        if self.pane == "workers":
            panes.update(workers_table(worker_rows(self.engine.list_workers(), now)))
        elif self.pane == "builds":
            panes.update(builds_table(build_reports(self.engine, now, [])))
        elif self.pane == "schedules":
            rows = [schedule_row(self.engine, s, recent=False) for s in self.engine.schedules.all()]
            panes.update(schedules_table(rows))
        else:
            panes.update("")

    def action_cancel(self) -> None:
        self._on_selected(self.ask_cancel)

    def action_terminate(self) -> None:
        self._on_selected(self.ask_terminate)

    def action_signal(self) -> None:
        self._on_selected(self.ask_signal)

    def action_retry(self) -> None:
        self._on_selected(self.ask_retry)

    def _on_selected(self, ask: Callable[[str], None]) -> None:
        if (run_id := self.selected_run()) is not None:
            ask(run_id)

    def ask_retry(self, run_id: str) -> None:
        """Retry ``run_id`` now as ``flow retry`` does (its failing decision, its steps in
        back-off), once confirmed."""

        def retry() -> None:
            if self.engine.retry(run_id) is None:
                raise _NothingToRetry(f"run {run_id}: nothing waits for a back-off")

        self._confirmed(f"Retry run {run_id} now?", retry, f"run {run_id} retried now")

    def ask_cancel(self, run_id: str) -> None:
        """Cancel ``run_id`` as ``flow cancel`` does, once confirmed."""
        self._confirmed(
            f"Cancel run {run_id}?",
            lambda: self.engine.cancel(run_id),
            f"cancellation of {run_id} asked",
        )

    def ask_terminate(self, run_id: str) -> None:
        """Terminate ``run_id`` as ``flow terminate`` does, once confirmed."""
        self._confirmed(
            f"Terminate run {run_id} (no cleanup runs)?",
            lambda: self.engine.terminate(run_id),
            f"run {run_id} terminated",
        )

    def ask_signal(self, run_id: str) -> None:
        """Send a signal to ``run_id`` as ``flow signal`` does, once its name and payload are
        given and the sending confirmed."""

        def prompted(given: tuple[str, str] | None) -> None:
            if given is None:
                return
            name, text = given
            try:
                payload = json.loads(text) if text.strip() else None
            except ValueError as exc:
                self.say(f"the payload is not JSON: {exc}")
                return
            self._confirmed(
                f"Send signal {name!r} to run {run_id}?",
                lambda: self.engine.signal(run_id, name, payload),
                f"signal {name!r} delivered to {run_id}",
            )

        self.push_screen(SignalPrompt(), prompted)

    def _confirmed(self, question: str, act: Callable[[], object], done: str) -> None:
        """``act`` once ``question`` is answered yes, saying ``done`` (or its error)."""

        def answered(yes: bool | None) -> None:
            if yes:
                self._act(act, done)

        self.push_screen(Confirm(question), answered)

    def _act(self, act: Any, done: str) -> None:
        try:
            act()
        except FlowError as exc:
            self.say(str(exc))
        else:
            self.say(done)
        self.refresh_view()
        if isinstance(self.screen, RunDetail):
            self.screen.load()
