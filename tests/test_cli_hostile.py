"""Hostile input at the command line: absurd numbers and durations, control characters in ids,
export targets that are not regular files, and a corrupt database.

Each case is one ``error: ...`` line on stderr and the right exit code, never a traceback.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import FlowProject

from flow_cli.cli.reference import option_names, root_command, walk


@pytest.fixture
def project(tmp_path: Path) -> FlowProject:
    return FlowProject(tmp_path)


@pytest.fixture(scope="module")
def refusing(tmp_path_factory: pytest.TempPathFactory) -> FlowProject:
    """A project with one run ``a``, shared by the cases that must change nothing."""
    project = FlowProject(tmp_path_factory.mktemp("refusing"))
    project.setup("start", "two-step", "--id", "a")
    return project


# -- item 7: numeric and duration options ------------------------------------------------------

INTEGERS = ("99999999999999999999", "9223372036854775808")
FLOATS = ("nan", "inf", "1e400")
DURATIONS = ("nan", "inf", "1e22s", "999999999999d")
TIMES = (*DURATIONS, "0001-01-01T00:00:00+01:00")

COMMAND_ARGS: dict[str, tuple[str, ...]] = {
    "tick": (),
    "worker": (),
    "signal": ("go",),
    "start": ("two-step",),
    "cancel": (),
    "terminate": (),
    "retry": (),
    "runs": (),
    "count": (),
    "upgrade": ("--from", "cli-1", "--to", "cli-2"),
    "export": ("-o", "exported"),
    "prune": ("--ended-before", "1d"),
    "limits set": ("workflow:two-step",),
    "result": ("a", "--wait"),
    "execute": ("two-step",),
    "doctor": (),
    "top": (),
    "schedule create": ("s", "--workflow", "two-step", "--every", "1h"),
    "schedule update": ("s",),
    "schedule backfill": ("s", "--from", "2026-12-01", "--to", "2026-12-02"),
}
"""What each command needs besides the option under test (its other required arguments)."""

IN_PROCESS_UNSAFE = {"tick", "worker", "top"}
"""Commands run as real processes with a timeout: an accepted value would start real work
(or, for ``top``, a full-screen application)."""


def _kind(param: Any) -> str | None:
    """Which hostile values an option gets: by its type, else by its metavar."""
    descriptor = getattr(param, "type_descriptor", None)
    annotation = getattr(descriptor, "annotation", None)
    if annotation in (int, int | None):
        return "int"
    if annotation in (float, float | None):
        return "float"
    return {"DURATION": "duration", "T": "time"}.get(param.metavar or "")


def _numeric_options() -> Iterator[tuple[str, str, str]]:
    for path, command in walk(root_command()):
        if getattr(command, "commands", None):
            continue
        for param in command.params:
            names = option_names(param)
            kind = None if not names else _kind(param)
            if kind is not None:
                yield " ".join(path), names[0], kind


NUMERIC_OPTIONS = sorted(_numeric_options())
VALUES = {"int": INTEGERS, "float": FLOATS, "duration": DURATIONS, "time": TIMES}


def test_the_numeric_options_are_all_found() -> None:
    found = {(command, option) for command, option, _ in NUMERIC_OPTIONS}
    assert ("worker", "--lease-seconds") in found
    assert ("result", "--timeout") in found
    assert ("doctor", "--overdue-after") in found
    assert ("runs", "--since") in found
    assert ("worker", "--concurrency") in found
    # A new command with such an option needs its other arguments listed in COMMAND_ARGS.
    assert {command for command, _, _ in NUMERIC_OPTIONS} <= set(COMMAND_ARGS)


@pytest.mark.parametrize(
    ("command", "option", "value"),
    [
        (command, option, value)
        for command, option, kind in NUMERIC_OPTIONS
        for value in VALUES[kind]
    ],
)
def test_absurd_numbers_and_durations_are_exit_2(
    refusing: FlowProject, command: str, option: str, value: str
) -> None:
    args = (*command.split(), *COMMAND_ARGS[command], option, value)
    if command in IN_PROCESS_UNSAFE:
        result = refusing.run(*args, timeout=30)
    else:
        result = refusing.invoke(*args)
    line = result.error_line()
    assert result.code == 2, line
    assert option in line, line
    assert "unexpected" not in line, line


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ("runs", "--since", "999999999999d"),
            "error: --since '999999999999d' is too long; give at most 36525d (100 years).",
        ),
        (
            ("runs", "--idle-for", "inf"),
            "error: --idle-for 'inf' is too long; give at most 36525d (100 years).",
        ),
        (
            ("result", "a", "--wait", "--timeout", "nan"),
            "error: --timeout 'nan' is not a duration; write e.g. 90s, 15m, 2h, 3d or 1h30m.",
        ),
        (
            ("doctor", "--overdue-after", "1e22s"),
            "error: --overdue-after '1e22s' is not a duration; write e.g. 90s, 15m, 2h, 3d or "
            "1h30m.",
        ),
        (
            ("runs", "--until", "0001-01-01T00:00:00+01:00"),
            "error: --until '0001-01-01T00:00:00+01:00' is out of range; give a time between "
            "the years 1 and 9999.",
        ),
        (
            ("runs", "--limit", "99999999999999999999"),
            "error: Invalid value for '--limit': Input should be less than or equal to "
            "1000000000 (see 'flow runs --help')",
        ),
    ],
)
def test_absurd_values_get_one_clear_sentence(
    refusing: FlowProject, args: tuple[str, ...], line: str
) -> None:
    result = refusing.invoke(*args)
    assert (result.code, result.error_line()) == (2, line)


def test_an_infinite_lease_is_refused_before_the_worker_starts(refusing: FlowProject) -> None:
    result = refusing.run("worker", "--lease-seconds", "inf", timeout=30)
    assert (result.code, result.stderr) == (
        2,
        "error: Invalid value for '--lease-seconds': Input should be less than or equal to "
        "86400 (see 'flow worker --help')\n",
    )


# -- item 4: control and format characters in ids ----------------------------------------------

REFUSED_IDS = {
    "esc": "a\x1b[31mb",
    "bel": "a\x07b",
    "newline": "a\nb",
    "rlo": "invoice-\u202etxt.exe",
    "isolate": "a\u2066b",
    "zwj": "a\u200db",
    "bom": "\ufeffa",
    "line separator": "a\u2028b",
}


def test_the_refused_characters_are_exactly_the_unicode_controls_and_formats() -> None:
    import sys
    import unicodedata

    from flow_cli.model.names import CONTROL_CHARACTERS

    for code in range(sys.maxunicode + 1):
        char = chr(code)
        category = unicodedata.category(char)
        refused = CONTROL_CHARACTERS.match(char) is not None
        if category in ("Cc", "Cf", "Zl", "Zp"):
            assert refused, f"U+{code:04X} ({category}) is let through"
        elif refused:  # assigned as Cf by a later Unicode than this Python's
            assert category == "Cn", f"U+{code:04X} ({category}) is refused"


def test_from_jsonl_refuses_control_and_format_characters_line_by_line(
    project: FlowProject,
) -> None:
    feed = [{"run_id": run_id, "workflow": "two-step"} for run_id in REFUSED_IDS.values()]
    feed.append({"run_id": "fine", "workflow": "two-step"})
    text = "".join(json.dumps(line) + "\n" for line in feed)
    result = project.invoke("start", "--from-jsonl", "-", stdin=text)
    assert result.code == 1
    shown = {
        "esc": ("a\\x1b[31mb", "'a\\x1b[31mb'", "control character U+001B"),
        "bel": ("a\\x07b", "'a\\x07b'", "control character U+0007"),
        "newline": ("a\\x0ab", "'a\\nb'", "control character U+000A"),
        "rlo": ("invoice-\\u202etxt.exe", "'invoice-\\u202etxt.exe'", "format character U+202E"),
        "isolate": ("a\\u2066b", "'a\\u2066b'", "format character U+2066"),
        "zwj": ("a\\u200db", "'a\\u200db'", "format character U+200D"),
        "bom": ("\\ufeffa", "'\\ufeffa'", "format character U+FEFF"),
        "line separator": ("a\\u2028b", "'a\\u2028b'", "format character U+2028"),
    }
    expected = [
        f"{escaped}\tfailed\tline {number}: The run id {quoted} holds the {what}; use printable "
        "text."
        for number, (escaped, quoted, what) in enumerate(shown.values(), 1)
    ]
    expected.append(f"fine\tdone\tline {len(feed)}: created")
    assert result.stdout.splitlines() == expected
    assert result.stderr == "1 done, 0 skipped, 8 failed\n"
    assert [row[0] for row in project.dump()] == ["fine"]


@pytest.mark.parametrize("name", sorted(REFUSED_IDS))
def test_fork_id_with_control_or_format_characters_is_refused(
    project: FlowProject, name: str
) -> None:
    project.setup("start", "two-step", "--id", "a")
    before = project.dump()
    result = project.invoke("fork", "a", "--id", REFUSED_IDS[name])
    assert (result.code, result.stdout) == (2, "")
    line = result.error_line()
    assert line.startswith("error: The run id '") and line.endswith("; use printable text.")
    assert project.dump() == before


def test_fork_onto_a_taken_id_is_one_clear_sentence(project: FlowProject) -> None:
    project.setup("start", "two-step", "--id", "a")
    project.setup("start", "two-step", "--id", "b", "--input", "2")
    result = project.invoke("fork", "a", "--id", "b")
    assert (result.code, result.stdout, result.stderr) == (
        2,
        "",
        "error: Run 'b' already exists; give the fork another --id.\n",
    )


def test_engine_start_refuses_bidi_overrides() -> None:
    from cli_workflows import runtime

    from flow_cli.engine.engine import Engine
    from flow_cli.errors import InputError
    from flow_cli.model.clock import ManualClock
    from flow_cli.store.memory import MemoryStore

    engine = Engine(MemoryStore(), [runtime], clock=ManualClock())
    with pytest.raises(InputError, match="format character U\\+202E"):
        engine.start("two-step", run_id="a\u202eb")
    assert engine.store.get_run("a\u202eb") is None


def _store_run(project: FlowProject, run_id: str) -> None:
    """A run written before ids were checked (or by another tool)."""
    from flow_cli.model.clock import ManualClock
    from flow_cli.model.spec import WorkflowSpec
    from flow_cli.store.protocol import NewRun
    from flow_cli.store.sqlite import SQLiteStore

    store = SQLiteStore(project.db)
    spec = WorkflowSpec(workflow="two-step", input=None, runtime_build_id="cli-1")
    store.create_run(
        NewRun(run_id=run_id, spec=spec, seed="00", decide_at=None), ManualClock().now()
    )
    store.close()


def test_bulk_result_lines_escape_stored_ids(project: FlowProject) -> None:
    project.setup("start", "two-step", "--id", "plain")
    _store_run(project, "x\x1b[2Jy")
    _store_run(project, "p\u202eq")
    result = project.invoke("cancel", "x\x1b[2Jy", "p\u202eq")
    assert result.code == 0
    assert result.stdout == (
        "x\\x1b[2Jy\tdone\tcancellation requested\np\\u202eq\tdone\tcancellation requested\n"
    )
    dry = project.invoke("terminate", "x\x1b[2Jy", "--dry-run", "--status", "Pending")
    assert dry.code == 2  # ids and filters, not both: the id is not echoed raw either
    assert "\x1b" not in dry.stderr
    as_json = project.invoke("cancel", "p\u202eq", "plain", "--jsonl")
    assert "\u202e" not in as_json.stdout and "\\u202e" in as_json.stdout
    assert json.loads(as_json.stdout.splitlines()[0])["run_id"] == "p\u202eq"


def test_hook_list_escapes_tokens_and_ids(project: FlowProject) -> None:
    token = "tok\x1b[31m\u202e"
    project.setup("start", "callback", "--id", "cb", "--input", json.dumps({"token": token}))
    project.setup("tick", "--until-idle")
    listed = project.invoke("hook", "list")
    assert listed.code == 0
    assert "\x1b" not in listed.stdout and "\u202e" not in listed.stdout
    assert "tok\\x1b[31m\\u202e" in listed.stdout
    as_json = project.invoke("hook", "list", "--json")
    assert "\u202e" not in as_json.stdout
    assert as_json.json()[0]["token"] == token


def test_replay_check_table_escapes_identities_fields_and_run_ids() -> None:
    from flow_cli.cli import replay_report
    from flow_cli.cli.render import console

    group = replay_report.Group("step\x1b[2J", "na\u202eme", "a\x9b", "b\u2066", 1)
    group.runs.append("run\x07\u202e")
    con = console()
    with con.capture() as captured:
        con.print(replay_report.table([group]))
    text = captured.get()
    for raw in ("\x1b[2J", "\u202e", "\x9b", "\u2066", "\x07"):
        assert raw not in text
    assert "step\\x1b[2J" in text and "run\\x07\\u202e" in text


def test_from_jsonl_lines_beyond_the_limits_fail_alone(project: FlowProject) -> None:
    huge = '{"run_id": "huge", "workflow": "two-step", "input": ' + "9" * 5000 + "}"
    deep = '{"run_id": "deep", "workflow": "two-step", "input": ' + "[" * 200 + "]" * 200 + "}"
    deeper = '{"run_id": "x", "workflow": "two-step", "input": ' + "[" * 5000 + "]" * 5000 + "}"
    fine = '{"run_id": "fine", "workflow": "two-step"}'
    result = project.invoke(
        "start", "--from-jsonl", "-", stdin=f"{huge}\n{deep}\n\n{deeper}\n{fine}\n"
    )
    assert result.code == 1
    assert result.stdout.splitlines() == [
        "huge\tfailed\tline 1: the line is refused: it holds an integer of 5,000 digits; Flow "
        "accepts at most 1,000.",
        "deep\tfailed\tline 2: the line is refused: it is nested more than 100 levels deep "
        "(Flow's limit).",
        "-\tfailed\tline 4: the line is refused: it is nested more than 100 levels deep "
        "(Flow's limit).",
        "fine\tdone\tline 5: created",
    ]
    assert result.stderr == "1 done, 0 skipped, 3 failed\n"
    assert [row[0] for row in project.dump()] == ["fine"]


# -- items 2 and 3: export file names and targets -------------------------------------------


@pytest.mark.parametrize(
    "run_id",
    ["x/y", "x__y", "x%2Fy", "a~b", ".", "..", ".hidden", "é/ü", "r" * 300, "é" * 200, "%" * 300],
)
def test_export_file_names_fit_and_read_back(run_id: str) -> None:
    from urllib.parse import unquote

    from flow_cli.cli.export_files import export_file_name

    name = export_file_name(run_id)
    assert len(name.encode("utf-8")) <= 255 and name.endswith(".json")
    assert "/" not in name and not name.startswith(".")
    if "~" not in name:
        assert unquote(name.removesuffix(".json")) == run_id


def test_export_file_names_never_collide() -> None:
    from flow_cli.cli.export_files import export_file_name

    ids = ["x/y", "x__y", "x%2Fy", "x%252Fy", "a~b", "a%7Eb", ".a", "%2Ea"]
    ids += ["r" * 300, "r" * 301, "r" * 299 + "s", "r" * 250 + "%" * 50, "r" * 250 + "%" * 51]
    names = [export_file_name(run_id) for run_id in ids]
    assert len(set(names)) == len(names)


def test_export_to_a_directory_keeps_every_history(project: FlowProject, tmp_path: Path) -> None:
    long_id = "r" * 300
    for run_id in ("x/y", "x__y", long_id):
        project.setup("start", "two-step", "--id", run_id)
    out = tmp_path / "out"
    result = project.invoke("export", "x/y", "x__y", long_id, "-o", str(out))
    assert result.code == 0, result.stderr
    long_name = "r" * 217 + "~" + _sha(long_id) + ".json"
    assert result.stdout == (
        f"x/y\tdone\twrote {out}/x%2Fy.json\n"
        f"x__y\tdone\twrote {out}/x__y.json\n"
        f"{long_id}\tdone\twrote {out}/{long_name}\n"
    )
    assert sorted(p.name for p in out.iterdir()) == sorted(["x%2Fy.json", "x__y.json", long_name])
    ids = {json.loads((out / name).read_text())["run_id"] for name in os.listdir(out)}
    assert ids == {"x/y", "x__y", long_id}
    check = project.invoke("replay-check", "--file", str(out), "--build-id", "cli-1")
    assert (check.code, check.stdout) == (
        0,
        "replay-check: 3 of 3 histories replay cleanly against build cli-1\n",
    )


def _sha(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def test_two_runs_never_share_one_file_of_an_export(
    project: FlowProject, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As on a case-insensitive disk, where Order.json and order.json are one file."""
    from flow_cli.cli import export_files

    project.setup("start", "two-step", "--id", "Order")
    project.setup("start", "two-step", "--id", "order")
    monkeypatch.setattr(export_files, "export_file_name", lambda run_id: "order.json")
    out = tmp_path / "out"
    result = project.invoke("export", "Order", "order", "-o", str(out))
    assert result.code == 1
    assert result.stdout == (
        f"Order\tdone\twrote {out}/order.json\n"
        f"order\tfailed\t{out}/order.json already holds the export of run 'Order'; not replaced\n"
    )
    assert json.loads((out / "order.json").read_text())["run_id"] == "Order"
    again = project.invoke("export", "order", "-o", str(out / "order.json"))
    assert again.code == 0  # a later export may rewrite the file


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_export_never_replaces_a_fifo_or_a_directory(
    project: FlowProject, tmp_path: Path, kind: str
) -> None:
    project.setup("start", "two-step", "--id", "a")
    target = tmp_path / "target"
    if kind == "fifo":
        os.mkfifo(target)
    else:
        target.mkdir()
    result = project.invoke("export", "a", "-o", str(target))
    what = "a FIFO" if kind == "fifo" else "a directory"
    assert (result.code, result.stdout, result.stderr) == (
        2,
        "",
        f"error: -o {target} is {what}; export writes only regular files (or - for stdout).\n",
    )
    assert stat.S_ISFIFO(target.lstat().st_mode) if kind == "fifo" else target.is_dir()


