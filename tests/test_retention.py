"""``flow prune`` and retention (DESIGN §6.5): the ``Retention`` store role on every store, the
family rules (never an open run, chains and parents only whole), archives that replay and
verify, bad input, and background retention on one worker at a time."""

from __future__ import annotations

import dataclasses
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from cli_helpers import FlowProject
from retention_workflows import runtime

from flow_cli.engine.engine import Engine
from flow_cli.engine.retention import PruneRequest, RetentionKeeper, RetentionPolicy
from flow_cli.errors import RunNotFound
from flow_cli.model.clock import ManualClock
from flow_cli.model.status import RunStatus
from flow_cli.store.protocol import EventStore, RunFilter

DAY = timedelta(days=1)


def _engine(store: EventStore, clock: ManualClock, name: str = "w1") -> Engine:
    return Engine(store, [runtime], clock=clock, worker_id=name)


def _prune(engine: Engine, clock: ManualClock, archive: Path | None = None) -> list[str]:
    request = PruneRequest(where=RunFilter(), ended_before=clock.now() - DAY, archive=archive)
    return engine.prune(request).pruned


def _ids(engine: Engine) -> set[str]:
    return {r.run_id for r in engine.find_runs(RunFilter())}


# -- the store role, on every store -------------------------------------------------------------


def test_delete_runs_removes_every_row_of_ended_runs_and_leaves_open_ones(
    store: EventStore, clock: ManualClock
) -> None:
    engine = _engine(store, clock)
    engine.start("done", {"step": True}, run_id="stepped", attributes={"customer": "acme"})
    engine.start("waiter", None, run_id="open")
    engine.tick(until_idle=True)
    assert engine.get_run("stepped").status is RunStatus.COMPLETED

    assert store.delete_runs(["stepped", "open", "unknown"]) == ["stepped"]

    assert store.get_run("stepped") is None
    with pytest.raises(RunNotFound):
        store.read_history("stepped")
    assert store.get_run("open") is not None and len(store.read_history("open")) > 1
    assert store.check_integrity() == []  # no event, step task or hook left without its run
    assert store.delete_runs([]) == []
    store.reclaim_space()

    # Its search attributes went too: a new run of the same id starts with none.
    engine.start("waiter", None, run_id="stepped")
    assert engine.get_run("stepped").attributes == {}
    assert store.delete_runs(["stepped"]) == []  # open now


def test_children_of_lists_the_runs_whose_parent_is_given(
    store: EventStore, clock: ManualClock
) -> None:
    engine = _engine(store, clock)
    engine.start("family", {"child": "waiter"}, run_id="p")
    engine.start("done", None, run_id="alone")
    engine.tick(until_idle=True)

    assert [r.run_id for r in store.children_of(["p", "alone"])] == ["p/kid"]
    assert store.children_of(["alone"]) == []


def test_a_lease_is_held_by_one_owner_until_it_runs_out(
    store: EventStore, clock: ManualClock
) -> None:
    now = clock.now()
    minute = timedelta(minutes=1)
    assert store.take_lease("retention", "a", now, now + minute)
    assert not store.take_lease("retention", "b", now, now + minute)
    assert store.take_lease("retention", "a", now, now + 2 * minute)  # renewed
    assert not store.take_lease("retention", "b", now + minute, now + 3 * minute)
    assert store.take_lease("other", "b", now, now + minute)  # leases are by name
    store.release_lease("retention", "b")  # not b's: nothing happens
    assert not store.take_lease("retention", "b", now, now + minute)
    assert store.take_lease("retention", "b", now + 2 * minute, now + 3 * minute)  # ran out
    store.release_lease("retention", "b")
    assert store.take_lease("retention", "a", now, now + minute)


# -- what prune deletes -----------------------------------------------------------------------


def test_prune_never_deletes_an_open_run_however_old(store: EventStore, clock: ManualClock) -> None:
    engine = _engine(store, clock)
    engine.start("waiter", None, run_id="open")
    engine.start("done", None, run_id="ended")
    engine.tick(until_idle=True)
    clock.advance(30 * DAY)

    assert _prune(engine, clock) == ["ended"]
    assert _ids(engine) == {"open"}


