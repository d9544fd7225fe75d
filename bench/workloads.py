"""Flow alone on the peers' workloads W1-W4, with real `flow worker` processes.

    .venv/bin/python bench/workloads.py [W1,W2,W3,W3floor,W4] [--backends sqlite,postgres]
        [--baseline /path/to/other/checkout/.venv/bin/python] [--underneath URL] [--quick]

W1: 1,000 runs x 10 sequential steps (steps/s). W2: one run of N steps, N = 200 and 2,000
(ms/step, and the 2,000/200 ratio). W3: a one-step run, start -> completed with a warm worker,
50 in a row (median and p90 ms). W4: 10,000 runs sleeping on a timer that comes due at once
(runs drained per second once due, and the worker's threads while they sleep). W3floor: W3's
commits and wake-ups without Flow (bench/floor.py), the machine's floor under W3; with both,
the ratio W3 / W3floor is printed.

Each figure comes from a fresh database and fresh worker processes (extra `flow worker`
options from $BENCH_WORKER_ARGS, e.g. "--concurrency 4"). With --baseline, every
measurement is also taken with that interpreter (another build of Flow), interleaved, and the
ratio is printed: machines like ours are noisy, ratios measured in one run are what to compare.
With --underneath URL (a database already holding many runs, e.g. one `bench/scale.py` built),
each measurement is taken on a fresh database and on that one, interleaved, and the ratio
big / empty is printed: whether a big database slows the hot path. Its runs stay; this run's
get ids of their own.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

from common import DEFAULT_PG, ROOT, fresh_database, stop, worker_args  # noqa: E402

# Each interpreter measures the Flow it has installed (a baseline is another checkout's build):
# not this checkout's source.
for _entry in (str(ROOT), str(ROOT / "tests")):
    while _entry in sys.path:
        sys.path.remove(_entry)

TERMINAL = ("Completed", "Failed", "Cancelled", "ContinuedAsNew")


def _worker(url: str, scratch: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(HERE)
    env["FLOW_CONFIG"] = str(scratch / "flow.toml")
    env["FLOW_DB"] = url
    (scratch / "flow.toml").write_text(
        '[flow]\nruntimes = ["bench_workflows:runtime"]\nbuild_id = "bench-1"\n', encoding="utf-8"
    )
    flow = str(Path(sys.executable).parent / "flow")
    proc = subprocess.Popen(
        [flow, "worker", *worker_args()],
        env=env,
        cwd=scratch,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    proc.stderr.readline()  # the banner: the worker is up
    time.sleep(0.3)
    return proc


def _wait(engine: object, run_ids: list[str], timeout: float, poll: float) -> bool:
    from flow_cli.engine.engine import Engine

    assert isinstance(engine, Engine)
    end = time.perf_counter() + timeout
    pending = list(run_ids)
    while time.perf_counter() < end:
        pending = [r for r in pending if engine.get_run(r).status.value not in TERMINAL]
        if not pending:
            return True
        time.sleep(poll)
    return False


@contextlib.contextmanager
def _database(backend: str, underneath: str | None) -> Iterator[tuple[str, Path]]:
    if underneath is None:
        with fresh_database(backend, DEFAULT_PG) as found:
            yield found
        return
    scratch = Path(tempfile.mkdtemp(prefix="flow-bench-"))
    try:
        yield underneath, scratch
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def measure(
    workload: str, backend: str, quick: bool, underneath: str | None = None
) -> dict[str, float]:
    """One workload in this interpreter (on a fresh database, or on ``underneath``); returns
    its figures."""
    import bench_workflows

    from flow_cli.engine.engine import Engine
    from flow_cli.store import open_store

    tag = uuid.uuid4().hex[:6] if underneath else ""  # the run ids of this measurement
    with _database(backend, underneath) as (url, scratch):
        if workload == "W3floor":
            import floor

            return floor.measure(url, scratch)
        engine = Engine(open_store(url), [bench_workflows.runtime])
        workers = [_worker(url, scratch)]
        try:
            if workload == "W1":
                runs = 200 if quick else 1000
                t0 = time.perf_counter()
                for i in range(runs):
                    engine.start("chain", {"steps": 10, "x": i}, run_id=f"w1{tag}-{i}")
                ok = _wait(engine, [f"w1{tag}-{i}" for i in range(runs)], 600, 0.05)
                wall = time.perf_counter() - t0
                return {"steps_per_s": 10 * runs / wall, "complete": float(ok)}
            if workload == "W2":
                out: dict[str, float] = {}
                for n in (200, 2000) if not quick else (100, 1000):
                    t0 = time.perf_counter()
                    engine.start("chain", {"steps": n, "x": 0}, run_id=f"w2{tag}-{n}")
                    _wait(engine, [f"w2{tag}-{n}"], 600, 0.01)
                    out[f"ms_per_step_{n}"] = 1000 * (time.perf_counter() - t0) / n
                small, large = sorted(int(k.rsplit("_", 1)[1]) for k in out)
                out["growth"] = out[f"ms_per_step_{large}"] / out[f"ms_per_step_{small}"]
                return out
            if workload == "W3":
                lat = []
                for i in range(55):
                    time.sleep(0.05 + (i % 10) / 100)
                    t0 = time.perf_counter()
                    engine.start("chain", {"steps": 1, "x": i}, run_id=f"w3{tag}-{i}")
                    while engine.get_run(f"w3{tag}-{i}").status.value not in TERMINAL:
                        time.sleep(0.0005)
                    lat.append(1000 * (time.perf_counter() - t0))
                lat = sorted(lat[5:])
                return {"median_ms": statistics.median(lat), "p90_ms": lat[int(0.9 * len(lat))]}
            if workload == "W4":
                runs = 2000 if quick else 10_000
                secs = 20 if quick else 60
                pid = workers[0].pid
                for i in range(runs):
                    engine.start("sleeper", {"secs": secs}, run_id=f"w4-{i}")
                while (
                    engine.list_runs(status=None, limit=None)
                    and sum(1 for r in engine.list_runs() if r.status.value == "Suspended") < runs
                ):
                    time.sleep(0.5)
                threads = len(os.listdir(f"/proc/{pid}/task"))
                due = engine.get_run("w4-0").created_at.timestamp() + secs
                time.sleep(max(0.0, due - time.time()))
                t0 = time.perf_counter()
                ok = _wait(engine, [f"w4-{i}" for i in range(runs)], 900, 0.2)
                wall = time.perf_counter() - t0
                return {"drained_runs_per_s": runs / wall, "threads_asleep": threads, "ok": ok}
            raise SystemExit(f"unknown workload {workload}")
        finally:
            stop(workers)
            engine.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="?", default="W1,W2,W3")
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--baseline", help="another Flow build's python, measured interleaved")
    parser.add_argument(
        "--underneath", help="a database holding many runs: measured on it and on a fresh one"
    )
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument("--one", nargs=2, metavar=("WORKLOAD", "BACKEND"), help=argparse.SUPPRESS)
    parser.add_argument("--on", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:  # a child measurement: one JSON line
        print(json.dumps(measure(args.one[0], args.one[1], args.quick, args.on)))
        return
    rows = []
    for workload in args.workloads.split(","):
        for backend in args.backends.split(","):
            pythons: list[tuple[str, str, str | None]] = []
            if args.underneath:  # "this" is the big database, "baseline" a fresh one
                pythons += [("this", sys.executable, args.underneath)]
                pythons += [("baseline", sys.executable, None)]
            else:
                pythons += [("this", sys.executable, None)]
            if args.baseline and not args.underneath:
                pythons.append(("baseline", args.baseline, None))
            figures = {}
            for label, python, on in pythons:
                cmd = [python, __file__, "--one", workload, backend]
                cmd += ["--quick"] if args.quick else []
                cmd += ["--on", on] if on else []
                out = subprocess.run(cmd, capture_output=True, text=True, check=False)
                lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
                figures[label] = json.loads(lines[-1]) if lines else {"error": out.stderr[-300:]}
            rows.append((workload, backend, figures))
            for key, value in figures["this"].items():
                base = figures.get("baseline", {}).get(key)
                ratio = f"{value / base:6.2f}x" if isinstance(base, float | int) and base else ""
                basetext = f"{base:10.2f}" if isinstance(base, float | int) else ""
                print(f"{workload}  {backend:8}  {key:20} {value:10.2f} {basetext} {ratio}")
            sys.stdout.flush()
    for backend in args.backends.split(","):
        found = {w: f["this"].get("median_ms") for w, b, f in rows if b == backend}
        if found.get("W3") and found.get("W3floor"):
            ratio = found["W3"] / found["W3floor"]
            print(f"W3 / W3floor  {backend:8}  median ratio {ratio:6.2f}x")


if __name__ == "__main__":
    main()
