"""Object storage against local disk: training windows/s and ingest MB/s, side by side in one run.

    python benchmarks/storage.py [--rows 1000000] [--samples 400000] [--chunk 65536] [--delay-ms 20]
                                 [--repeat 1] [--no-train] [--split-cores]

Starts moto's S3 server on loopback and a small proxy in front of it that holds each request for
``--delay-ms`` before passing it on (a far endpoint's round trip). Then, for each place (local disk,
the S3 server, the S3 server through the delaying proxy): ``chunkfit ingest`` of one CSV (MB of CSV
per second) and ``chunkfit train`` for two epochs on the same synthetic store (windows/s of each
epoch, from the run's run.json: the first includes the run's start, opening the store and the wait
for its first group, which the second epoch's prefetch hides), each in its own subprocess, ``--repeat`` times, the fastest of each kept, as the
machine is noisy. Prints the ratios to local disk.

moto is a Python server on the same cores: its own CPU per request is part of what is measured,
so a real S3 endpoint (or MinIO elsewhere) is not slower than this. The table gives the server's CPU
seconds during each ingest, the ingest's wall time and its own CPU seconds beside them (on a machine
whose cores the local ingest keeps busy, every CPU second either adds shows in the wall time), and
the round trips (requests and ``100 Continue`` waits) of the delayed ingest. After each ingest, an
``ingest --append`` of a 100,000-row CSV (a new log file) to that store: its wall seconds and, with
the delay, its round trips (an append's time is mostly its requests one after another).

``--split-cores`` stands in for an endpoint on another machine: every chunkfit command (local disk
and S3 alike) runs on the first half of the cores this process may use, and the S3 server and the
delaying proxy on the other half, so the server's CPU is no longer taken from the client's. Both
sides of each ratio then have the same cores; the ratio says what object storage costs chunkfit
itself (its client CPU and the waiting), not what the server costs a machine it shares.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import math
import os
import resource
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
OUT = Path("bench-out") / "storage"


def start_proxy(target_port: int, delay: float, trips: list[int]) -> int:
    """A TCP proxy on a free loopback port: the first bytes of each request wait ``delay`` seconds
    (a request body sent after the server's ``100 Continue`` waits again: a round trip, as it is on a
    far endpoint). Each wait adds one to ``trips[0]``.

    The bytes move from socket to socket inside the kernel (``splice`` through a pipe), never through
    Python: a proxy that copied them (asyncio streams) spent 0.25 s of CPU per 190 MB ingested, CPU
    that on shared cores was taken from chunkfit, which a far endpoint does not take."""
    listener = socket.create_server(("127.0.0.1", 0))

    def pump(src: socket.socket, dst: socket.socket, state: dict[str, bool], upstream: bool) -> None:
        pipe_r, pipe_w = os.pipe()
        try:
            fcntl.fcntl(pipe_w, fcntl.F_SETPIPE_SZ, 1 << 20)
            while n := os.splice(src.fileno(), pipe_w, 1 << 20):
                if upstream and state["idle"]:
                    state["idle"] = False
                    trips[0] += 1
                    time.sleep(delay)  # a new request: one round trip's delay
                if not upstream:
                    state["idle"] = True  # the response came: the next bytes up start a request
                while n:
                    n -= os.splice(pipe_r, dst.fileno(), n)
        except OSError:
            pass
        finally:
            os.close(pipe_r)
            os.close(pipe_w)
            try:
                dst.shutdown(socket.SHUT_WR)  # the other side sees the end of this direction
            except OSError:
                pass

    def handle(client: socket.socket) -> None:
        try:
            server = socket.create_connection(("127.0.0.1", target_port))
        except OSError:
            client.close()
            return
        state = {"idle": True}
        down = threading.Thread(target=pump, args=(server, client, state, False), daemon=True)
        down.start()
        pump(client, server, state, True)
        down.join()
        client.close()
        server.close()

    def accept() -> None:
        while True:
            client, _ = listener.accept()
            threading.Thread(target=handle, args=(client,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return int(listener.getsockname()[1])


def split_cores() -> tuple[set[int], set[int]]:
    """The cores for chunkfit's commands and those for the S3 server and proxy (``--split-cores``)."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        raise SystemExit("--split-cores needs at least 2 cores")
    half = len(cores) // 2
    return set(cores[:half]), set(cores[half:])


