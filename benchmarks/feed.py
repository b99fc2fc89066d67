"""Bring your own loop: Keras ``model.fit`` fed by chunkfit, against the materialised reference and
chunkfit's own loop.

    python benchmarks/feed.py [--quick] [--samples N] [--repeats R] [--strategies NAME ...]

On the original question's problem (synth store, window 104, batch 128, baseline-cnn compiled with
chunkfit's metrics, validation 0.1), windows per second of training and peak RSS of:

- reference: ``model.fit`` on the training split's windows materialised as one float32
  [N, window, 1] array (shuffled by Keras);
- blocks: ``for x, y, w in chunkfit.blocks(...): model.fit(x, y, sample_weight=w)``, one fit per
  block of 200,000 windows;
- dataset: ``model.fit`` on ``chunkfit.dataset(kind="tf")`` (windows gathered in the input graph);
- dataset-spe: the same with ``compile(steps_per_execution=16)``, Keras's own knob for small
  models; dataset-xla: also with ``jit_compile=True`` (Keras leaves XLA off on CPU-only machines);
- chunkfit: chunkfit's own loop, ``chunkfit.fit`` (its defaults: ``--jit auto``, threads measured).

Every strategy trains two epochs in a process of its own and is timed on its second (tracing and
chunkfit's trials are in the first), in rounds so that machine noise hits all alike. The table
shows medians and ratios to chunkfit's own loop. ``--quick`` runs a 262,144-sample store once.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

OUT = Path("bench-out")
WINDOW, BATCH, CHUNK, EPOCHS = 104, 128, 200_000, 2
MILLION = 1_049_344
STRATEGIES = ("reference", "blocks", "dataset", "dataset-spe", "dataset-xla", "chunkfit")
LABELS = {
    "reference": "model.fit on the materialised float32 windows",
    "blocks": "model.fit per block of chunkfit.blocks",
    "dataset": "model.fit on chunkfit.dataset (tf.data)",
    "dataset-spe": "the same, compile(steps_per_execution=16)",
    "dataset-xla": "the same, compile(steps_per_execution=16, jit_compile=True)",
    "chunkfit": "chunkfit's own loop (chunkfit.fit)",
}


def synth_store(samples: int) -> Path:
    from chunkfit.synth import DEFAULT_ANOMALIES, SynthSpec, synth

    anomalies = round(DEFAULT_ANOMALIES * samples / MILLION)
    path = OUT / f"feed-synth-{samples}-{anomalies}.zarr"
    if not path.exists():
        OUT.mkdir(exist_ok=True)
        synth(path, SynthSpec(samples=samples, anomalies=anomalies, seed=0))
    return path


# -- workers: each runs in its own process and prints one JSON line --------------------------------


def compiled_model(steps_per_execution: int = 1, jit_compile: bool | str = "auto") -> Any:
    import keras

    from chunkfit.train.metrics import compiled_metrics
    from chunkfit.train.models import build_model

    keras.utils.set_random_seed(0)
    model = build_model("baseline-cnn", WINDOW, 1, 2)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss="categorical_crossentropy",
        metrics=compiled_metrics(2),
        steps_per_execution=steps_per_execution,
        jit_compile=jit_compile,
    )
    return model


def epoch_clock() -> Any:
    """A callback keeping each epoch's seconds."""
    import keras

    class Clock(keras.callbacks.Callback):
        seconds: list[float] = []

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.t0 = time.perf_counter()

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            self.seconds.append(time.perf_counter() - self.t0)

    return Clock()


def training_windows(store: str) -> int:
    import chunkfit

    return chunkfit.blocks(store, window=WINDOW, chunk=CHUNK, prefetch=False).epoch_windows()


def work_reference(store: str) -> dict[str, Any]:
    import numpy as np

    import chunkfit

    xs, ys = [], []
    for x, y, _ in chunkfit.blocks(store, window=WINDOW, chunk=CHUNK, normalize="none"):
        xs.append(x)
        ys.append(y)
    x, y = np.concatenate(xs), np.concatenate(ys)
    del xs, ys
    model, clock = compiled_model(), epoch_clock()
    model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=True, verbose=0, callbacks=[clock])
    return {"windows": len(x), "seconds": clock.seconds[-1]}