def test_export_never_replaces_a_device(project: FlowProject, tmp_path: Path) -> None:
    project.setup("start", "two-step", "--id", "a")
    link = tmp_path / "null-link"
    link.symlink_to("/dev/null")
    # The link first: without the check an export replaces the link, not /dev/null, and the
    # test stops there, before it could replace the machine's /dev/null (as root).
    for target in (str(link), "/dev/null"):
        result = project.invoke("export", "a", "-o", target)
        assert link.is_symlink()
        assert (result.code, result.stdout, result.stderr) == (
            2,
            "",
            f"error: -o {target} is a device; export writes only regular files (or - for "
            "stdout).\n",
        )
        assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_export_to_a_directory_fails_a_run_whose_file_is_a_fifo(
    project: FlowProject, tmp_path: Path
) -> None:
    project.setup("start", "two-step", "--id", "a")
    project.setup("start", "two-step", "--id", "b")
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "a.json")
    result = project.invoke("export", "a", "b", "-o", str(out))
    assert result.code == 1
    assert result.stdout == (
        f"a\tfailed\t-o {out}/a.json is a FIFO; export writes only regular files (or - for "
        "stdout).\n"
        f"b\tdone\twrote {out}/b.json\n"
    )
    assert stat.S_ISFIFO((out / "a.json").lstat().st_mode)