def test_prune_keeps_a_chain_until_its_last_run_has_ended(
    store: EventStore, clock: ManualClock
) -> None:
    engine = _engine(store, clock)
    engine.start("relay", {"generation": 0, "wait": True}, run_id="r")
    engine.tick(until_idle=True)
    assert engine.get_run("r").status is RunStatus.CONTINUED_AS_NEW
    clock.advance(30 * DAY)

    assert _prune(engine, clock) == []
    assert _ids(engine) == {"r", "r~1", "r~2"}

    engine.signal("r~2", "go")
    engine.tick(until_idle=True)
    clock.advance(DAY / 2)
    assert _prune(engine, clock) == []  # the chain's last run ended too recently

    clock.advance(DAY)
    assert sorted(_prune(engine, clock)) == ["r", "r~1", "r~2"]
    assert _ids(engine) == set()


def test_prune_keeps_an_ended_parent_while_its_child_is_open(
    store: EventStore, clock: ManualClock
) -> None:
    engine = _engine(store, clock)
    engine.start("family", {"child": "waiter", "abandon": True}, run_id="p")
    engine.tick(until_idle=True)
    engine.terminate("p")
    engine.tick(until_idle=True)
    assert engine.get_run("p").status.terminal
    assert not engine.get_run("p/kid").status.terminal
    clock.advance(30 * DAY)

    top = PruneRequest(where=RunFilter(top_level=True), ended_before=clock.now() - DAY)
    report = engine.prune(top)
    assert (report.pruned, report.kept) == ([], 1)
    assert _ids(engine) == {"p", "p/kid"}

    engine.signal("p/kid", "go")
    engine.tick(until_idle=True)
    clock.advance(30 * DAY)
    # Selected by the parent alone, the whole family goes, the child first.
    top = PruneRequest(where=RunFilter(top_level=True), ended_before=clock.now() - DAY)
    assert engine.prune(top).pruned == ["p/kid", "p"]
    assert _ids(engine) == set()


def test_prune_with_filters_deletes_only_what_they_select(
    store: EventStore, clock: ManualClock
) -> None:
    engine = _engine(store, clock)
    for n in range(3):
        engine.start("done", n, run_id=f"d{n}")
    engine.start("relay", {"generation": 2}, run_id="solo")
    engine.tick(until_idle=True)
    clock.advance(30 * DAY)
    where = RunFilter(workflow="done", limit=2)
    request = PruneRequest(where=where, ended_before=clock.now() - DAY)

    assert len(engine.prune(request, dry_run=True).pruned) == 2
    assert _ids(engine) == {"d0", "d1", "d2", "solo"}  # a dry run deletes nothing
    assert sorted(engine.prune(request).pruned) == ["d1", "d2"]  # newest first
    assert _ids(engine) == {"d0", "solo"}


