"""Object storage against local disk: training windows/s and ingest MB/s, side by side in one run.

    python benchmarks/storage.py [--rows 1000000] [--samples 400000] [--chunk 65536] [--delay-ms 20]
                                 [--repeat 1] [--no-train] [--split-cores]

Starts moto's S3 server on loopback (benchmarks/delayed_s3.py), on two ports over the same buckets:
one answers at once, the other holds each request ``--delay-ms`` before handling it (a far
endpoint's round trip). Then, for each place (local disk, the S3 server, the S3 server with the
delay): ``chunkfit ingest`` of one CSV (MB of CSV per second) and ``chunkfit train`` for two epochs
on the same synthetic store (windows/s of each epoch, from the run's run.json: the first includes
the run's start, opening the store and the wait for its first group, which the second epoch's
prefetch hides), each in its own subprocess. ``--repeat`` rounds, each running every place once in
turn (so a machine that changes speed meanwhile moves every place alike), the fastest of each kept,
as the machine is noisy. Prints the ratios to local disk.

moto is a Python server on the same cores: its own CPU per request is part of what is measured,
so a real S3 endpoint (or MinIO elsewhere) is not slower than this. The table gives the server's CPU
seconds during each ingest, the ingest's wall time and its own CPU seconds beside them (on a machine
whose cores the local ingest keeps busy, every CPU second either adds shows in the wall time), and
the round trips (requests) of the delayed ingest. After each ingest, an
``ingest --append`` of a 100,000-row CSV (a new log file) to that store: its wall seconds and, with
the delay, its round trips (an append's time is mostly its requests one after another).

``--split-cores`` stands in for an endpoint on another machine: every chunkfit command (local disk
and S3 alike) runs on the first half of the cores this process may use, and the S3 server on the
other half, so the server's CPU is no longer taken from the client's. Both sides of each ratio then
have the same cores; the ratio says what object storage costs chunkfit itself (its client CPU and
the waiting), not what the server costs a machine it shares.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
OUT = Path("bench-out") / "storage"


def split_cores() -> tuple[set[int], set[int]]:
    """The cores for chunkfit's commands and those for the S3 server (``--split-cores``)."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        raise SystemExit("--split-cores needs at least 2 cores")
    half = len(cores) // 2
    return set(cores[:half]), set(cores[half:])


