"""What a detector costs and keeps on the device: int8 agreement, size and latency per runtime.

    python benchmarks/export.py [--models baseline-cnn picker dilated-resnet inception-time]
                                [--datasets synth ecg] [--epochs 1] [--out bench-out/export]
                                [--rounds 40] [--batch 1024] [--quick] [--table]

For every model and dataset: train one run (chunkfit.fit, seed 0), export it with chunkfit's
exporter as LiteRT float32, LiteRT int8 (calibrated on the run's training split) and ONNX, then

- agreement of int8 with float: ``chunkfit predict`` with the float and the int8 LiteRT models
  over the whole store, the float detections matched one to one to the int8 ones (a float peak
  within the dataset's tolerance of an int8 detection's span: event F1 of int8 against float;
  target >= 0.99), and ``chunkfit evaluate``
  of the run (Keras) and of the int8 model on the run's validation split (PR-AUC drop; target
  <= 0.01; a picker has no PR-AUC, its pick F1 against the markers is shown instead); the largest
  difference of the float LiteRT and ONNX scores from Keras's (``predict --out``);
- size in bytes of each file (``model.keras`` for Keras);
- latency, all runtimes in this one process on the same windows of the store: per window at batch
  1 and windows per second at batch ``--batch``, for Keras (the model in a ``tf.function``),
  LiteRT float, LiteRT int8 (its input quantised beforehand, as a device feeds it) and ONNX
  Runtime, each with the cores of this machine, taking turns (see ``latency``); ratios against
  Keras.

Datasets: ``synth``, the README's dummy problem (``chunkfit synth``: 100,000 samples, about half
the windows of 104 holding a bump); ``ecg``, the ECG excerpt data/ ships (R peaks, window 104);
``--quick``: ``synth-small`` of benchmarks/quality.py (20,000 samples, rare bumps), baseline-cnn,
one epoch, fewer rounds. ``--table`` prints the tables of the rows a run logged in ``--out``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from quality import DATASETS, ROOT, Dataset, Held  # noqa: E402

import chunkfit  # noqa: E402
from chunkfit.core.matching import match_events  # noqa: E402
from chunkfit.synth import SynthSpec, balanced_anomalies, synth  # noqa: E402


def make_synth(out: Path, samples: int = 100_000, window: int = 104) -> Path:
    """The README's dummy problem (sin + noise, bumps of 0.5), about half the windows with one."""
    store = out / f"synth-{samples}.zarr"
    if not store.exists():
        synth(store, SynthSpec(samples=samples, anomalies=balanced_anomalies(samples, window)))
    return store


BENCH_DATASETS: dict[str, Dataset] = {
    "synth": Dataset(make_synth, 104, 0.1, 52),
    "ecg": DATASETS["ecg"],
    "synth-small": DATASETS["synth-small"],
}
MODELS = ("baseline-cnn", "picker", "dilated-resnet", "inception-time")
RUNTIMES = ("Keras", "LiteRT float32", "LiteRT int8", "ONNX Runtime")
PER_ROUND = 20


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def export_all(run: Path) -> dict[str, Path]:
    """The run exported as LiteRT float32, LiteRT int8 and ONNX, into the run folder."""
    from chunkfit.export.write import export_run

    files = {
        "LiteRT float32": export_run(run, "litert", out=run / "model.tflite", overwrite=True),
        "LiteRT int8": export_run(
            run, "litert", out=run / "model-int8.tflite", quantize="int8", overwrite=True
        ),
        "ONNX Runtime": export_run(run, "onnx", out=run / "model.onnx", overwrite=True),
    }
    return {"Keras": run / "model.keras", **{k: Path(r.path) for k, r in files.items()}}


def detection_columns(path: Path, *columns: str) -> list[np.ndarray]:
    with path.open() as f:
        rows = list(csv.DictReader(f))
    return [np.asarray([int(r[c]) for r in rows], dtype=np.int64) for c in columns]


def read_scores(path: Path) -> np.ndarray:
    import zarr

    return np.asarray(zarr.open_group(str(path), mode="r")["scores"][:])


