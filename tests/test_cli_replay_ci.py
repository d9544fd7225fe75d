"""``flow replay-check`` made for CI logs: directories and globs, the build from flow.toml,
grouped divergences in one vocabulary, windows around the difference, GitHub annotations, and
unreadable files reported while the others are still checked."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from triage_helpers import TriageProject, project_for

from flow_cli.cli.replay_report import VALUE_WIDTH, first_difference, in_event_terms, window


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def proj(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TriageProject]:
    for project in project_for(request.param, tmp_path):
        for n in range(4):
            project.setup("start", "two-step", "--id", f"t{n}", "--input", '{"n": 7}')
        project.setup("start", "two-step", "--id", "odd", "--input", '{"n": 1}')
        project.setup("start", "approval", "--id", "ap")
        project.setup("tick", "--until-idle")
        yield project


def test_identical_divergences_are_grouped_and_fit_120_columns(proj: TriageProject) -> None:
    result = proj.run("replay-check", "--all", "--build-id", "cli-2", env={"COLUMNS": "120"})
    assert result.code == 3
    lines = result.stdout.splitlines()
    assert all(len(line) <= 120 for line in lines)
    rows = [line.split() for line in lines if "'first'" in line]
    assert rows == [
        ["4", "step", "'first'", "input", '{"n":7}', '{"n":107}', "t0,", "t1,", "t2", "+1"],
        ["1", "step", "'first'", "input", '{"n":1}', '{"n":101}', "odd"],
    ]
    assert lines[-1] == (
        "replay-check: 5 of 6 histories diverge from build cli-2 (2 distinct divergences)"
    )
    grouped = proj.invoke("replay-check", "--all", "--build-id", "cli-2", "--json").json()
    assert [(g["runs"], g["sample_runs"]) for g in grouped["groups"]] == [
        (4, ["t0", "t1", "t2"]),
        (1, ["odd"]),
    ]


def test_build_id_defaults_to_flow_toml(proj: TriageProject) -> None:
    result = proj.invoke("replay-check", "--all")
    assert result.code == 0
    assert result.stdout == "replay-check: 6 of 6 histories replay cleanly against build cli-1\n"


def test_files_directories_and_globs_with_one_unreadable_file(
    proj: TriageProject, tmp_path: Path
) -> None:
    exports = tmp_path / "exports"
    proj.setup("export", "--workflow", "two-step", "-o", str(exports / "nested"), "--yes")
    (exports / "broken.json").write_text("{not json", encoding="utf-8")
    args = ("--file", str(exports), "--file", str(exports / "nested" / "t*.json"))
    result = proj.run("replay-check", *args, "--build-id", "cli-1-compatible")
    assert result.code == 2  # every readable history replays; one file could not be read
    assert result.stdout.splitlines()[-1] == (
        "replay-check: 5 of 5 histories replay cleanly against build cli-1-compatible; "
        "1 file could not be read"
    )
    assert result.error_line().startswith(f"error: {exports / 'broken.json'} is not JSON")
    diverged = proj.run("replay-check", *args, "--build-id", "cli-2", "--format", "github")
    assert diverged.code == 3
    annotations = [line for line in diverged.stdout.splitlines() if line.startswith("::error")]
    assert annotations[0] == (
        f"::error file={exports / 'nested' / 't0.json'},title=replay-check%3A 4 runs diverge "
        "from build cli-2::step 'first' input (event 2): recorded {\"n\":7} produced "
        '{"n":107}; runs t0, t1, t2 +1'
    )
    assert annotations[2].startswith(f"::error file={exports / 'broken.json'},title=")
    nothing = proj.invoke("replay-check", "--file", str(tmp_path / "none-*.json"))
    assert nothing.code == 2 and "matches no file" in nothing.stderr


def test_both_sides_in_event_vocabulary_and_a_window_on_the_difference() -> None:
    produced = {"ScheduleStep": {"step_id": "charge", "input": {"amount": 1}}}
    assert in_event_terms(produced) == {"step_scheduled": produced["ScheduleStep"]}
    assert in_event_terms({"step_scheduled": {}}) == {"step_scheduled": {}}
    assert in_event_terms("text") == "text"
    long_a = '{"padding":"' + "x" * 200 + '","amount":120.0,"currency":"EUR"}'
    long_b = long_a.replace("120.0", "120.01")
    at = first_difference(long_a, long_b)
    shown_a, shown_b = window(long_a, at), window(long_b, at)
    assert "120.0," in shown_a and "120.01" in shown_b
    assert shown_a.startswith("…") and len(shown_a) == len(shown_b) == VALUE_WIDTH
    assert window("short", 2) == "short"
