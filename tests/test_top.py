"""DESIGN §6.6: ``flow top``, driven headless with Textual's pilot on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import _open_store
from engine_workflows import data, make_engine

from flow_cli import RetryPolicy, Runtime
from flow_cli.engine.engine import Engine
from flow_cli.model.clock import ManualClock
from flow_cli.store.protocol import RunFilter

pytest.importorskip("textual")

from textual.widgets import DataTable, Input, Static

from flow_cli.cli.top import Confirm, RunDetail, TopApp


def _refuse(order: dict[str, str]) -> str:
    return order["card"]  # the line the traceback names


def _runtime() -> Runtime:
    rt = Runtime(build_id="top-1")

    @rt.step("charge")
    def charge(input, info):
        return _refuse({})

    @rt.workflow("charges")
    def charges(ctx):
        return ctx.complete(ctx.step("charge", "charge", None, RetryPolicy(max_attempts=1)))

    @rt.workflow("waits")
    def waits(ctx):
        return ctx.complete(ctx.wait_signal("go"))

    @rt.workflow("quick")
    def quick(ctx):
        return ctx.complete(1)

    @rt.workflow("backs-off")
    def backs_off(ctx):
        again = RetryPolicy(max_attempts=3, initial_interval=300)
        return ctx.complete(ctx.step("charge", "charge", None, again))

    return rt


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    store = _open_store(request.param, tmp_path)
    engine = make_engine(store, [_runtime()], ManualClock())
    for n in range(3):
        engine.start("quick", run_id=f"quick-{n}")
    engine.start("charges", run_id="charge-1")
    engine.start("charges", run_id="charge-2")
    engine.start("waits", run_id="waiting")
    engine.tick(until_idle=True)
    try:
        yield engine
    finally:
        drop_schema = getattr(store, "drop_schema", None)
        if drop_schema is not None:
            drop_schema()
        store.close()


def _shown(widget: Static) -> str:
    """What a widget shows, as plain text."""
    from rich.console import Console

    console = Console(width=200, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(widget.content)
    console.file.close()
    return console.export_text()


def _table_runs(app: TopApp) -> list[str]:
    table = app.query_one("#runs", DataTable)
    return [str(row.value) for row in table.rows]


def test_the_header_counts_as_flow_count_by_status(engine: Engine) -> None:
    async def scenario() -> None:
        app = TopApp(engine, refresh_seconds=60)
        async with app.run_test() as pilot:
            await pilot.pause()
            counted = engine.count_runs(RunFilter(), by="status")  # what flow count calls
            assert app.header is not None
            assert app.header.by_status == dict(counted.groups)
            assert counted.groups == {"Completed": 3, "Failed": 2, "Pending": 1}
            shown = _shown(app.query_one("#header", Static))
            assert "6 runs" in shown and "Completed 3" in shown and "Failed 2" in shown
            assert sorted(_table_runs(app)) == sorted(
                ["quick-0", "quick-1", "quick-2", "charge-1", "charge-2", "waiting"]
            )

    asyncio.run(scenario())


def test_the_filter_bar_takes_the_filters_of_flow_runs(engine: Engine) -> None:
    async def scenario() -> None:
        app = TopApp(engine, refresh_seconds=60)
        async with app.run_test() as pilot:
            await pilot.press("slash")
            for key in "--status Failed":
                await pilot.press("space" if key == " " else key)
            await pilot.press("enter")
            await pilot.pause()
            assert sorted(_table_runs(app)) == ["charge-1", "charge-2"]
            app.query_one("#filter", Input).value = "--colour red"
            await pilot.press("slash", "enter")
            await pilot.pause()
            assert "is not a filter" in _shown(app.query_one("#message", Static))

    asyncio.run(scenario())


def test_opening_a_run_shows_its_steps_and_traceback(engine: Engine) -> None:
    async def scenario() -> None:
        app = TopApp(engine, refresh_seconds=60)
        async with app.run_test(size=(160, 60)) as pilot:
            app.where = RunFilter(workflow="charges")
            app.refresh_view()
            await pilot.pause()
            app.query_one("#runs", DataTable).focus()
            await pilot.press("enter")
            await pilot.pause()
            screen = app.screen
            assert isinstance(screen, RunDetail)
            shown = _shown(screen.query_one("#detail", Static))
            assert "charge" in shown
            assert "Traceback (most recent call last)" in shown
            assert 'return order["card"]' in shown
            timeline = _shown(screen.query_one("#timeline", Static))
            assert "step_failed" in timeline or "failed" in timeline
            await pilot.press("escape")
            assert not isinstance(app.screen, RunDetail)

    asyncio.run(scenario())


def test_cancel_after_confirming_writes_cancel_requested(engine: Engine) -> None:
    async def scenario() -> None:
        app = TopApp(engine, refresh_seconds=60)
        async with app.run_test() as pilot:
            app.where = RunFilter(workflow="waits")
            app.refresh_view()
            await pilot.pause()
            await pilot.press("c")
            await pilot.pause()
            assert isinstance(app.screen, Confirm)
            await pilot.press("n")  # refused: nothing written
            await pilot.pause()
            assert data(engine, "waiting", "cancel_requested") == []
            await pilot.press("c")
            await pilot.pause()
            await pilot.press("y")
            await pilot.pause()
        assert len(data(engine, "waiting", "cancel_requested")) == 1

    asyncio.run(scenario())


def test_retry_after_confirming_writes_retry_requested(engine: Engine) -> None:
    engine.start("backs-off", run_id="later")
    engine.tick(until_idle=True)  # its step failed once and waits 300 s for its next attempt

    async def scenario() -> None:
        app = TopApp(engine, refresh_seconds=60)
        async with app.run_test() as pilot:
            app.where = RunFilter(workflow="backs-off")
            app.refresh_view()
            await pilot.pause()
            await pilot.press("R")
            await pilot.pause()
            assert isinstance(app.screen, Confirm)
            await pilot.press("y")
            await pilot.pause()
        assert len(data(engine, "later", "retry_requested")) == 1

    asyncio.run(scenario())


def test_read_only_offers_no_action_keys(engine: Engine) -> None:
    async def scenario() -> None:
        app = TopApp(engine, read_only=True, refresh_seconds=60)
        async with app.run_test() as pilot:
            app.where = RunFilter(workflow="waits")
            app.refresh_view()
            await pilot.pause()
            offered = {b.binding.key for b in app.active_bindings.values() if b.enabled}
            assert not offered & {"c", "t", "s", "R"}
            await pilot.press("c", "t", "s", "R")
            await pilot.pause()
            assert not isinstance(app.screen, Confirm)
            await pilot.press("enter")
            await pilot.pause()
            detail = {b.binding.key for b in app.screen.active_bindings.values() if b.enabled}
            assert not detail & {"c", "t", "s", "R"}
        assert data(engine, "waiting", "cancel_requested") == []

    asyncio.run(scenario())


def test_without_the_extra_flow_top_says_so_and_imports_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    from typer.testing import CliRunner

    from flow_cli.cli.app import app

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "textual" else real(name, *a),
    )
    for name in [m for m in sys.modules if m == "textual" or m.startswith("textual.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.delitem(sys.modules, "flow_cli.cli.top", raising=False)
    result = CliRunner().invoke(app, ["--db", str(tmp_path / "f.db"), "top"])
    assert result.exit_code == 2
    assert "pip install 'flow-cli[tui]'" in result.output
    assert "textual" not in sys.modules
    assert not (tmp_path / "f.db").exists()


def test_the_status_counter_is_exact_whichever_status_it_guesses_most_common(
    engine: Engine,
) -> None:
    from flow_cli.cli.top import StatusCounter
    from flow_cli.model.status import RunStatus

    grouped = dict(engine.count_runs(RunFilter(), by="status").groups)
    for guess in (RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.COMPLETED):
        counter = StatusCounter()
        counter.largest = guess
        assert counter.count(engine) == (grouped, 6)
        assert counter.largest is RunStatus.COMPLETED  # learnt for the next reading
        assert counter.count(engine) == (grouped, 6)


def test_the_filter_bar_reads_every_filter_of_flow_runs() -> None:
    from flow_cli.cli.top import parse_filter_bar
    from flow_cli.errors import InputError
    from flow_cli.model.status import RunStatus

    found = parse_filter_bar(
        "--status=failed,Pending --workflow order --failing --top-level "
        "--waiting-on signal:shipped --error-type KeyError --build-id b1 --idle-for 2h"
    )
    assert found.statuses == (RunStatus.FAILED, RunStatus.PENDING)
    assert (found.workflow, found.build_id, found.error_type) == ("order", "b1", "KeyError")
    assert found.failing and found.top_level and found.waiting_on == "signal:shipped"
    assert found.idle_since is not None
    for bad in ("--status", "--status Nope", "--limit 3", "'unclosed", "--idle-for forever"):
        with pytest.raises(InputError):
            parse_filter_bar(bad)


def test_flow_top_read_only_opens_the_database_read_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from flow_cli.cli.app import app
    from flow_cli.store.sqlite import SQLiteStore

    SQLiteStore(tmp_path / "flow.db").close()
    opened: list[TopApp] = []

    def run(self: TopApp) -> None:
        opened.append(self)
        assert getattr(self.engine.store, "read_only", None) is self.read_only

    monkeypatch.setattr(TopApp, "run", run)
    for args, read_only in ((["--read-only"], True), ([], False)):
        result = CliRunner().invoke(app, ["--db", str(tmp_path / "flow.db"), "top", *args])
        assert result.exit_code == 0, result.output
        assert opened[-1].read_only is read_only


def test_the_filter_bar_takes_attr_and_the_detail_shows_attributes(engine: Engine) -> None:
    from flow_cli.cli.top import parse_filter_bar

    found = parse_filter_bar("--attr customer=acme --attr=n=5")
    assert found.attributes == (("customer", '"acme"'), ("n", "5"))
    engine.start("waits", run_id="tagged", attributes={"customer": "acme", "n": 5})
    engine.tick(until_idle=True)

    async def scenario() -> None:
        app = TopApp(engine, refresh_seconds=60)
        async with app.run_test(size=(160, 60)) as pilot:
            app.query_one("#filter", Input).value = "--attr customer=acme"
            await pilot.press("slash", "enter")
            await pilot.pause()
            assert _table_runs(app) == ["tagged"]
            app.query_one("#runs", DataTable).focus()
            await pilot.press("enter")
            await pilot.pause()
            screen = app.screen
            assert isinstance(screen, RunDetail)
            shown = _shown(screen.query_one("#detail", Static))
            assert "attributes  customer=acme n=5" in shown

    asyncio.run(scenario())
