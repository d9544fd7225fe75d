"""W1 while 100 concurrent scrapes a second hit the worker's /metrics, against W1 alone.

    .venv/bin/python bench/scrape_flood.py [--pairs 3] [--backend sqlite|postgres]
                                           [--rate 100] [--runs 1000]

W1 (bench/workloads.py): 1,000 runs x 10 sequential steps on one real `flow worker`, here
started with `--metrics-port`. Each pair measures W1 twice on fresh databases, once with a
scraper process firing `--rate` concurrent GET /metrics a second at 127.0.0.1 (loopback only,
for as long as W1 runs), once without; which one goes first alternates. Prints steps/s of
each, the ratio flooded / quiet of the medians (target: within 5 %) and the scrape errors
(target: 0; an error is a refused or reset connection, a timeout or a status other than 200).
Each line also gives the worker's CPU seconds for the whole W1, and the scraper's own: on a
small machine the scraper competes with the worker for the cores.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

from common import DEFAULT_PG, fresh_database, stop  # noqa: E402

TERMINAL = ("Completed", "Failed", "Cancelled", "ContinuedAsNew")


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _worker(url: str, scratch: Path, port: int | None) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(HERE), FLOW_CONFIG=str(scratch / "flow.toml"))
    env["FLOW_DB"] = url
    (scratch / "flow.toml").write_text(
        '[flow]\nruntimes = ["bench_workflows:runtime"]\nbuild_id = "bench-1"\n', encoding="utf-8"
    )
    args = [str(Path(sys.executable).parent / "flow"), "worker"]
    if port is not None:
        args += ["--metrics-port", str(port)]
    proc = subprocess.Popen(
        args, env=env, cwd=scratch, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    assert proc.stderr is not None
    proc.stderr.readline()  # the banner: the worker is up
    if port is not None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                time.sleep(0.1)
    time.sleep(0.3)
    return proc


# -- the scraper (a process of its own: its threads must not slow the W1 driver) ---------------


def scrape(port: int, rate: int) -> None:
    """Until SIGTERM: ``rate`` threads each GET /metrics once a second, in step; then print
    one JSON line {"scrapes", "errors", "kinds"}."""
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    lock = threading.Lock()
    counts = {"scrapes": 0, "errors": 0}
    kinds: dict[str, int] = {}
    t0 = time.monotonic()

    def loop() -> None:
        tick = 0
        while not stopping.is_set():
            tick += 1
            error = None
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                conn.request("GET", "/metrics")
                response = conn.getresponse()
                body = response.read()
                if response.status != 200 or not body:
                    error = f"status {response.status}"
                conn.close()
            except (OSError, http.client.HTTPException) as exc:
                error = type(exc).__name__
            with lock:
                counts["scrapes"] += 1
                if error is not None:
                    counts["errors"] += 1
                    kinds[error] = kinds.get(error, 0) + 1
            pause = t0 + tick - time.monotonic()
            if pause > 0:
                stopping.wait(pause)

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(rate)]
    for thread in threads:
        thread.start()
    stopping.wait()
    for thread in threads:
        thread.join(15)
    cpu = time.process_time()
    print(json.dumps({**counts, "kinds": kinds, "cpu": cpu}), flush=True)


# -- one W1 --------------------------------------------------------------------------------------


def w1(backend: str, runs: int, flood: bool, rate: int) -> dict[str, float]:
    import bench_workflows

    from flow_cli.engine.engine import Engine
    from flow_cli.store import open_store

    with fresh_database(backend, DEFAULT_PG) as (url, scratch):
        port = _free_port()
        # The engine first: were it to fail, no worker would be left running.
        engine = Engine(open_store(url), [bench_workflows.runtime])
        worker = _worker(url, scratch, port)
        scraper = None
        result: dict[str, float] = {}
        try:
            if flood:
                scraper = subprocess.Popen(
                    [sys.executable, __file__, "--scrape", str(port), "--rate", str(rate)],
                    stdout=subprocess.PIPE,
                    text=True,
                )
                time.sleep(1.5)  # the flood is on before W1 starts
            t0 = time.perf_counter()
            for i in range(runs):
                engine.start("chain", {"steps": 10, "x": i}, run_id=f"w1-{i}")
            pending = [f"w1-{i}" for i in range(runs)]
            deadline = t0 + 900
            while pending and time.perf_counter() < deadline:
                pending = [r for r in pending if engine.get_run(r).status.value not in TERMINAL]
                time.sleep(0.05)
            wall = time.perf_counter() - t0
            result = {"steps_per_s": 10 * runs / wall, "complete": float(not pending)}
            result["worker_cpu"] = _cpu_seconds(worker.pid)
        finally:
            if scraper is not None:
                scraper.send_signal(signal.SIGTERM)
                out, _ = scraper.communicate(60)
                lines = [line for line in out.splitlines() if line.startswith("{")]
                counts = json.loads(lines[-1]) if lines else {"scrapes": 0, "errors": -1}
                result["scrapes"] = counts["scrapes"]
                result["scrape_errors"] = counts["errors"]
                result["scraper_cpu"] = counts.get("cpu", 0.0)
                if counts.get("kinds"):
                    print(f"    scrape errors by kind: {counts['kinds']}", flush=True)
            stop([worker])
            engine.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--backend", default="sqlite", choices=["sqlite", "postgres"])
    parser.add_argument("--rate", type=int, default=100, help="concurrent scrapes a second")
    parser.add_argument("--runs", type=int, default=1000, help="W1's runs (10 steps each)")
    parser.add_argument("--scrape", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.scrape:
        scrape(args.scrape, args.rate)
        return
    quiet: list[float] = []
    flooded: list[float] = []
    scrapes = errors = 0
    print(f"W1 ({args.runs} runs x 10 steps) on {args.backend}; flood: {args.rate} scrapes/s")
    for pair in range(args.pairs):
        order = (False, True) if pair % 2 == 0 else (True, False)
        for flood in order:
            figures = w1(args.backend, args.runs, flood, args.rate)
            label = "flooded" if flood else "quiet  "
            extra = ""
            if flood:
                flooded.append(figures["steps_per_s"])
                scrapes += int(figures["scrapes"])
                errors += int(figures["scrape_errors"])
                n, bad = int(figures["scrapes"]), int(figures["scrape_errors"])
                extra = f"  scrapes {n}, errors {bad}"
            else:
                quiet.append(figures["steps_per_s"])
            extra += f"  worker CPU {figures['worker_cpu']:.1f} s"
            if flood:
                extra += f", scraper CPU {figures['scraper_cpu']:.1f} s"
            done = "" if figures["complete"] else "  INCOMPLETE"
            print(f"pair {pair + 1} {label} {figures['steps_per_s']:8.1f} steps/s{extra}{done}")
            sys.stdout.flush()
    ratio = statistics.median(flooded) / statistics.median(quiet)
    print(
        f"median steps/s: quiet {statistics.median(quiet):.1f}, flooded "
        f"{statistics.median(flooded):.1f}; flooded / quiet = {ratio:.3f}"
    )
    print(f"scrapes: {scrapes}, scrape errors: {errors}")


if __name__ == "__main__":
    main()