def chunkfit(args: list[str], env: dict[str, str], cores: set[int] | None = None) -> tuple[float, str, float]:
    """Run one chunkfit command (on ``cores``, if given); its wall seconds, its output and its own CPU seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    pin = None if cores is None else (lambda: os.sched_setaffinity(0, cores))
    result = subprocess.run([sys.executable, "-m", "chunkfit", *args], env=env, capture_output=True, text=True,
                            check=False, preexec_fn=pin)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(f"chunkfit {' '.join(args)} failed:\n{result.stderr}")
    return seconds, result.stdout, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000, help="CSV rows (4 channels) to ingest")
    ap.add_argument("--samples", type=int, default=400_000, help="samples of the training store")
    ap.add_argument("--chunk", type=int, default=65_536, help="train --chunk (samples per block)")
    ap.add_argument("--delay-ms", type=float, default=20.0)
    ap.add_argument("--repeat", type=int, default=1, help="ingest and train this many times per place (the best of each is kept)")
    ap.add_argument("--no-train", action="store_true", help="measure ingest only")
    ap.add_argument("--split-cores", action="store_true",
                    help="chunkfit on half the cores, the S3 server and proxy on the other half")
    opts = ap.parse_args()
    client_cores, server_cores = split_cores() if opts.split_cores else (None, None)

    import numpy as np
    from s3support import make_bucket, start_server

    from chunkfit.synth import SynthSpec, balanced_anomalies, synth

    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    csv = OUT / "ingest.csv"
    rng = np.random.default_rng(0)
    with open(csv, "w") as f:
        f.write("a,b,c,d\n")
        np.savetxt(f, np.round(rng.normal(size=(opts.rows, 4)), 5), fmt="%.5f", delimiter=",")
    mb = csv.stat().st_size / 1e6
    more = OUT / "append.csv"  # a new log file's worth, appended to an ingested store
    with open(csv) as src, open(more, "w") as dst:
        dst.writelines(line for _, line in zip(range(100_001), src))

    import psutil

    server = start_server()
    moto = psutil.Process(server.process.pid)
    if server_cores is not None:  # the server, and this process (the proxy's thread), off chunkfit's cores
        for thread in moto.threads():
            os.sched_setaffinity(thread.id, server_cores)
        os.sched_setaffinity(0, server_cores)

    def server_cpu() -> float:
        t = moto.cpu_times()
        return t.user + t.system

    trips = [0]
    proxy = start_proxy(server.port, opts.delay_ms / 1000, trips)
    base = {**os.environ, **server.env(), "PYTHONPATH": str(REPO)}
    os.environ.update(server.env())
    bucket = make_bucket()
    places = {
        "local disk": (str(OUT), base),
        "S3 (moto, loopback)": (f"s3://{bucket}/direct", base),
        f"S3 + {opts.delay_ms:g} ms per request": (f"s3://{bucket}/delayed",
                                                    {**base, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{proxy}"}),
    }
    spec = SynthSpec(samples=opts.samples, anomalies=balanced_anomalies(opts.samples, 16), seed=1)
    rows = []
    try:
        for name, (root, env) in places.items():
            seconds, moto_cpu, round_trips, own_cpu = float("inf"), 0.0, 0, 0.0
            appended, append_trips = float("inf"), 0
            for attempt in range(opts.repeat):
                target = f"{root}/ingest-{attempt}.zarr"
                cpu0, trips0 = server_cpu(), trips[0]
                took, _, cpu = chunkfit(["ingest", target, str(csv), "--rate", "100"], env, client_cores)
                if took < seconds:
                    seconds, moto_cpu, round_trips, own_cpu = took, server_cpu() - cpu0, trips[0] - trips0, cpu
                trips0 = trips[0]
                took, _, _ = chunkfit(["ingest", target, str(more), "--append"], env, client_cores)
                if took < appended:
                    appended, append_trips = took, trips[0] - trips0
            wps = first = float("nan")
            if not opts.no_train:
                store = f"{root}/train.zarr"
                os.environ["AWS_ENDPOINT_URL"] = env["AWS_ENDPOINT_URL"]
                synth(store, spec)
                for attempt in range(opts.repeat):
                    run_dir = OUT / f"run-{len(rows)}-{attempt}"
                    chunkfit(["train", store, "--window", "16", "--epochs", "2", "--chunk", str(opts.chunk),
                              "--batch-size", "512", "--out", str(run_dir)], env, client_cores)
                    # The run's own figures (its output also names the windows/s of the thread measurement).
                    epochs = json.loads((run_dir / "run.json").read_text())["epochs"]
                    got = [float(e["windows_per_s"]) for e in epochs]
                    first = got[0] if math.isnan(first) else max(first, got[0])
                    wps = got[1] if math.isnan(wps) else max(wps, got[1])
            delayed = env is not base
            rows.append((name, mb / seconds, wps, seconds, own_cpu, moto_cpu, round_trips if delayed else None, first,
                         appended, append_trips if delayed else None))
            print(f"{name}: ingest {mb / seconds:.1f} MB/s ({seconds:.2f} s, its CPU {own_cpu:.1f} s, "
                  f"server CPU {moto_cpu:.1f} s), append {appended:.2f} s, "
                  f"train {first:,.0f} windows/s (1st epoch), {wps:,.0f} (2nd)", flush=True)
    finally:
        server.stop()
    local = rows[0]
    if client_cores is not None:
        print(f"\nchunkfit on cores {sorted(client_cores)}, the S3 server and proxy on {sorted(server_cores or ())}")
    print("\n| where | ingest MB/s | vs local | ingest wall s | ingest CPU s | S3 server CPU s | round trips | "
          "append s | round trips | training windows/s, 2nd epoch | vs local | 1st epoch | vs local |\n"
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, ingest, train, seconds, own_cpu, moto_cpu, n_trips, first, appended, append_trips in rows:
        print(f"| {name} | {ingest:.1f} | {ingest / local[1]:.2f}x | {seconds:.2f} | {own_cpu:.1f} | {moto_cpu:.1f} | "
              f"{'' if n_trips is None else n_trips} | {appended:.2f} | {'' if append_trips is None else append_trips} | "
              f"{train:,.0f} | {train / local[2]:.2f}x | {first:,.0f} | {first / local[7]:.2f}x |")

if __name__ == "__main__":
    main()
