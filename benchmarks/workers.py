"""Several workers: an all-reduce's cost per step, and what that projects to on separate machines.

    python benchmarks/workers.py [--models baseline-cnn dilated-resnet] [--batch 128]

For each model: the gradient bytes all-reduced per training step (its trainable float32 variables,
summed across workers once per global batch); the time of that all-reduce per step between two
worker processes on 127.0.0.1 (MultiWorkerMirroredStrategy, the gradients' shapes, the median of
50 calls); per-worker windows/s of ``chunkfit train`` with one worker and with two (both workers on
this machine's cores, so two do not run faster here); and a projection for W workers on separate
machines: step time = compute time of a per-worker batch (measured with one worker) + ring
all-reduce time 2 (W - 1) / W x bytes / bandwidth + 2 (W - 1) x latency, no overlap of the two,
per-worker batch fixed (the global batch grows with W).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BANDWIDTH = 10e9 / 8  # bytes/s: 10 Gbit/s
LATENCY = 50e-6  # s per message
WORKERS = (2, 8, 32)

ALLREDUCE = r"""
import json, os, sys, time
import numpy as np
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
strategy = tf.distribute.MultiWorkerMirroredStrategy()
shapes = json.loads(sys.argv[1])
grads = [tf.ones(s) for s in shapes]

@tf.function
def step():
    def replica():
        return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, grads)
    return strategy.run(replica)

for _ in range(5):
    step()
times = []
for _ in range(50):
    t0 = time.perf_counter()
    out = step()
    _ = out[0].numpy()
    times.append(time.perf_counter() - t0)
print(json.dumps({"median_s": float(np.median(times))}))
"""


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def tf_config(ports: list[int], index: int) -> str:
    return json.dumps(
        {
            "cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
            "task": {"type": "worker", "index": index},
        }
    )


def env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), **extra}


def gradient_shapes(model: str, window: int) -> list[list[int]]:
    code = (
        "from chunkfit.train.models import build_model; "
        f"m = build_model({model!r}, {window}, 1, 2); "
        "import json; print(json.dumps([list(v.shape) for v in m.trainable_variables]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env(TF_CPP_MIN_LOG_LEVEL="3"),
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def allreduce_seconds(shapes: list[list[int]]) -> float:
    ports = free_ports(2)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", ALLREDUCE, json.dumps(shapes)],
            env=env(TF_CONFIG=tf_config(ports, i)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        if p.returncode != 0:
            raise RuntimeError(err[-2000:])
    return float(json.loads(outs[0][0].strip().splitlines()[-1])["median_s"])


def train_windows_per_s(
    store: Path, model: str, workers: int, batch: int, stride: int, tmp: Path
) -> float:
    """Training windows/s of the whole run (all workers) in its only epoch, from run.json."""
    ports = free_ports(workers)
    out = tmp / f"{model}-{workers}"
    args = [
        sys.executable,
        "-m",
        "chunkfit",
        "train",
        str(store),
        "--epochs",
        "1",
        "--stride",
        str(stride),
        "--batch-size",
        str(batch),
        "--model",
        model,
        "--jit",
        "off",
        "--validation",
        "0",
        "--out",
        str(out),
        "--restart",
    ]
    if workers == 1:
        args += ["--devices", "cpu:1"]  # the same distributed step, on one replica
        procs = [
            subprocess.Popen(
                args, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        ]
    else:
        procs = [
            subprocess.Popen(
                args,
                env=env(TF_CONFIG=tf_config(ports, i)),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(workers)
        ]
    for p in procs:
        _, err = p.communicate(timeout=1200)
        if p.returncode != 0:
            raise RuntimeError(err[-2000:])
    record = json.loads((out / "run.json").read_text())
    return float(record["epochs"][-1]["windows_per_s"])


def ring_seconds(nbytes: int, workers: int) -> float:
    return 2 * (workers - 1) / workers * nbytes / BANDWIDTH + 2 * (workers - 1) * LATENCY


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["baseline-cnn", "dilated-resnet"])
    parser.add_argument("--batch", type=int, default=128, help="per-worker batch")
    args = parser.parse_args()
    from chunkfit.synth import SynthSpec, synth

    strides = {"baseline-cnn": 2, "dilated-resnet": 16}
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        store = tmp / "synth.zarr"
        synth(store, SynthSpec(samples=400_000))
        for model in args.models:
            shapes = gradient_shapes(model, 104)
            params = sum(int(__import__("math").prod(s)) for s in shapes)
            nbytes = 4 * params
            reduce_s = allreduce_seconds(shapes)
            stride = strides.get(model, 8)
            one = train_windows_per_s(store, model, 1, args.batch, stride, tmp)
            two = train_windows_per_s(store, model, 2, 2 * args.batch, stride, tmp) / 2
            compute_s = args.batch / one
            projected = {w: w * args.batch / (compute_s + ring_seconds(nbytes, w)) for w in WORKERS}
            rows.append((model, params, nbytes, reduce_s, one, two, compute_s, projected))
    print(
        f"CPU: {cpu_name()}, {os.cpu_count()} cores; Python {platform.python_version()}; "
        f"per-worker batch {args.batch}; network model {BANDWIDTH * 8 / 1e9:g} Gbit/s, "
        f"{LATENCY * 1e6:g} us per message, ring all-reduce"
    )
    print()
    print(
        "| model | parameters | bytes all-reduced per step | "
        "all-reduce per step, 2 workers on loopback | windows/s per worker, 1 worker | "
        "windows/s per worker, 2 workers on this machine | compute per step (1 worker) | "
        + " | ".join(f"projected windows/s, {w} machines (per worker)" for w in WORKERS)
        + " |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|" + "---:|" * len(WORKERS))
    for model, params, nbytes, reduce_s, one, two, compute_s, projected in rows:
        cells = " | ".join(f"{v:,.0f} ({v / w:,.0f})" for w, v in projected.items())
        print(
            f"| {model} | {params:,} | {nbytes / 1e6:.2f} MB | {reduce_s * 1e3:.2f} ms | "
            f"{one:,.0f} | {two:,.0f} | {compute_s * 1e3:.2f} ms | {cells} |"
        )


def cpu_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        return next(
            line.split(":", 1)[1].strip()
            for line in out.splitlines()
            if line.startswith("Model name")
        )
    except (OSError, subprocess.CalledProcessError, StopIteration):
        return platform.processor() or "unknown"


if __name__ == "__main__":
    start = time.perf_counter()
    main()
    print(f"\n({time.perf_counter() - start:.0f} s)")