def test_export_to_stdout_and_to_a_regular_file(project: FlowProject, tmp_path: Path) -> None:
    project.setup("start", "two-step", "--id", "a")
    to_stdout = project.invoke("export", "a", "-o", "-")
    assert to_stdout.code == 0 and json.loads(to_stdout.stdout)["run_id"] == "a"
    target = tmp_path / "a.json"
    target.write_text("old")
    result = project.invoke("export", "a", "-o", str(target))
    assert (result.code, result.stderr) == (0, f"wrote 1 event of run a to {target}\n")
    assert json.loads(target.read_text())["run_id"] == "a"


# -- item 12: a corrupt database ------------------------------------------------------------

CORRUPTIONS = {
    "time": (
        "UPDATE events SET recorded_at = 'garbage' WHERE run_id = 'a' AND sequence = 1",
        "event 1 of run 'a' cannot be read ('garbage' is not a time; or a newer Flow wrote it)",
        "run 'a': event 1 has no valid time (recorded_at)",
    ),
    "bytes": (
        "UPDATE events SET data = CAST(x'7b1b5b324a9bff22' AS TEXT) WHERE run_id = 'a'",
        "a value of column 'data' is not UTF-8 text",
        "run 'a': event 1 holds text that is not UTF-8",
    ),
}