def test_prune_goes_through_more_runs_than_a_page_and_a_batch(
    store: EventStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flow_cli.engine import retention

    monkeypatch.setattr(retention, "PAGE", 7)
    engine = _engine(store, clock)
    for n in range(12):
        engine.start("waiter" if n % 4 == 0 else "done", None, run_id=f"run-{n:02d}")
    engine.start("relay", {"generation": 0}, run_id="chain")
    engine.tick(until_idle=True)
    clock.advance(30 * DAY)

    request = PruneRequest(where=RunFilter(), ended_before=clock.now() - DAY, batch_runs=2)
    report = engine.prune(request)
    assert len(report.pruned) == 9 + 3 and report.batches >= 6
    assert _ids(engine) == {"run-00", "run-04", "run-08"}
    assert engine.prune(request).pruned == []  # idempotent


# -- archives ---------------------------------------------------------------------------------

CONFIG = """\
[flow]
database = "sqlite:///flow.db"
build_id = "keep-1"
runtimes = ["retention_workflows:runtime"]
"""


@pytest.fixture
def project(tmp_path: Path) -> FlowProject:
    made = FlowProject(tmp_path, CONFIG)
    made.setup("start", "relay", "--id", "r", "--input", '{"generation": 0}')
    made.setup("start", "done", "--id", "d/1", "--input", '{"step": true}')
    made.setup("start", "waiter", "--id", "open")
    made.setup("tick", "--until-idle")
    return made


def test_an_archive_replays_verifies_and_catches_a_changed_byte(
    project: FlowProject, tmp_path: Path
) -> None:
    archive = tmp_path / "archive"
    archive.mkdir()
    done = project.invoke("prune", "--ended-before", "0s", "--archive", str(archive), "--yes")
    assert done.code == 0, done.stderr
    assert done.stdout.startswith(f"pruned 4 runs, archived to {archive}")
    assert project.invoke("runs", "--json").json()[0]["run_id"] == "open"
    files = sorted(p.relative_to(archive).as_posix() for p in archive.rglob("*.json"))
    assert len(files) == 4 and all(f.count("/") == 1 for f in files)
    assert "d%2F1.json" in {Path(f).name for f in files}

    replayed = project.invoke("replay-check", "--file", str(archive), "--build-id", "keep-1")
    assert replayed.code == 0, replayed.stdout + replayed.stderr
    verified = project.invoke("archive", "verify", str(archive))
    assert (verified.code, verified.stdout) == (0, f"{archive}: 4 files of 4 runs ok\n")

    changed = archive / files[0]
    data = bytearray(changed.read_bytes())
    data[10] ^= 1
    changed.write_bytes(bytes(data))
    (archive / files[1]).unlink()
    (archive / "2026-01-01").mkdir()
    (archive / "2026-01-01" / "stray.json").write_text("{}")
    bad = project.invoke("archive", "verify", str(archive))
    assert bad.code == 1
    assert sorted(bad.stdout.splitlines()) == [
        f"changed: {files[0]} (its sha256 is not the manifest's)",
        "extra: 2026-01-01/stray.json (not in MANIFEST.jsonl)",
        f"missing: {files[1]}",
    ]


def test_a_prune_resumed_after_its_archive_was_written_archives_once(
    store: EventStore, clock: ManualClock, tmp_path: Path
) -> None:
    engine = _engine(store, clock)
    engine.start("done", None, run_id="a")
    engine.tick(until_idle=True)
    clock.advance(30 * DAY)
    from flow_cli.engine.archive import Archive, verify

    tmp_path = tmp_path / "archive"
    tmp_path.mkdir()
    history = engine.history("a")
    Archive(tmp_path).write([("a", history)])  # a prune that died before its delete
    with (tmp_path / "MANIFEST.jsonl").open("a") as manifest:
        manifest.write('{"path": "torn')  # and a torn line after it
    assert _prune(engine, clock, tmp_path) == ["a"]
    found = verify(tmp_path)
    assert (found.files, found.problems) == (1, ())
    assert len((tmp_path / "MANIFEST.jsonl").read_text().splitlines()) == 1


def test_bad_input_is_one_line_and_exit_2_and_deletes_nothing(
    project: FlowProject, tmp_path: Path
) -> None:
    before = project.invoke("count").stdout
    cases = [
        (["prune", "--ended-before", "soon", "--yes"], "--ended-before 'soon'"),
        (["prune", "--ended-before", "0s", "--archive", str(tmp_path / "nope"), "--yes"], "nope"),
        (["prune", "--ended-before", "0s", "--status", "Suspended", "--yes"], "only ended"),
        (["prune", "--ended-before", "0s"], "add --yes"),
        (["archive", "verify", str(tmp_path)], "no MANIFEST.jsonl"),
        (["archive", "verify", str(tmp_path / "nope")], "not a directory"),
    ]
    for args, expected in cases:
        result = project.invoke(*args)
        assert result.code == 2, (args, result.stdout, result.stderr)
        assert expected in result.error_line(), (args, result.stderr)
    assert project.invoke("count").stdout == before


def test_dry_run_lists_what_would_go(project: FlowProject) -> None:
    result = project.invoke("prune", "--ended-before", "0s", "--dry-run")
    assert result.code == 0
    assert sorted(line.split()[0] for line in result.stdout.splitlines()) == [
        "d/1",
        "r",
        "r~1",
        "r~2",
    ]
    assert "would prune 4 runs" in result.stderr
    assert len(project.invoke("runs", "--json").json()) == 5


# -- in the background ------------------------------------------------------------------------


def test_background_retention_runs_on_one_worker_at_a_time(tmp_path: Path) -> None:
    from flow_cli.store.sqlite import SQLiteStore

    clock = ManualClock()
    path = tmp_path / "flow.db"
    engines = [_engine(SQLiteStore(path), clock, name) for name in ("w1", "w2")]
    for n in range(40):
        engines[0].start("done", n, run_id=f"run-{n:02d}")
    clock.advance(30 * DAY)
    busy: list[str] = []
    overlaps: list[tuple[str, ...]] = []
    lock = threading.Lock()
    for engine in engines:
        store = engine.store
        real = store.delete_runs

        def deleting(ids: list[str], real=real, name=engine.worker_id) -> list[str]:  # type: ignore[no-untyped-def]
            with lock:
                busy.append(name)
                if len(set(busy)) > 1:
                    overlaps.append(tuple(busy))
            time.sleep(0.002)
            try:
                return real(ids)
            finally:
                with lock:
                    busy.remove(name)

        store.delete_runs = deleting  # type: ignore[method-assign]
    policy = RetentionPolicy(keep=DAY, check_seconds=0.01, batch_runs=2)
    stop = threading.Event()
    keepers = [RetentionKeeper(engine, policy, stop) for engine in engines]
    for keeper in keepers:
        keeper.start()
    deadline = time.monotonic() + 20
    while _ids(engines[0]) and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    for keeper in keepers:
        keeper.join(10)
    for engine in engines:
        engine.close()
    assert sum(k.pruned for k in keepers) == 40
    assert overlaps == []


def test_background_retention_is_cheap_when_nothing_is_due(
    store: EventStore, clock: ManualClock
) -> None:
    engine = _engine(store, clock)
    engine.start("done", None, run_id="recent")
    keeper = RetentionKeeper(engine, RetentionPolicy(keep=DAY), threading.Event())
    assert keeper.prune_due() == 0
    assert keeper.passes == 0  # no lease taken, nothing read but one index probe
    assert store.take_lease("retention", "someone-else", clock.now(), clock.now() + 3 * DAY)
    clock.advance(2 * DAY)
    assert keeper.prune_due() == 0  # due, but another worker holds the lease
    assert _ids(engine) == {"recent"}
    clock.advance(2 * DAY)
    assert keeper.prune_due() == 1  # the lease ran out: this worker takes it
    assert _ids(engine) == set()


def test_the_config_file_sets_retention(tmp_path: Path) -> None:
    from flow_cli.cli.config import read_config
    from flow_cli.errors import ConfigError

    path = tmp_path / "flow.toml"
    path.write_text('[flow]\nretention = "30d"\nretention_archive = "archive"\n')
    config = read_config(path, True)
    assert (config.retention, config.retention_archive) == (30 * DAY, tmp_path / "archive")
    assert config.unknown_keys == ()
    for table, expected in (
        ('retention = "soon"', "not a duration"),
        ('retention = "0s"', "longer than 0s"),
        ('retention_archive = "archive"', "needs retention"),
    ):
        path.write_text(f"[flow]\n{table}\n")
        with pytest.raises(ConfigError, match=expected):
            read_config(path, True)


def test_a_worker_with_retention_prunes_in_the_background(
    store: EventStore, clock: ManualClock
) -> None:
    from flow_cli.engine.worker import Worker

    engine = _engine(store, clock)
    engine.start("done", None, run_id="old")
    engine.start("waiter", None, run_id="open")
    engine.tick(until_idle=True)
    clock.advance(30 * DAY)
    policy = RetentionPolicy(keep=DAY, check_seconds=0.01)
    worker = Worker(engine, concurrency=1, max_idle_sleep=0.01, retention=policy)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while "old" in _ids(engine) and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        worker.stop()
        thread.join(30)
    assert _ids(engine) == {"open"}
    assert worker.retention is not None and worker.retention.pruned == 1


def test_a_worker_refuses_a_retention_archive_it_cannot_write(tmp_path: Path) -> None:
    project = FlowProject(tmp_path, CONFIG + 'retention = "30d"\nretention_archive = "gone"\n')
    result = project.run("worker", timeout=30)
    assert result.code == 2
    assert "retention_archive" in result.error_line() and "no such directory" in result.stderr


def test_a_family_cut_by_a_crash_is_finished_by_the_next_prune(
    store: EventStore, clock: ManualClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flow_cli.engine.archive import verify

    tmp_path = tmp_path / "archive"
    tmp_path.mkdir()
    engine = _engine(store, clock)
    engine.start("family", {"child": "done"}, run_id="p")
    engine.tick(until_idle=True)
    assert engine.get_run("p").status is RunStatus.COMPLETED
    clock.advance(30 * DAY)
    real = store.delete_runs
    calls: list[list[str]] = []

    def crashing(ids: list[str]) -> list[str]:
        calls.append(list(ids))
        if len(calls) > 1:
            raise KeyboardInterrupt  # the process dies between two batches of one family
        return real(ids)

    monkeypatch.setattr(store, "delete_runs", crashing)
    # Only the parent is selected; the family spans two batches of one run each.
    request = PruneRequest(
        where=RunFilter(top_level=True),
        ended_before=clock.now() - DAY,
        archive=tmp_path,
        batch_runs=1,
    )
    with pytest.raises(KeyboardInterrupt):
        engine.prune(request)
    assert calls == [["p/kid"], ["p"]]  # the farthest member first: the parent still selects it
    assert _ids(engine) == {"p"}
    monkeypatch.setattr(store, "delete_runs", real)

    assert engine.prune(request).pruned == ["p"]
    assert _ids(engine) == set()
    found = verify(tmp_path)
    assert (found.files, found.runs, found.problems) == (2, 2, ())


def test_an_archive_that_cannot_be_written_deletes_nothing(
    clock: ManualClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from flow_cli.engine import archive
    from flow_cli.errors import ArchiveFailed
    from flow_cli.store.memory import MemoryStore

    engine = _engine(MemoryStore(), clock)
    engine.start("done", None, run_id="a")
    clock.advance(30 * DAY)

    def full(fd: int, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(archive, "_write_all", full)
    with pytest.raises(ArchiveFailed, match="No space left on device; the runs not archived"):
        _prune(engine, clock, tmp_path)
    assert _ids(engine) == {"a"}
    assert not (tmp_path / "MANIFEST.jsonl").exists()


def test_a_prune_gives_the_space_back_on_sqlite(tmp_path: Path, clock: ManualClock) -> None:
    from flow_cli.store.sqlite import SQLiteStore

    path = tmp_path / "flow.db"
    store = SQLiteStore(path)
    engine = _engine(store, clock)
    for n in range(200):
        engine.start("done", {"n": n, "pad": "x" * 2000}, run_id=f"run-{n:03d}")
    clock.advance(30 * DAY)
    conn = store._conn()
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    assert len(_prune(engine, clock)) == 200
    assert conn.execute("PRAGMA freelist_count").fetchone()[0] == 0
    assert conn.execute("PRAGMA page_count").fetchone()[0] < pages / 4
    engine.close()


def test_prune_asked_for_open_statuses_only_prunes_nothing(
    clock: ManualClock, tmp_path: Path
) -> None:
    from flow_cli.store.memory import MemoryStore

    engine = _engine(MemoryStore(), clock)
    engine.start("done", None, run_id="ended")
    clock.advance(30 * DAY)
    where = RunFilter(statuses=(RunStatus.SUSPENDED,))
    request = PruneRequest(where=where, ended_before=clock.now(), archive=tmp_path)
    assert engine.prune(request).pruned == []
    assert engine.prune(dataclasses.replace(request, where=RunFilter()), dry_run=True).pruned == [
        "ended"
    ]
    assert _ids(engine) == {"ended"}
    assert list(tmp_path.iterdir()) == []  # a dry run writes nothing in the archive
