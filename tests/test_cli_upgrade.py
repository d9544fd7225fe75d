"""End to end through the real ``flow`` command, on SQLite and PostgreSQL: ``flow upgrade`` moves
the example shop's runs from ``shop-2026.11.1`` to ``shop-2026.12.1`` (a patch-guarded change)
and refuses ``shop-2026.12.1-broken`` (unguarded) for the runs it would break."""

from __future__ import annotations

from typing import Any

from fleet_helpers import FleetProject, fleet, start_order, stop, wait_for

__all__ = ["fleet"]

OLD, NEW, BROKEN = "shop-2026.11.1", "shop-2026.12.1", "shop-2026.12.1-broken"

NEW_ONLY = """\
[flow]
build_id = "shop-2026.12.1"
runtimes = ["workflows_example.orders:runtime"]
"""


def _orders(project: FleetProject) -> None:
    """``o-approval`` waits for its approval hook (the amount is recorded in the hook's
    metadata); ``o-new`` has not been decided yet; ``o-done`` was rejected (ended)."""
    start_order(project, "o-approval", "--build-id", OLD, amount=10.99)
    start_order(project, "o-done", "--build-id", OLD, amount=10.99)
    project.must("tick", "--until-idle")
    project.must("hook", "resolve", _token(project, "o-done"), "--payload", '{"approved": false}')
    project.must("tick", "--until-idle")
    start_order(project, "o-new", "--build-id", OLD, amount=10.99)


def _token(project: FleetProject, run_id: str) -> str:
    hooks = project.must("hook", "list", run_id, "--open", "--json").json()
    return str(hooks[0]["token"])


def _builds(project: FleetProject) -> dict[str, str]:
    rows: list[dict[str, Any]] = project.must("runs", "--json").json()
    return {row["run_id"]: row["build_id"] for row in rows}


def _histories(project: FleetProject) -> dict[str, list[Any]]:
    return {r: project.must("history", r, "--json").json() for r in _builds(project)}


def test_upgrade_moves_runs_in_flight_and_they_complete_on_the_new_build(
    fleet: FleetProject,
) -> None:
    _orders(fleet)
    before = _histories(fleet)

    dry = fleet.flow("upgrade", "--from", OLD, "--to", NEW, "--dry-run", "--json")
    assert dry.code == 0
    assert dry.stderr.startswith("note: no live worker hosts build 'shop-2026.12.1'")
    assert dry.json() == {
        "from": OLD,
        "to": NEW,
        "dry_run": True,
        "upgraded": ["o-new", "o-approval"],
        "refused": [],
        "skipped": [],
    }
    assert _histories(fleet) == before  # --dry-run changes nothing

    # No worker runs yet: the new-only workers start once the runs are there.
    done = fleet.flow("upgrade", "--from", OLD, "--to", NEW, "--allow-unhosted")
    assert done.code == 0, done.stderr
    assert "o-approval   upgraded   shop-2026.11.1 → shop-2026.12.1" in done.stdout
    assert done.stdout.splitlines()[-1] == "upgrade: 2 of 2 runs re-pinned to build shop-2026.12.1"
    assert _builds(fleet) == {"o-new": NEW, "o-approval": NEW, "o-done": OLD}
    last = fleet.must("history", "o-approval", "--json").json()[-1]
    assert (last["event_key"], last["data"]) == ("build_upgraded", {"from": OLD, "to": NEW})
    shown = fleet.must("show", "o-approval", "--json").json()
    assert (shown["build_id"], shown["patches"]) == (NEW, [])
    assert shown["build_upgrades"][0]["sequence"] == last["sequence"]
    assert "upgraded from shop-2026.11.1" in fleet.must("show", "o-approval").stdout
    assert fleet.must("history", "o-done", "--json").json() == before["o-done"]
    again = fleet.flow("upgrade", "--from", OLD, "--to", NEW, "--json")
    assert again.json()["upgraded"] == []

    # Workers that host only the new build finish the runs upgraded mid-flight.
    (fleet.root / "new-only.toml").write_text(NEW_ONLY, encoding="utf-8")
    new_only = ("--config", "new-only.toml")
    fleet.must(*new_only, "tick", "--until-idle")
    for run_id in ("o-approval", "o-new"):
        token = _token(fleet, run_id)
        fleet.must(*new_only, "hook", "resolve", token, "--payload", '{"approved": true}')
    fleet.must(*new_only, "tick", "--until-idle")
    for run_id in ("o-approval", "o-new"):
        fleet.must(*new_only, "signal", run_id, "shipped", "--payload", '{"tracking": "T"}')
    fleet.must(*new_only, "tick", "--until-idle")
    for run_id in ("o-approval", "o-new"):
        result = fleet.must(*new_only, "result", run_id).json()
        # No patch marker on these runs: the new build keeps the old arithmetic (13.18 is
        # int(10.99 * 1.2 * 100) / 100, where the patched rounding would make 13.19).
        assert result["amount"] == 13.18 and result["tracking"] == "T"
    check = fleet.flow("replay-check", "o-approval", "o-new", "--build-id", NEW)
    assert check.code == 0, check.stdout + check.stderr