def _corrupt_project(project: FlowProject, sql: str) -> None:
    project.setup("start", "two-step", "--id", "a")
    with sqlite3.connect(project.db) as conn:
        conn.execute(sql)


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
@pytest.mark.parametrize(
    "args", [("history", "a"), ("replay-check", "a", "--build-id", "cli-1"), ("show", "a")]
)
def test_a_corrupt_event_is_one_clean_sentence(
    project: FlowProject, corruption: str, args: tuple[str, ...]
) -> None:
    sql, detail, _ = CORRUPTIONS[corruption]
    _corrupt_project(project, sql)
    result = project.invoke(*args)
    assert (result.code, result.stdout, result.stderr) == (
        1,
        "",
        f"error: Flow database {project.db} is corrupt: {detail}; run `flow check` for what "
        "to do.\n",
    )


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_flow_check_finds_the_rows_that_cannot_be_read(
    project: FlowProject, corruption: str
) -> None:
    sql, _, problem = CORRUPTIONS[corruption]
    _corrupt_project(project, sql)
    result = project.invoke("check")
    assert (result.code, result.stdout) == (1, problem + "\n")
    assert "failed the integrity check (1 problem)" in result.stderr


def test_a_corrupt_runs_row_is_one_clean_sentence(project: FlowProject) -> None:
    _corrupt_project(project, "UPDATE runs SET status = 'Bogus' WHERE run_id = 'a'")
    result = project.invoke("show", "a")
    assert (result.code, result.stderr) == (
        1,
        f"error: Flow database {project.db} is corrupt: the runs row of 'a' cannot be read "
        "('Bogus' is not a valid RunStatus); run `flow check` for what to do.\n",
    )
    check = project.invoke("check")
    assert (check.code, check.stdout) == (
        1,
        "run 'a': its row in the runs index has an unknown status ('Bogus') or an invalid time\n",
    )