def work_blocks(store: str) -> dict[str, Any]:
    import chunkfit

    model = compiled_model()
    windows = seconds = 0.0
    for epoch in range(EPOCHS):
        t0, n = time.perf_counter(), 0
        for x, y, w in chunkfit.blocks(store, window=WINDOW, chunk=CHUNK, epoch=epoch):
            model.fit(x, y, sample_weight=w, batch_size=BATCH, epochs=1, verbose=0)
            n += len(x)
        windows, seconds = n, time.perf_counter() - t0
    return {"windows": windows, "seconds": seconds}


def work_dataset(
    store: str, steps_per_execution: int = 1, jit_compile: bool | str = "auto"
) -> dict[str, Any]:
    import chunkfit

    ds = chunkfit.dataset(store, window=WINDOW, chunk=CHUNK, batch_size=BATCH)
    model, clock = compiled_model(steps_per_execution, jit_compile), epoch_clock()
    model.fit(ds, epochs=EPOCHS, shuffle=False, verbose=0, callbacks=[clock])
    return {"windows": training_windows(store), "seconds": clock.seconds[-1]}


def work_chunkfit(store: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["CHUNKFIT_CACHE_DIR"] = str(Path(tmp) / "cache")
        import chunkfit

        chunkfit.fit(
            "baseline-cnn",
            store,
            window=WINDOW,
            batch_size=BATCH,
            chunk=CHUNK,
            epochs=EPOCHS,
            out=Path(tmp) / "run",
        )
        run = json.loads((Path(tmp) / "run" / "run.json").read_text())
    last = run["epochs"][-1]
    return {"windows": last["train_windows"], "seconds": last["train_seconds"]}


WORKERS = {
    "reference": work_reference,
    "blocks": work_blocks,
    "dataset": work_dataset,
    "dataset-spe": lambda store: work_dataset(store, 16),
    "dataset-xla": lambda store: work_dataset(store, 16, True),
    "chunkfit": work_chunkfit,
}


def worker(name: str, store: str) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    result = WORKERS[name](store)
    result["peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps(result))


def run(name: str, store: Path) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--worker", name, str(store)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"worker {name} failed:\n{proc.stderr}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["windows_per_s"] = out["windows"] / out["seconds"]
    return out


# -- the table -------------------------------------------------------------------------------------


def table(samples: int, repeats: int, strategies: tuple[str, ...]) -> list[str]:
    store = synth_store(samples)
    results: dict[str, list[dict[str, Any]]] = {s: [] for s in strategies}
    for r in range(repeats):
        for s in strategies:
            got = run(s, store)
            results[s].append(got)
            print(
                f"round {r + 1}/{repeats} {s}: {got['windows_per_s']:,.0f} windows/s, "
                f"{got['peak_rss'] / 2**20:,.0f} MB",
                flush=True,
            )
    speed = {s: statistics.median(g["windows_per_s"] for g in results[s]) for s in strategies}
    own = speed.get("chunkfit")
    lines = [
        f"{samples:,}-sample synth store, window {WINDOW}, batch {BATCH}, chunk {CHUNK:,}, "
        f"baseline-cnn, second of {EPOCHS} epochs, {repeats} round(s)",
        "",
        "| strategy | windows/s (median) | vs chunkfit's loop | per round | peak RSS MB |",
        "|---|---|---|---|---|",
    ]
    for s in strategies:
        rounds = " / ".join(f"{g['windows_per_s']:,.0f}" for g in results[s])
        peak = max(g["peak_rss"] for g in results[s]) / 2**20
        ratio = f"{speed[s] / own:.2f}x" if own else "-"
        lines.append(f"| {LABELS[s]} | {speed[s]:,.0f} | {ratio} | {rounds} | {peak:,.0f} |")
    return lines


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or "CPU unknown"


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="262,144 samples, one round")
    parser.add_argument("--samples", type=int, default=MILLION)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--strategies", nargs="+", choices=STRATEGIES, default=list(STRATEGIES))
    args = parser.parse_args()
    samples, repeats = (262_144, 1) if args.quick else (args.samples, args.repeats)
    lines = table(samples, repeats, tuple(args.strategies))
    print(f"\n{cpu_name()}, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