def agreement(run: Path, files: dict[str, Path], store: Path, tol: int) -> dict[str, Any]:
    """int8 against float: detections over the store, PR-AUC on the validation split; float
    exports' largest score difference from Keras."""
    scores, found = {}, {}
    for name, model in files.items():
        tag = name.replace(" ", "-")
        chunkfit.predict(
            model if name != "Keras" else run,
            store,
            run / f"scores-{tag}.zarr",
            events_out=run / f"detections-{tag}.csv",
            overwrite=True,
        )
        scores[name] = read_scores(run / f"scores-{tag}.zarr")
        found[name] = detection_columns(
            run / f"detections-{tag}.csv", "peak_sample", "start_sample", "end_sample"
        )
    # A float detection counts as found when its peak lies within ``tol`` of an int8 detection's
    # span: the peak of a plateau of scores that int8 rounds alike may move along it.
    (peaks, _, _), (int8_peaks, lo, end) = found["LiteRT float32"], found["LiteRT int8"]
    match = match_events(peaks, int8_peaks, tol, lo=lo, hi=end - 1)
    keras_eval = chunkfit.evaluate(run, store, plot=None)
    int8_eval = chunkfit.evaluate(files["LiteRT int8"], store, plot=None)
    picker = bool(keras_eval.get("picker"))
    key = "f1" if picker else "pr_auc"
    return {
        "float_detections": int(peaks.size),
        "int8_detections": int(int8_peaks.size),
        "int8_event_f1_vs_float": float(np.nan_to_num(match.f1, nan=1.0)),
        "figure": "pick F1 (markers)" if picker else "PR-AUC",
        "float": float(keras_eval[key]),
        "int8": float(int8_eval[key]),
        "drop": float(keras_eval[key]) - float(int8_eval[key]),
        "max_abs_diff": {
            name: float(np.nanmax(np.abs(scores[name] - scores["Keras"])))
            for name in ("LiteRT float32", "ONNX Runtime")
        },
    }


def windows_of(store: Path, window: int, n: int) -> np.ndarray:
    """``n`` windows of the store's first samples, float32 [n, window, channels]."""
    opened = chunkfit.open_store(store)
    x = np.asarray(opened.read(0, n + window), dtype=np.float32)
    view = np.lib.stride_tricks.sliding_window_view(x, window, axis=0)[:n]
    return np.ascontiguousarray(view.transpose(0, 2, 1))


def runners(files: dict[str, Path]) -> dict[str, Callable[[np.ndarray], Callable[[], Any]]]:
    """Per runtime: given a batch of float windows, a call that scores it (set up beforehand)."""
    import keras
    import onnxruntime as ort
    import tensorflow as tf
    from ai_edge_litert.interpreter import Interpreter

    model = keras.saving.load_model(files["Keras"], compile=False)
    forward = tf.function(lambda x: model(x, training=False), reduce_retracing=True)

    def keras_call(x: np.ndarray) -> Callable[[], Any]:
        t = tf.constant(x)
        forward(t)  # traced outside the timing
        return lambda: forward(t).numpy()

    def litert_call(path: Path, x: np.ndarray) -> Callable[[], Any]:
        it = Interpreter(model_path=str(path), num_threads=cores())
        inp, out = it.get_input_details()[0], it.get_output_details()[0]
        it.resize_tensor_input(inp["index"], list(x.shape), strict=True)
        it.allocate_tensors()
        scale, zero = inp["quantization"]
        if scale:
            x = np.clip(np.round(x / scale) + zero, -128, 127).astype(np.int8)

        def call() -> Any:
            it.set_tensor(inp["index"], x)
            it.invoke()
            return it.get_tensor(out["index"])

        return call

    options = ort.SessionOptions()
    options.intra_op_num_threads = cores()
    session = ort.InferenceSession(str(files["ONNX Runtime"]), options, ["CPUExecutionProvider"])
    name = session.get_inputs()[0].name

    def onnx_call(x: np.ndarray) -> Callable[[], Any]:
        return lambda: session.run(None, {name: x})

    return {
        "Keras": keras_call,
        "LiteRT float32": partial(litert_call, files["LiteRT float32"]),
        "LiteRT int8": partial(litert_call, files["LiteRT int8"]),
        "ONNX Runtime": onnx_call,
    }