def test_a_damaged_page_is_one_clean_sentence(project: FlowProject) -> None:
    for n in range(5):
        project.setup("start", "two-step", "--id", f"r{n}", "--input", json.dumps("x" * 2000))
    page = 4096
    with project.db.open("r+b") as handle:
        size = handle.seek(0, os.SEEK_END)
        for number in range(1, size // page):  # every page but the first (the header)
            handle.seek(number * page + page - 700)
            handle.write(b"\x1b[2J\x9b\xff\x07" * 140)
    for args in (("history", "r1"), ("replay-check", "r1", "--build-id", "cli-1")):
        result = project.invoke(*args)
        assert (result.code, result.stdout, result.stderr) == (
            1,
            "",
            f"error: Flow database {project.db} is corrupt: SQLite says 'database disk image "
            "is malformed'; run `flow check` for what to do.\n",
        )


def test_a_child_id_with_format_characters_is_refused() -> None:
    """A child's run id is ``{parent}/{child_id}``: workflow code cannot smuggle a bidi
    override into a run id either."""
    from cli_workflows import runtime

    from flow_cli.engine.engine import Engine
    from flow_cli.errors import InputError
    from flow_cli.model.clock import ManualClock
    from flow_cli.model.context import WorkflowContext
    from flow_cli.store.memory import MemoryStore

    engine = Engine(MemoryStore(), [runtime], clock=ManualClock())
    engine.start("two-step", run_id="p")
    ctx = WorkflowContext(engine.snapshot("p"))
    with pytest.raises(InputError, match="child id 'k\\\\u202ed' holds the format character"):
        ctx.start_child("k\u202ed", "two-step")
    assert ctx.start_child("kid", "two-step").child_id == "kid"


def test_show_history_and_runs_escape_stored_bidi_overrides(project: FlowProject) -> None:
    _store_run(project, "p\u202eq\u2066")
    for args in (("runs",), ("show", "p\u202eq\u2066"), ("history", "p\u202eq\u2066")):
        result = project.invoke(*args)
        assert result.code == 0, (args, result.stderr)
        assert "\u202e" not in result.stdout and "\u2066" not in result.stdout, args
    assert "p\\u202eq\\u2066" in project.invoke("runs").stdout


def test_doctor_and_builds_escape_stored_ids(project: FlowProject) -> None:
    from datetime import UTC, datetime, timedelta

    from flow_cli.model.spec import WorkflowSpec
    from flow_cli.store.protocol import NewRun
    from flow_cli.store.sqlite import SQLiteStore

    store = SQLiteStore(project.db)
    due = datetime.now(UTC) - timedelta(hours=1)
    spec = WorkflowSpec(workflow="two-step", input=None, runtime_build_id="b\u202e\x1b[2J")
    store.create_run(NewRun(run_id="p\u202eq", spec=spec, seed="00", decide_at=due), due)
    store.close()
    for args in (("doctor",), ("builds",)):
        result = project.invoke(*args)
        for raw in ("\u202e", "\x1b"):
            assert raw not in result.stdout, args
        assert "p\\u202eq" in result.stdout and "b\\u202e\\x1b[2J" in result.stdout, args
