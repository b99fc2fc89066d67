"""Live scoring latency and memory of ``chunkfit predict --follow`` beside ``chunkfit ingest``.

    python benchmarks/live.py [--rates 100 10000] [--seconds 60 150] [--run RUN]

A CSV stream piped into ``chunkfit ingest`` and scored beside it by ``chunkfit predict --follow``,
at 100 Hz and at 10 kHz.

Trains a small run on a synthetic store (``chunkfit synth`` + ``chunkfit train``, window 16, unless
``--run`` names one), then for each rate starts three processes: a writer that emits ``t,x`` rows
at the fixed rate (one flush every 10 ms) into a pipe, ``chunkfit ingest live.zarr`` on that pipe
(default ``--commit-every`` of 1 s) and ``chunkfit predict RUN live.zarr --follow``. The writer
injects a bump (+2) every ``--every`` seconds at a known sample and logs the wall-clock time of
every flush. This process polls the detections CSV every 10 ms and timestamps each new row.

Latency of a detection = when its row appeared in the CSV - when the writer wrote the sample that
closes it (sample ``end``: the last sample of the first negative window after the detection, the
earliest moment any scorer could know the detection ended). Only detections that cover an injected
bump are counted. "bump -> row" is measured from the bump's own row instead (it adds the window).
RSS of the follow process is read from /proc at the start of the timed stream and at its end.
Prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np

OUT = Path("bench-out/live")
WINDOW = 16
BUMP = 2.0

# argv: rate, warm-up seconds, timed seconds, bump interval seconds, gate file, log file.
# Warm-up rows create the store; the timed rows wait for the gate (the follower is ready).
WRITER = textwrap.dedent(
    """
    import os, sys, time
    import numpy as np
    rate, warm, timed, every = (float(v) for v in sys.argv[1:5])
    gate, log = sys.argv[5], sys.argv[6]
    n_warm, n = int(warm * rate), int((warm + timed) * rate)
    rng = np.random.default_rng(0)
    x = np.sin(np.arange(n)) + rng.normal(0.0, 0.2, n)
    bumps = np.arange(n_warm + int(every * rate), n - int(rate), int(every * rate))
    x[bumps] += %(bump)r
    np.save(log + ".bumps.npy", bumps)
    per_tick = max(1, int(rate / 100))
    out = sys.stdout
    out.write("t,x\\n")
    flushes = []
    i, t0 = 0, None
    while i < n:
        if i == n_warm:
            while not os.path.exists(gate):
                time.sleep(0.01)
            t0, base = time.monotonic(), i
        j = min(n, i + per_tick)
        out.write("".join(f"{k / rate!r},{float(x[k])!r}\\n" for k in range(i, j)))
        out.flush()
        flushes.append((j, time.time()))
        i = j
        if t0 is not None:
            lag = t0 + (i - base) / rate - time.monotonic()
            if lag > 0:
                time.sleep(lag)
        else:
            time.sleep(per_tick / rate)
    np.save(log, np.asarray(flushes, dtype=np.float64))
    """
) % {"bump": BUMP}


def chunkfit(*args: str) -> list[str]:
    return [sys.executable, "-m", "chunkfit", *args]


def train(folder: Path) -> Path:
    store, run = folder / "synth.zarr", folder / "run"
    if (run / "model.keras").exists():
        return run
    shutil.rmtree(store, ignore_errors=True)
    subprocess.run(
        chunkfit("synth", str(store), "--samples", "20000", "--anomalies", "1200", "--seed", "1"),
        check=True,
        stdout=subprocess.DEVNULL,
    )
    subprocess.run(
        chunkfit(
            "train",
            str(store),
            "--model",
            "baseline-cnn",
            "--window",
            str(WINDOW),
            "--epochs",
            "2",
            "--chunk",
            "4096",
            "--batch-size",
            "64",
            "--out",
            str(run),
        ),
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return run


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def one_rate(run: Path, rate: float, seconds: float, every: float) -> dict[str, float]:
    folder = OUT / f"{rate:g}hz"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    gate, log, csv = folder / "go", folder / "flushes", folder / "detections.csv"
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            WRITER,
            str(rate),
            "2",
            str(seconds),
            str(every),
            str(gate),
            str(log),
        ],
        stdout=subprocess.PIPE,
    )
    assert writer.stdout is not None
    ingest = subprocess.Popen(
        chunkfit("ingest", str(folder / "live.zarr"), "-", "--time-column", "t"),
        stdin=writer.stdout,
        stdout=subprocess.DEVNULL,
    )
    writer.stdout.close()
    follow = subprocess.Popen(
        chunkfit(
            "predict",
            str(run),
            str(folder / "live.zarr"),
            "--follow",
            "--idle",
            "5",
            "--out",
            str(folder / "scores.zarr"),
            "--events-out",
            str(csv),
        ),
        stdout=subprocess.DEVNULL,
    )
    # The follower is ready once its scores temporary exists: the model is loaded and scoring.
    while not list(folder.glob(".scores.zarr.chunkfit-tmp-*")):
        time.sleep(0.05)
    time.sleep(1.0)
    gate.touch()
    time.sleep(2.0)  # the first timed rows are scored: the follower's steady state
    rss_start = rss_end = rss_mb(follow.pid)
    seen: list[float] = []  # when each detection row appeared
    while True:
        done = writer.poll() is not None and ingest.poll() is not None and follow.poll() is not None
        if writer.poll() is None:
            rss_end = rss_mb(follow.pid)
        lines = csv.read_bytes().count(b"\n") - 1 if csv.exists() else 0
        now = time.time()
        seen += [now] * max(0, lines - len(seen))
        if done:
            break
        time.sleep(0.01)
    assert follow.returncode == 0 and ingest.returncode == 0, "follow or ingest failed"
    flushes = np.load(str(log) + ".npy")
    bumps = np.load(str(log) + ".bumps.npy")
    rows = np.loadtxt(csv, delimiter=",", skiprows=1, ndmin=2, usecols=(5, 6))  # the samples
    close, from_bump = [], []
    for k, row in enumerate(rows):
        start, end = int(row[0]), int(row[1])
        hit = bumps[(bumps >= start) & (bumps < end)]
        if hit.size == 0 or end >= flushes[-1, 0]:
            continue
        written_end = flushes[np.searchsorted(flushes[:, 0], end, side="right"), 1]
        written_bump = flushes[np.searchsorted(flushes[:, 0], hit[0], side="right"), 1]
        close.append(seen[k] - written_end)
        from_bump.append(seen[k] - written_bump)
    matched = {int(b) for b in bumps for r in rows if r[0] <= b < r[1]}
    return {
        "rate": rate,
        "seconds": seconds,
        "bumps": len(bumps),
        "found": len(matched),
        "rows": len(rows),
        "median": statistics.median(close),
        "p95": float(np.percentile(close, 95)),
        "bump_median": statistics.median(from_bump),
        "rss_start": rss_start,
        "rss_end": rss_end,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", type=float, nargs="+", default=[100.0, 10_000.0])
    parser.add_argument("--seconds", type=float, nargs="+", default=[60.0, 150.0])
    parser.add_argument("--every", type=float, default=2.0, help="seconds between injected bumps")
    parser.add_argument("--run", type=Path, default=None)
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    run = args.run or train(OUT)
    results = [
        one_rate(run, r, s, args.every) for r, s in zip(args.rates, args.seconds, strict=True)
    ]
    print(
        "| stream | timed stream | bumps found / injected | detection rows | latency median | "
        "latency p95 | bump -> row median | follow RSS start | follow RSS end |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['rate']:,.0f} Hz | {r['seconds']:.0f} s | {r['found']} / {r['bumps']} | "
            f"{r['rows']} | {r['median']:.2f} s | {r['p95']:.2f} s | {r['bump_median']:.2f} s | "
            f"{r['rss_start']:.0f} MB | {r['rss_end']:.0f} MB |"
        )


if __name__ == "__main__":
    main()