def latency(files: dict[str, Path], store: Path, window: int, batch: int, rounds: int) -> dict:
    """Per runtime: ms per window at batch 1 and windows/s at ``batch``, on the same windows.

    The runtimes take turns, round after round (each round: the median of ``PER_ROUND`` calls at
    batch 1, then one batched call), and each figure is the median over the rounds: a machine
    shared with other work slows every runtime alike, so the ratios hold where the times do not.
    """
    x = windows_of(store, window, batch)
    made = runners(files)
    calls = {name: (made[name](x[:1]), made[name](x)) for name in RUNTIMES}
    for one, many in calls.values():  # warm-up
        one(), one(), many()
    ones: dict[str, list[float]] = {name: [] for name in RUNTIMES}
    manys: dict[str, list[float]] = {name: [] for name in RUNTIMES}
    for _ in range(rounds):
        for name, (one, many) in calls.items():
            spent = []
            for _ in range(PER_ROUND):
                began = time.perf_counter()
                one()
                spent.append(time.perf_counter() - began)
            ones[name].append(statistics.median(spent))
            began = time.perf_counter()
            many()
            manys[name].append(time.perf_counter() - began)
    return {
        name: {
            "ms_per_window": 1e3 * statistics.median(ones[name]),
            "windows_per_s": batch / statistics.median(manys[name]),
        }
        for name in RUNTIMES
    }


def measure(model: str, name: str, data: Dataset, args: argparse.Namespace) -> dict[str, Any]:
    store = data.make(args.out)
    held = Held.of(store, data)
    tol = held.tolerance(data)
    run = args.out / f"{name}-{model}"
    chunkfit.fit(
        model, store, window=data.window, validation=data.validation, epochs=args.epochs,
        chunk=50_000, seed=0, tolerance=data.tolerance_s, out=run, resume="restart",
    )  # fmt: skip
    files = export_all(run)
    sizes = {k: p.stat().st_size for k, p in files.items()}
    return {
        "dataset": name,
        "model": model,
        "agreement": agreement(run, files, store, tol),
        "bytes": sizes,
        "latency": latency(files, store, data.window, args.batch, args.rounds),
    }


def print_tables(rows: list[dict[str, Any]], batch: int) -> None:
    print(
        "\n| dataset | model | int8 event F1 vs float | figure | float | int8 | drop | "
        "float max abs diff (LiteRT / ONNX) |"
    )
    print("|---|---|---:|---|---:|---:|---:|---:|")
    for r in rows:
        a = r["agreement"]
        d = a["max_abs_diff"]
        print(
            f"| {r['dataset']} | {r['model']} | {a['int8_event_f1_vs_float']:.3f} "
            f"({a['int8_detections']} / {a['float_detections']}) | {a['figure']} | "
            f"{a['float']:.4f} | {a['int8']:.4f} | {a['drop']:+.4f} | "
            f"{d['LiteRT float32']:.1e} / {d['ONNX Runtime']:.1e} |"
        )
    print(
        f"\n| dataset | model | runtime | bytes | ms per window (batch 1) | vs Keras | "
        f"windows/s (batch {batch}) | vs Keras |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        k = r["latency"]["Keras"]
        for name in RUNTIMES:
            t = r["latency"][name]
            print(
                f"| {r['dataset']} | {r['model']} | {name} | {r['bytes'][name]:,} | "
                f"{t['ms_per_window']:.3f} | {k['ms_per_window'] / t['ms_per_window']:.1f}x | "
                f"{t['windows_per_s']:,.0f} | {t['windows_per_s'] / k['windows_per_s']:.1f}x |"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    ap.add_argument("--datasets", nargs="+", choices=list(BENCH_DATASETS), default=["synth", "ecg"])
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=1024, help="windows per batched call")
    ap.add_argument("--rounds", type=int, default=40, help="rounds of timed calls (see latency)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench-out" / "export")
    ap.add_argument("--quick", action="store_true", help="synth-small, baseline-cnn, fewer rounds")
    ap.add_argument("--table", action="store_true", help="only print the tables of --out's rows")
    args = ap.parse_args()
    if args.quick:
        args.models, args.datasets, args.epochs = ["baseline-cnn"], ["synth-small"], 1
        args.rounds, args.batch = 5, 256
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "rows.jsonl"
    if args.table:
        print_tables([json.loads(line) for line in log.read_text().splitlines()], args.batch)
        return
    log.write_text("")
    rows = []
    for model in args.models:
        for name in args.datasets:
            row = measure(model, name, BENCH_DATASETS[name], args)
            rows.append(row)
            print(json.dumps(row), flush=True)
            with log.open("a") as f:
                f.write(json.dumps(row) + "\n")
    print_tables(rows, args.batch)


if __name__ == "__main__":
    main()