def chunkfit(
    args: list[str], env: dict[str, str], cores: set[int] | None = None
) -> tuple[float, str, float]:
    """Run one chunkfit command (on ``cores``, if given).

    Returns its wall seconds, its output and its own CPU seconds.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    pin = None if cores is None else (lambda: os.sched_setaffinity(0, cores))
    result = subprocess.run(
        [sys.executable, "-m", "chunkfit", *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        preexec_fn=pin,
    )
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(f"chunkfit {' '.join(args)} failed:\n{result.stderr}")
    return (
        seconds,
        result.stdout,
        after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime,
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000, help="CSV rows (4 channels) to ingest")
    ap.add_argument("--samples", type=int, default=400_000, help="samples of the training store")
    ap.add_argument("--chunk", type=int, default=65_536, help="train --chunk (samples per block)")
    ap.add_argument("--delay-ms", type=float, default=20.0)
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="ingest and train this many times per place (the best of each is kept)",
    )
    ap.add_argument("--no-train", action="store_true", help="measure ingest only")
    ap.add_argument(
        "--split-cores",
        action="store_true",
        help="chunkfit on half the cores, the S3 server on the other half",
    )
    opts = ap.parse_args()
    client_cores, server_cores = split_cores() if opts.split_cores else (None, None)

    import numpy as np
    import psutil
    from s3support import make_bucket, start_server
    from support import free_ports

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
        dst.writelines(line for _, line in zip(range(100_001), src, strict=False))

    port, delayed_port = free_ports(2)
    server = start_server(
        port,
        command=[
            str(Path(__file__).with_name("delayed_s3.py")),
            str(port),
            str(delayed_port),
            "--delay-ms",
            str(opts.delay_ms),
        ],
        cores=server_cores,
    )
    moto = psutil.Process(server.process.pid)

    def server_cpu() -> float:
        t = moto.cpu_times()
        return t.user + t.system

    def round_trips() -> int:
        import urllib.request

        with urllib.request.urlopen(
            f"http://127.0.0.1:{delayed_port}/_round_trips", timeout=10
        ) as reply:
            return int(reply.read())

    def remove(target: str) -> None:
        if target.startswith("s3://"):
            from chunkfit.store.remote import Remote

            Remote(target).clear()
        else:
            shutil.rmtree(target)

    base = {**os.environ, **server.env(), "PYTHONPATH": str(REPO)}
    os.environ.update(server.env())
    bucket = make_bucket()
    delayed = {**base, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{delayed_port}"}
    places = {
        "local disk": (str(OUT), base),
        "S3 (moto, loopback)": (f"s3://{bucket}/direct", base),
        f"S3 + {opts.delay_ms:g} ms per request": (f"s3://{bucket}/delayed", delayed),
    }
    inf, nan = float("inf"), float("nan")
    best: dict[str, dict[str, float]] = {
        name: {
            "seconds": inf,
            "moto": 0.0,
            "trips": 0,
            "cpu": 0.0,
            "append": inf,
            "append_trips": 0,
            "wps": nan,
            "first": nan,
        }
        for name in places
    }
    spec = SynthSpec(samples=opts.samples, anomalies=balanced_anomalies(opts.samples, 16), seed=1)
    try:
        # Every round runs each place once, one after another, so a machine that slows down or
        # speeds up meanwhile moves every place's figures alike.
        for attempt in range(opts.repeat):
            for name, (root, env) in places.items():
                got = best[name]
                target = f"{root}/ingest-{attempt}.zarr"
                cpu0, trips0 = server_cpu(), round_trips()
                took, _, cpu = chunkfit(
                    ["ingest", target, str(csv), "--rate", "100"], env, client_cores
                )
                if took < got["seconds"]:
                    got.update(
                        seconds=took,
                        moto=server_cpu() - cpu0,
                        trips=round_trips() - trips0,
                        cpu=cpu,
                    )
                trips0 = round_trips()
                appended, _, _ = chunkfit(
                    ["ingest", target, str(more), "--append"], env, client_cores
                )
                if appended < got["append"]:
                    got.update(append=appended, append_trips=round_trips() - trips0)
                print(
                    f"{name}: ingest {mb / took:.1f} MB/s ({took:.2f} s), append {appended:.2f} s",
                    flush=True,
                )
                # The server holds what it stores in memory: each round finds it as the first did.
                remove(target)
        if not opts.no_train:
            for root, env in places.values():
                os.environ["AWS_ENDPOINT_URL"] = env["AWS_ENDPOINT_URL"]
                synth(f"{root}/train.zarr", spec)
            for attempt in range(opts.repeat):
                for n, (name, (root, env)) in enumerate(places.items()):
                    got = best[name]
                    run_dir = OUT / f"run-{n}-{attempt}"
                    chunkfit(
                        [
                            "train",
                            f"{root}/train.zarr",
                            "--window",
                            "16",
                            "--epochs",
                            "2",
                            "--chunk",
                            str(opts.chunk),
                            "--batch-size",
                            "512",
                            "--out",
                            str(run_dir),
                        ],
                        env,
                        client_cores,
                    )
                    # The run's own figures (its output also names the windows/s of the thread
                    # measurement).
                    epochs = json.loads((run_dir / "run.json").read_text())["epochs"]
                    first, second = (float(e["windows_per_s"]) for e in epochs[:2])
                    got["first"] = first if math.isnan(got["first"]) else max(got["first"], first)
                    got["wps"] = second if math.isnan(got["wps"]) else max(got["wps"], second)
                    print(
                        f"{name}: train {first:,.0f} windows/s (1st epoch), {second:,.0f} (2nd)",
                        flush=True,
                    )
    finally:
        server.stop()
    local = best["local disk"]
    if client_cores is not None:
        print(
            f"\nchunkfit on cores {sorted(client_cores)}, "
            f"the S3 server on {sorted(server_cores or ())}"
        )
    print(
        "\n| where | ingest MB/s | vs local | ingest wall s | ingest CPU s | S3 server CPU s | "
        "round trips | append s | round trips | training windows/s, 2nd epoch | vs local | "
        "1st epoch | vs local |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    for name, (_, env) in places.items():
        got = best[name]
        trips = (
            (f"{got['trips']:.0f}", f"{got['append_trips']:.0f}") if env is delayed else ("", "")
        )
        train = (
            ""
            if opts.no_train
            else (
                f"{got['wps']:,.0f} | {got['wps'] / local['wps']:.2f}x | "
                f"{got['first']:,.0f} | {got['first'] / local['first']:.2f}x"
            )
        )
        print(
            f"| {name} | {mb / got['seconds']:.1f} | {local['seconds'] / got['seconds']:.2f}x | "
            f"{got['seconds']:.2f} | {got['cpu']:.1f} | {got['moto']:.1f} | {trips[0]} | "
            f"{got['append']:.2f} | {trips[1]} | {train or ' | | |'} |"
        )


if __name__ == "__main__":
    main()