def test_upgrade_refuses_the_broken_build_for_the_runs_it_would_break(
    fleet: FleetProject,
) -> None:
    _orders(fleet)
    before = _histories(fleet)
    result = fleet.flow("upgrade", "--from", OLD, "--to", BROKEN, "--json", "--allow-unhosted")
    assert (result.code, result.stderr) == (3, "")
    document = result.json()
    assert document["upgraded"] == ["o-new"]
    [refused] = document["refused"]
    assert refused["run_id"] == "o-approval"
    [divergence] = refused["divergences"]
    assert (divergence["identity"], divergence["field"]) == ("hook 'approval'", "metadata")
    assert (divergence["recorded"]["amount"], divergence["produced"]["amount"]) == (13.18, 1318.0)
    assert _builds(fleet) == {"o-new": BROKEN, "o-approval": OLD, "o-done": OLD}
    assert fleet.must("history", "o-approval", "--json").json() == before["o-approval"]

    table = fleet.flow("upgrade", "--from", OLD, "--to", BROKEN, "--dry-run", "--allow-unhosted")
    assert (table.code, table.stderr) == (3, "")
    lines = table.stdout.splitlines()
    assert any(line.split()[:2] == ["o-approval", "refused"] for line in lines)
    assert any("hook 'approval'" in line and "metadata" in line for line in lines)
    assert lines[-1] == (
        "upgrade: 0 of 1 run would be re-pinned to build shop-2026.12.1-broken, 1 refused "
        "(they stay on shop-2026.11.1); dry run: nothing changed"
    )


def test_upgrade_usage_errors_are_one_line_and_exit_2(fleet: FleetProject) -> None:
    _orders(fleet)
    before = _histories(fleet)
    for args, message in (
        (("--from", OLD, "--to", OLD), "--from and --to are both 'shop-2026.11.1'"),
        (("--from", OLD, "--to", "shop-9"), "shop-9"),
        (("--from", OLD, "--to", NEW, "nope"), "'nope' does not exist"),
        (("--from", OLD, "--to", NEW, "--status", "Completed"), "never upgraded"),
        (("--from", OLD, "--to", NEW, "--build-id", NEW), "contradicts --from"),
        (("--from", OLD, "--to", NEW, "o-new", "--workflow", "order"), "not both"),
        (("--to", NEW), "--from"),
    ):
        result = fleet.flow("upgrade", *args)
        assert (result.code, result.stdout) == (2, ""), (args, result.stderr)
        assert message in result.error_line(), args
    assert _histories(fleet) == before


def test_named_and_filtered_runs(fleet: FleetProject) -> None:
    _orders(fleet)
    named = fleet.flow(
        "upgrade", "--from", OLD, "--to", NEW, "o-done", "o-new", "--json", "--allow-unhosted"
    )
    assert named.code == 0, named.stderr
    assert named.json()["upgraded"] == ["o-new"]
    assert named.json()["skipped"] == [
        {"run_id": "o-done", "reason": "it has ended (Failed); not touched"}
    ]
    from_stdin = fleet.run(
        "--db",
        fleet.url,
        "upgrade",
        "--from",
        OLD,
        "--to",
        NEW,
        "-",
        "--json",
        "--allow-unhosted",
        stdin="o-approval\n",
    )
    assert from_stdin.json()["upgraded"] == ["o-approval"]
    none = fleet.flow("upgrade", "--from", OLD, "--to", NEW, "--waiting-on", "hook")
    assert (none.code, none.stdout) == (0, "")
    assert none.stderr == "no open runs of build shop-2026.11.1 to upgrade; nothing done\n"


def test_upgrade_refuses_a_build_no_live_worker_hosts(fleet: FleetProject) -> None:
    _orders(fleet)  # its ticks hosted every build, and are gone
    before = _histories(fleet)

    refused = fleet.flow("upgrade", "--from", OLD, "--to", NEW)

    assert (refused.code, refused.stdout) == (1, "")
    assert "no live worker hosts build 'shop-2026.12.1'" in refused.error_line()
    assert "--allow-unhosted" in refused.error_line()
    assert _histories(fleet) == before
    (fleet.root / "new-only.toml").write_text(NEW_ONLY, encoding="utf-8")
    worker = fleet.spawn_worker(
        env={"FLOW_CONFIG": "new-only.toml", "FLOW_HEARTBEAT_SECONDS": "0.2"}
    )
    try:
        wait_for(
            lambda: any(
                w["live"] and NEW in w["builds"] for w in fleet.must("workers", "--json").json()
            ),
            "the worker hosting the new build to register",
        )
        done = fleet.flow("upgrade", "--from", OLD, "--to", NEW, "--json")
        assert done.code == 0, done.stderr
        assert sorted(done.json()["upgraded"]) == ["o-approval", "o-new"]
    finally:
        stop(worker)
