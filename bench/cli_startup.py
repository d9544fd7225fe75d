"""Wall clock of short `flow` commands, start-up included, on a run of 2,000 steps.

    .venv/bin/python bench/cli_startup.py [-n 7] [--baseline /other/checkout/.venv/bin/python]
        [--db-dir DIR]

The database (SQLite, one completed run of bench_workflows' `chain` with 2,000 steps, decided
in-process with Engine.tick) is made once and cached under the temporary directory. Each command
runs N times as a subprocess of the interpreter's own `flow` script; the median and min wall
seconds and the median CPU seconds (user + system, less disturbed by other work) are printed.
With --baseline, the same commands of another build of Flow run interleaved with this one's (one
of each in turn), and the ratios this/baseline of the medians are printed: machines like ours
are noisy, ratios measured in one run are what to compare.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

RUN_ID = "startup-2000"
STEPS = 2000

COMMANDS: list[tuple[str, list[str]]] = [
    ("show RUN", ["show", RUN_ID]),
    ("--version", ["--version"]),
    ("runs", ["runs"]),
    ("show RUN --json", ["show", RUN_ID, "--json"]),
]


def _database(directory: Path) -> Path:
    """The cached database, made by this interpreter's Flow the first time."""
    path = directory / f"chain-{STEPS}.db"
    if path.exists():
        return path
    directory.mkdir(parents=True, exist_ok=True)
    sys.path[:0] = [str(HERE)]
    import bench_workflows

    from flow_cli.engine.engine import Engine
    from flow_cli.store import open_store

    partial = directory / f"chain-{STEPS}.partial.db"
    partial.unlink(missing_ok=True)
    engine = Engine(open_store(f"sqlite:///{partial}"), [bench_workflows.runtime])
    try:
        engine.start("chain", {"steps": STEPS, "x": 0}, run_id=RUN_ID)
        engine.tick(until_idle=True)
        status = engine.get_run(RUN_ID).status.value
    finally:
        engine.close()
    if status != "Completed":
        raise SystemExit(f"the benchmark run ended {status}, not Completed")
    partial.rename(path)
    return path


def _flow(python: str) -> str:
    flow = Path(python).parent / "flow"
    if not flow.exists():
        raise SystemExit(f"no flow script next to {python}")
    return str(flow)


def _time(flow: str, args: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of one ``flow`` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(
        [flow, *args], env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"flow {' '.join(args)} exited {done.returncode}: {done.stderr!r}")
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=7, help="runs of each command (default 7)")
    parser.add_argument("--baseline", help="another Flow build's python, measured interleaved")
    parser.add_argument(
        "--db-dir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "flow-bench-cli-startup",
        help="where the database is cached",
    )
    args = parser.parse_args()
    db = _database(args.db_dir)
    scratch = Path(tempfile.mkdtemp(prefix="flow-bench-"))  # no flow.toml: nothing to read
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLOW_", "PYTHON"))}
    env["FLOW_DB"] = f"sqlite:///{db}"
    env["NO_COLOR"] = "1"
    builds = [("this", _flow(sys.executable))]
    if args.baseline:
        builds.append(("baseline", _flow(args.baseline)))
    print(
        f"{'command':18} {'build':9} {'median s':>9} {'min s':>7} {'ratio':>7}"
        f" {'median cpu s':>13} {'ratio':>7}"
    )
    for name, command in COMMANDS:
        times: dict[str, list[tuple[float, float]]] = {label: [] for label, _ in builds}
        for _label, flow in builds:  # warm the page cache and the .pyc files
            _time(flow, command, env, scratch)
        for _ in range(args.n):
            for label, flow in builds:
                times[label].append(_time(flow, command, env, scratch))
        wall = {label: statistics.median(w for w, _ in values) for label, values in times.items()}
        cpu = {label: statistics.median(c for _, c in values) for label, values in times.items()}
        for label, values in times.items():
            ratio = cpu_ratio = ""
            if label == "this" and "baseline" in wall:
                ratio = f"{wall['this'] / wall['baseline']:6.2f}x"
                cpu_ratio = f"{cpu['this'] / cpu['baseline']:6.2f}x"
            fastest = min(w for w, _ in values)
            print(
                f"{name:18} {label:9} {wall[label]:9.3f} {fastest:7.3f} {ratio:>7}"
                f" {cpu[label]:13.3f} {cpu_ratio:>7}"
            )
        sys.stdout.flush()
    os.rmdir(scratch)


if __name__ == "__main__":
    main()
