"""Training throughput, memory and quality of chunkfit against the original question's reference.

    python benchmarks/train.py [throughput] [memory] [quality] [scoring] [--model NAME]
                               [--samples N] [--repeats R] [--seeds S] [--strategies NAME ...]
                               [--engines tensorflow|jax ...]

Sections (throughput, memory and quality when none is named):

- throughput: on the original question's problem (synth store, window 104, batch 128, baseline-cnn,
  or the built-in model ``--model`` names, e.g. dilated-resnet with ``--samples 262144``), windows
  per second of training and peak RSS of (1) model.fit on the fully materialised float64 window
  array, (2) a keras.utils.PyDataset building batches on the fly, (J) Keras on the JAX backend
  (``KERAS_BACKEND=jax``, the bench extra's jax) with plain model.fit on materialised float32
  windows, (3) chunkfit default (its second epoch, after ``--jit auto``'s trial; each chunkfit run
  has an empty threads cache of its own, as on a machine chunkfit has not trained on), (3t) the same
  in a later run on this machine (the threads measurement made before it, untimed, and cached), (3b)
  chunkfit with steps_per_execution=1, (3d) chunkfit ``--jit off``, (4) the compute ceiling: the
  train step on one constant batch in one compiled loop, under TensorFlow's default threads, and
  (4c) the same with the step under XLA, (4e) with each batch as two halves side by side (half the
  cores each: chunkfit.train.tensorflow.halves). The ceilings run Keras's own train step, its
  metrics updated after every batch, as ``fit`` runs it; chunkfit's step updates Keras's own metrics
  once per compiled call (chunkfit.train.tensorflow.stepper), so it can pass them. (1b), (3c), (4b)
  and (4d) run on one compute thread, to show what the thread setting alone is worth. Each strategy
  runs in its own subprocess, in rounds so that machine noise hits all alike; the table shows
  medians and ratios to (1) and to the best anchor: the fastest of (J) and the ceilings.
- memory: chunkfit --chunk 200000 on a 20,000,000-sample synth store (one epoch) against the 1M
  store (its second epoch), on each engine ``--engines`` names (TensorFlow's, with (4), (4b), (4c)
  and (4e) run next to each size, and JAX's, with (4j)).
- quality: on the balanced synth problem (about half the windows positive), validation accuracy
  after 3 epochs of chunkfit against model.fit on the materialised, fully shuffled windows of the
  same split, from the same initial weights, over several seeds (one run's accuracy moves by a
  point or two from epoch to epoch, so single runs cannot resolve a 1-point difference).
- scoring: windows per second of ``chunkfit evaluate`` (the API, every window of the store) and
  ``chunkfit predict`` (scores written to a zarr array) against Keras ``model.predict`` on the
  materialised float32 windows, all at batch 1024, with the same model (trained one epoch on a
  small store); each timed from the call, so chunkfit's includes loading the run and tracing.

Windows per second count training windows over the time spent training them (tracing included,
validation excluded). Tables are printed and written to benchmarks/RESULTS-train.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
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
RESULTS = Path(__file__).with_name("RESULTS-train.md")
WINDOW, BATCH = 104, 128
MODEL = "baseline-cnn"  # --model
SCORE_BATCH = 1024
SCAN = 256  # steps per call of (4js): chunkfit's batches per element for baseline-cnn
MILLION = 1_049_344
LARGE = 20_000_000
STRATEGIES = (
    "reference",
    "reference-1t",
    "pydataset",
    "jax",
    "chunkfit",
    "chunkfit-cached",
    "chunkfit-jax",
    "chunkfit-spe1",
    "chunkfit-1t",
    "chunkfit-nojit",
    "chunkfit-jax-dispatch",
    "chunkfit-jax-scan",
    "ceiling",
    "ceiling-1t",
    "ceiling-xla",
    "ceiling-xla-1t",
    "ceiling-halves",
    "ceiling-jax",
    "ceiling-jax-scan",
)
# Run when no strategy is named: every strategy but the --jax-loop overrides, which (3j) chooses
# between.
DEFAULT_STRATEGIES = tuple(
    s for s in STRATEGIES if s not in ("chunkfit-jax-dispatch", "chunkfit-jax-scan")
)
# What runs without TensorFlow (a machine with JAX alone, e.g. a GPU whose image has no TensorFlow).
JAX_ONLY = (
    "jax",
    "chunkfit-jax",
    "chunkfit-jax-dispatch",
    "chunkfit-jax-scan",
    "ceiling-jax",
    "ceiling-jax-scan",
)
ANCHORS = (
    "jax",
    "ceiling",
    "ceiling-1t",
    "ceiling-xla",
    "ceiling-xla-1t",
    "ceiling-halves",
    "ceiling-jax",
    "ceiling-jax-scan",
)
ON_JAX = (*JAX_ONLY, "score-jax", "score-evaluate-jax", "score-predict-jax")
LABELS = {
    "reference": "(1) model.fit, materialised float64 windows (the original question)",
    "reference-1t": "(1b) the same on 1 compute thread",
    "pydataset": "(2) keras.utils.PyDataset, batches built on the fly",
    "jax": "(J) Keras on the JAX backend, plain model.fit on materialised float32 windows",
    "chunkfit": (
        "(3) chunkfit defaults (chunk 200,000, mix 4; --jit auto, threads and batches per compiled "
        "step chosen by chunkfit)"
    ),
    "chunkfit-nojit": "(3d) chunkfit, --jit off",
    "chunkfit-cached": (
        "(3t) chunkfit defaults in a later run on this machine: threads and compile mode from the "
        "measurement an earlier run cached (made before, untimed)"
    ),
    "chunkfit-jax": "(3j) chunkfit on its JAX engine (KERAS_BACKEND=jax), defaults otherwise",
    "chunkfit-spe1": "(3b) chunkfit, steps_per_execution=1",
    "chunkfit-1t": "(3c) chunkfit, --compute-threads 1",
    "ceiling": (
        "(4) compute ceiling: constant batch, one compiled loop, TensorFlow's default threads"
    ),
    "ceiling-1t": "(4b) compute ceiling on 1 compute thread",
    "ceiling-xla": "(4c) compute ceiling, the step under XLA, TensorFlow's default threads",
    "ceiling-xla-1t": "(4d) compute ceiling, the step under XLA, 1 compute thread",
    "ceiling-halves": (
        "(4e) compute ceiling, each batch as two halves side by side (half the cores each, one "
        "inter-op thread per half)"
    ),
    "ceiling-jax": (
        "(4j) compute ceiling on JAX: constant batch, Keras's stateless train step jitted, one "
        "call per step"
    ),
    "chunkfit-jax-dispatch": (
        "(3jd) chunkfit on JAX, --jax-loop dispatch (one compiled call per batch)"
    ),
    "chunkfit-jax-scan": (
        "(3js) chunkfit on JAX, --jax-loop scan (an element's batches in one compiled call)"
    ),
    "ceiling-jax-scan": (
        "(4js) compute ceiling on JAX: constant batch, 256 steps per jitted call (lax.scan)"
    ),
}


# -- stores ----------------------------------------------------------------------------------------


def synth_store(samples: int, balanced: bool = False) -> Path:
    from chunkfit.synth import DEFAULT_ANOMALIES, SynthSpec, balanced_anomalies, synth

    anomalies = (
        balanced_anomalies(samples, WINDOW)
        if balanced
        else round(DEFAULT_ANOMALIES * samples / MILLION)
    )
    path = OUT / f"train-synth-{samples}-{anomalies}.zarr"
    if not path.exists():
        OUT.mkdir(exist_ok=True)
        synth(path, SynthSpec(samples=samples, anomalies=anomalies, seed=0))
    return path


# -- workers: each runs in its own process and prints one JSON line --------------------------------


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def materialise(store_path: str, ranges: list[list[int]]) -> tuple[Any, Any]:
    """Every window of ``ranges``, float64 [n, window, 1], one-hot labels: the question's input."""
    import keras
    import numpy as np

    from chunkfit import open_store
    from chunkfit.core.windows import any_event_labels

    xs, ys = [], []
    with open_store(store_path) as store:
        for a, b in ranges:
            x = store.read(a, b)[:, 0].astype(np.float64)
            starts = np.arange(a, b - WINDOW + 1)
            xs.append(np.lib.stride_tricks.sliding_window_view(x, WINDOW)[..., None].copy())
            ys.append(any_event_labels(starts, WINDOW, store.events))
    return np.concatenate(xs), keras.utils.to_categorical(np.concatenate(ys), 2)


def reference_model(seed: int = 0, name: str = "baseline-cnn") -> Any:
    import keras

    from chunkfit.train.metrics import compiled_metrics
    from chunkfit.train.models import build_model

    keras.utils.set_random_seed(seed)
    model = build_model(name, WINDOW, 1, 2)
    # chunkfit's epoch metrics (PR-AUC, precision, recall of the event class, accuracy): the same
    # work per batch
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss="categorical_crossentropy",
        metrics=compiled_metrics(2),
    )
    return model


def work_reference(store: str, args: dict[str, Any]) -> dict[str, Any]:
    from chunkfit import open_store
    from chunkfit.train.tensorflow.threads import start_tensorflow

    start_tensorflow(args.get("threads", 0))

    with open_store(store) as s:
        n = s.n_samples
    t0 = time.perf_counter()
    x, y = materialise(store, [[0, n]])
    prep = time.perf_counter() - t0
    model = reference_model(name=args["model"])
    t1 = time.perf_counter()
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=True, verbose=0)
    return {"windows": len(x), "seconds": time.perf_counter() - t1, "prep_seconds": prep}


def work_pydataset(store: str, args: dict[str, Any]) -> dict[str, Any]:
    import keras
    import numpy as np

    from chunkfit import open_store
    from chunkfit.core.windows import any_event_labels

    with open_store(store) as s:
        signal = s.read(0, s.n_samples)[:, 0]
        labels = any_event_labels(np.arange(s.n_samples - WINDOW + 1), WINDOW, s.events)
    span = np.arange(WINDOW)

    class Windows(keras.utils.PyDataset):
        def __init__(self) -> None:
            super().__init__()
            self.order = np.random.default_rng(0).permutation(labels.size)

        def __len__(self) -> int:
            return math.ceil(labels.size / BATCH)

        def __getitem__(self, i: int) -> tuple[Any, Any]:
            idx = self.order[i * BATCH : (i + 1) * BATCH]
            return signal[idx[:, None] + span][..., None], np.eye(2, dtype=np.float32)[labels[idx]]

        def on_epoch_end(self) -> None:
            np.random.default_rng().shuffle(self.order)

    model = reference_model(name=args["model"])
    t0 = time.perf_counter()
    model.fit(Windows(), epochs=1, verbose=0)
    return {"windows": int(labels.size), "seconds": time.perf_counter() - t0}


def work_chunkfit(store: str, args: dict[str, Any]) -> dict[str, Any]:
    # A threads cache of the run's own: empty, as on a machine chunkfit has not trained on, or with
    # "cached" holding a measurement made before the run, untimed, as for a later run on this
    # machine.
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["CHUNKFIT_CACHE_DIR"] = str(Path(tmp) / "cache")
        if args.get("cached"):
            measure_threads(args["model"])  # before TensorFlow is imported here
        import chunkfit

        chunkfit.fit(
            args["model"],
            store,
            window=WINDOW,
            batch_size=BATCH,
            epochs=args.get("epochs", 2),
            out=Path(tmp) / "run",
            **args.get("fit", {}),
        )
        run = json.loads((Path(tmp) / "run" / "run.json").read_text())
    # The second epoch: after --jit auto's trial, as in a run of several epochs.
    last = run["epochs"][-1]
    return {
        "windows": last["train_windows"],
        "seconds": last["train_seconds"],
        "epochs": run["epochs"],
        "compile": run.get("compile"),
        "threads": run.get("threads"),
    }


def measure_threads(model: str) -> None:
    """What a first run long enough to measure threads does (chunkfit.train.tensorflow.threadtune),
    here in a process of its own before the timed run, which then reads it from the cache."""
    from chunkfit.train.tensorflow.threadtune import ProbeSpec, choose_threads

    spec = choose_threads(
        None,
        model,
        deterministic=False,
        window=WINDOW,
        channels=1,
        classes=2,
        batch_size=BATCH,
        run_windows=1,
        group_samples=4 * 200_000 + WINDOW,
        probe_windows=0,
    )
    assert isinstance(spec, ProbeSpec), spec
    job = json.dumps({**dataclasses.asdict(spec), "modes": list(spec.modes)})
    subprocess.run(
        [sys.executable, "-m", "chunkfit.train.tensorflow.threadtune", job],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def work_jax(store: str, args: dict[str, Any]) -> dict[str, Any]:
    """A Keras user's other route: KERAS_BACKEND=jax (set by ``run``) and model.fit on materialised
    windows."""
    import keras

    assert keras.backend.backend() == "jax", keras.backend.backend()
    from chunkfit import open_store

    with open_store(store) as s:
        n = s.n_samples
    x, y = materialise(store, [[0, n]])
    x, y = x.astype("float32"), y.astype("float32")
    model = reference_model(name=args["model"])
    t1 = time.perf_counter()
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=True, verbose=0)
    return {"windows": len(x), "seconds": time.perf_counter() - t1}


def work_ceiling(store: str, args: dict[str, Any]) -> dict[str, Any]:
    from chunkfit.train.tensorflow.threads import start_tensorflow

    # The train step chunkfit runs, on one constant batch: TensorFlow's default threads unless
    # given; with "halves", each batch's halves side by side, an inter-op thread each.
    halves = args.get("halves", 1)
    start_tensorflow((args["threads"], halves) if "threads" in args else None)
    import keras
    import numpy as np
    import tensorflow as tf

    from chunkfit.train.models import build_model, compile_model
    from chunkfit.train.tensorflow.halves import split_batch, splittable

    keras.utils.set_random_seed(0)
    model = build_model(args["model"], WINDOW, 1, 2)
    compile_model(model, optimizer=None, lr=None, loss=None, steps_per_execution=64)
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(BATCH, WINDOW, 1)).astype("float32"))
    y = tf.one_hot(rng.integers(0, 2, BATCH), 2)
    model.fit(x, y, batch_size=BATCH, verbose=0)  # builds the optimizer and metrics

    # XLA per step inside a plain compiled loop (XLA over the whole loop ran slower)
    step = tf.function(model.train_step, jit_compile=True) if args.get("xla") else model.train_step

    @tf.function
    def loop(steps: tf.Tensor) -> tf.Tensor:
        for _ in tf.range(steps):
            step((x, y))
        return steps

    if halves > 1:
        assert splittable(model), args["model"]
    with split_batch(model, halves):  # traced here
        loop(tf.constant(20))
    t0 = time.perf_counter()
    loop(tf.constant(20))
    steps = max(200, min(4000, round(10 * 20 / (time.perf_counter() - t0))))  # about 10 s
    t0 = time.perf_counter()
    loop(tf.constant(steps))
    return {"windows": steps * BATCH, "seconds": time.perf_counter() - t0}


def work_ceiling_jax(store: str, args: dict[str, Any]) -> dict[str, Any]:
    """The same constant batch on the JAX backend: Keras's stateless train step, jitted, one call
    per step (its fastest form here: a ``lax.scan`` or ``fori_loop`` over the steps ran about
    0.55x)."""
    import jax
    import keras
    import numpy as np

    assert keras.backend.backend() == "jax", keras.backend.backend()
    from chunkfit.train.models import build_model, compile_model

    keras.utils.set_random_seed(0)
    model = build_model(args["model"], WINDOW, 1, 2)
    compile_model(model, optimizer=None, lr=None, loss=None, steps_per_execution=1)
    rng = np.random.default_rng(0)
    x = jax.device_put(rng.normal(size=(BATCH, WINDOW, 1)).astype("float32"))
    y = jax.device_put(np.eye(2, dtype="float32")[rng.integers(0, 2, BATCH)])
    model.fit(x, y, batch_size=BATCH, verbose=0)  # builds the optimizer and metrics
    state = (
        [v.value for v in model.trainable_variables],
        [v.value for v in model.non_trainable_variables],
        [v.value for v in model.optimizer.variables],
        [v.value for v in model.metrics_variables],
    )
    step = jax.jit(lambda s: model.train_step(s, (x, y))[1], donate_argnums=0)

    if args.get("scan"):  # SCAN steps per call, as chunkfit's --jax-loop scan runs an element

        def looped(s: Any, _: Any) -> tuple[Any, None]:
            return model.train_step(s, (x, y))[1], None

        many = jax.jit(lambda s: jax.lax.scan(looped, s, None, length=SCAN)[0], donate_argnums=0)

        def loop(state: Any, steps: int) -> Any:
            for _ in range(steps // SCAN):
                state = many(state)
            return jax.block_until_ready(state)

        state = loop(state, 2 * SCAN)
        t0 = time.perf_counter()
        state = loop(state, 2 * SCAN)
        steps = SCAN * max(2, min(64, round(10 * 2 / (time.perf_counter() - t0))))  # about 10 s
    else:

        def loop(state: Any, steps: int) -> Any:
            for _ in range(steps):
                state = step(state)
            return jax.block_until_ready(state)

        state = loop(state, 20)
        t0 = time.perf_counter()
        state = loop(state, 20)
        steps = max(200, min(4000, round(10 * 20 / (time.perf_counter() - t0))))  # about 10 s
    t0 = time.perf_counter()
    loop(state, steps)
    return {"windows": steps * BATCH, "seconds": time.perf_counter() - t0}


def work_score_run(store: str, args: dict[str, Any]) -> dict[str, Any]:
    """The run the scoring rows score with: one epoch on a small synth store (scoring speed does not
    depend on how well the model learnt)."""
    import chunkfit

    chunkfit.fit(
        args["model"],
        store,
        window=WINDOW,
        batch_size=BATCH,
        epochs=1,
        out=args["run"],
        resume="restart",
    )
    return {"windows": 0, "seconds": 0.0}


def work_score_keras(store: str, args: dict[str, Any]) -> dict[str, Any]:
    """Keras ``model.predict`` on every window of ``store``, materialised as float32 (on the backend
    ``run`` set: TensorFlow, or JAX for score-jax)."""
    import keras
    import numpy as np

    from chunkfit import open_store

    with open_store(store) as s:
        x = s.read(0, s.n_samples)[:, 0]
    windows = np.lib.stride_tricks.sliding_window_view(x, WINDOW)[..., None].copy()
    model = keras.saving.load_model(Path(args["run"]) / "model.keras", compile=False)
    t0 = time.perf_counter()
    model.predict(windows, batch_size=SCORE_BATCH, verbose=0)
    return {
        "windows": len(windows),
        "seconds": time.perf_counter() - t0,
        "backend": keras.backend.backend(),
    }


def work_score_chunkfit(store: str, args: dict[str, Any], how: str) -> dict[str, Any]:
    import chunkfit
    from chunkfit._quiet import import_tensorflow_quietly

    if os.environ.get("KERAS_BACKEND") == "jax":
        import keras  # noqa: F401 - the backend imported, as for model.predict's row
    else:
        # As model.predict's row has TensorFlow imported before its clock starts.
        import_tensorflow_quietly()
    t0 = time.perf_counter()
    if how == "evaluate":
        windows = chunkfit.evaluate(args["run"], store, batch_size=SCORE_BATCH)["windows"]
    else:
        with tempfile.TemporaryDirectory() as tmp:
            windows = chunkfit.predict(
                args["run"], store, Path(tmp) / "scores.zarr", batch_size=SCORE_BATCH
            ).windows
    return {"windows": windows, "seconds": time.perf_counter() - t0}


def work_quality_reference(store: str, args: dict[str, Any]) -> dict[str, Any]:
    split = args["split"]
    x, y = materialise(store, split["train_ranges"])
    vx, vy = materialise(store, split["validation_ranges"])
    model = reference_model(args["seed"])
    history = model.fit(
        x, y, batch_size=BATCH, epochs=3, shuffle=True, validation_data=(vx, vy), verbose=0
    )
    return {"val_accuracy": history.history["val_accuracy"], "windows": len(x), "seconds": 0.0}


WORKERS = {
    "reference": work_reference,
    "pydataset": work_pydataset,
    "chunkfit": work_chunkfit,
    "chunkfit-spe1": lambda s, a: work_chunkfit(s, {**a, "fit": {"steps_per_execution": 1}}),
    "chunkfit-1t": lambda s, a: work_chunkfit(s, {**a, "fit": {"compute_threads": 1}}),
    "chunkfit-cached": lambda s, a: work_chunkfit(s, {**a, "cached": True}),
    "chunkfit-nojit": lambda s, a: work_chunkfit(s, {**a, "fit": {"jit": "off"}}),
    "chunkfit-jax": work_chunkfit,
    "chunkfit-jax-dispatch": lambda s, a: work_chunkfit(s, {**a, "fit": {"jax_loop": "dispatch"}}),
    "chunkfit-jax-scan": lambda s, a: work_chunkfit(s, {**a, "fit": {"jax_loop": "scan"}}),
    "ceiling-jax": work_ceiling_jax,
    "ceiling-jax-scan": lambda s, a: work_ceiling_jax(s, {**a, "scan": True}),
    "jax": work_jax,
    "ceiling-xla": lambda s, a: work_ceiling(s, {**a, "xla": True}),
    "ceiling-xla-1t": lambda s, a: work_ceiling(s, {**a, "threads": 1, "xla": True}),
    "reference-1t": lambda s, a: work_reference(s, {**a, "threads": 1}),
    "ceiling": work_ceiling,
    "ceiling-1t": lambda s, a: work_ceiling(s, {**a, "threads": 1}),
    "ceiling-halves": lambda s, a: work_ceiling(
        s, {**a, "threads": max(1, len(os.sched_getaffinity(0)) // 2), "halves": 2}
    ),
    "quality-reference": work_quality_reference,
    "score-run": lambda s, a: work_score_run(s, a),
    "score-keras": lambda s, a: work_score_keras(s, a),
    "score-jax": lambda s, a: work_score_keras(s, a),
    "score-evaluate": lambda s, a: work_score_chunkfit(s, a, "evaluate"),
    "score-evaluate-jax": lambda s, a: work_score_chunkfit(s, a, "evaluate"),
    "score-predict-jax": lambda s, a: work_score_chunkfit(s, a, "predict"),
    "score-predict": lambda s, a: work_score_chunkfit(s, a, "predict"),
}


def worker(name: str, store: str, args_json: str) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # TensorFlow starts inside each strategy, so that its threads can still be set there.
    result = WORKERS[name](store, json.loads(args_json))
    result["peak_rss"] = peak_rss()
    print(json.dumps(result))


def run(name: str, store: Path, **args: Any) -> dict[str, Any]:
    args.setdefault("model", MODEL)
    cmd = [sys.executable, __file__, "--worker", name, str(store), json.dumps(args)]
    env = {**os.environ, "KERAS_BACKEND": "jax"} if name in ON_JAX else None
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if proc.returncode != 0:
        sys.exit(f"worker {name} failed:\n{proc.stderr}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["windows_per_s"] = out["windows"] / out["seconds"] if out["seconds"] else float("nan")
    return out


# -- sections --------------------------------------------------------------------------------------


def throughput(samples: int, repeats: int, strategies: tuple[str, ...] = STRATEGIES) -> list[str]:
    store = synth_store(samples)
    results: dict[str, list[dict[str, Any]]] = {s: [] for s in strategies}
    for _ in range(repeats):
        for s in strategies:
            results[s].append(run(s, store))
            print(f"  {s}: {results[s][-1]['windows_per_s']:,.0f} windows/s", file=sys.stderr)
    speed = {s: statistics.median(r["windows_per_s"] for r in v) for s, v in results.items()}

    def ratio(s: str, base: str) -> str:
        # Per round, so that load from other processes, which drifts over minutes, mostly cancels.
        if base not in results:
            return "-"
        per_round = (
            a["windows_per_s"] / b["windows_per_s"]
            for a, b in zip(results[s], results[base], strict=True)
        )
        return f"{statistics.median(per_round):.2f}x"

    lines = [
        (
            f"### Throughput: {samples:,}-sample synth store, window {WINDOW}, batch {BATCH}, "
            f"{MODEL}, one epoch per strategy; {repeats} round(s)"
        ),
        "",
        "| strategy | windows/s (median) | vs (1) | vs best anchor | per round | peak RSS MB |",
        "|---|---:|---:|---:|---|---:|",
    ]
    anchors = [a for a in ANCHORS if a in results]
    best = max(anchors, key=lambda a: speed[a]) if anchors else None
    for s in strategies:
        peak = max(r["peak_rss"] for r in results[s]) / 2**20
        rounds = ", ".join(f"{r['windows_per_s'] / 1000:.1f}k" for r in results[s])
        lines.append(
            f"| {LABELS[s]} | {speed[s]:,.0f} | {ratio(s, 'reference')} | "
            f"{ratio(s, best) if best else '-'} | {rounds} | {peak:,.0f} |"
        )
    anchor = LABELS[best] if best else "-"
    lines += [
        "",
        (
            "Ratios are medians of the per-round ratios; the best anchor is the fastest of (J) and "
            f"the ceilings (4*): {anchor}."
        ),
    ]
    if "chunkfit" in results:
        picks = [(r.get("compile") or {}).get("jit") for r in results["chunkfit"]]
        lines += [
            f"chunkfit's --jit auto chose XLA in {sum(bool(p) for p in picks)} of {len(picks)} "
            "round(s)."
        ]
        threads = [r.get("threads") or {} for r in results["chunkfit"]]
        measured = [t["seconds"] for t in threads if str(t.get("by", "")).startswith("autotune")]
        # A first run long enough measures its threads before training (not in the time above).
        if measured:
            lines += [
                (
                    f"(3) measured its threads first in {len(measured)} of {len(threads)} "
                    f"round(s), taking {', '.join(f'{x:.1f}' for x in measured)} s before "
                    "training, and chose one compute thread in "
                    f"{sum(t.get('intra_op') == 1 and 'halves' not in t for t in threads)}, "
                    f"each batch in halves side by side in {sum('halves' in t for t in threads)}."
                )
            ]
    if "chunkfit-cached" in results:
        cached = [r.get("threads") or {} for r in results["chunkfit-cached"]]
        picks = [(r.get("compile") or {}).get("jit") for r in results["chunkfit-cached"]]
        lines += [
            (
                f"(3t)'s measurement chose one compute thread in "
                f"{sum(t.get('intra_op') == 1 and 'halves' not in t for t in cached)} of "
                f"{len(cached)} round(s), each batch in halves side by side in "
                f"{sum('halves' in t for t in cached)} (every core in the others) and XLA in "
                f"{sum(bool(p) for p in picks)}."
            )
        ]
    if "chunkfit-jax" in results:
        loops = [(r.get("compile") or {}).get("loop") for r in results["chunkfit-jax"]]
        lines += [
            (
                "chunkfit's JAX engine (--jax-loop auto) chose the scan in "
                f"{loops.count('scan')} of {len(loops)} round(s), dispatch in the others."
            )
        ]
    if "reference" in results:
        prep = statistics.median(r["prep_seconds"] for r in results["reference"])
        lines += [
            f"Materialising the reference's windows took a further {prep:.1f} s "
            "(not counted above)."
        ]
    return lines


# The memory section's engines: chunkfit's strategy, and the ceiling run next to each size.
MEMORY_ENGINES = {
    "tensorflow": (
        "chunkfit",
        ("ceiling", "ceiling-1t", "ceiling-xla", "ceiling-halves"),
        "(4)/(4b)/(4c)/(4e)",
    ),
    "jax": ("chunkfit-jax", ("ceiling-jax",), "(4j)"),
}


def memory(repeats: int, engines: tuple[str, ...] = tuple(MEMORY_ENGINES)) -> list[str]:
    """Each round trains the 1M store (its second epoch, after --jit auto's trial) and then the 20M
    store (its first: the trial is 1% of it) back to back, the engine's ceiling (the fastest of its
    constant-batch ceilings) run next to each, so that a round's 20M/1M ratio is taken within
    minutes. On TensorFlow both sizes use the threads measured before the run, as (3t) does."""
    rows = []
    for engine in engines:
        strategy, ceilings, _ = MEMORY_ENGINES[engine]
        for round_ in range(1, repeats + 1):
            for samples in (MILLION, LARGE):
                store = synth_store(samples)
                # Both sizes train with the threads measured before the run (TensorFlow's engine):
                # a 20M run measures them itself, while the 1M one is too short to, and would use
                # the rule.
                got = run(
                    strategy,
                    store,
                    epochs=1 if samples == LARGE else 2,
                    fit={"chunk": 200_000},
                    cached=engine == "tensorflow",
                )
                # The ceiling does not depend on the signal; it runs next to each size, as the
                # machine's speed drifts.
                ceiling = max(run(c, store)["windows_per_s"] for c in ceilings)
                rows.append(
                    (engine, round_, samples, got["windows_per_s"], ceiling, got["peak_rss"])
                )
    lines = [
        "### Memory: chunkfit --chunk 200000, baseline-cnn (1M: the second epoch; 20M: the first)",
        "",
        (
            "| engine | round | signal samples | materialised float32 windows would need | "
            "windows/s | vs 1M, same round | vs the ceiling run next to it | peak RSS MB |"
        ),
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    base = {(engine, r): speed for engine, r, samples, speed, _, _ in rows if samples == MILLION}
    ratios: dict[str, list[float]] = {}
    for engine, r, samples, speed, ceiling, peak in rows:
        need = (samples - WINDOW + 1) * WINDOW * 4 / 1e9
        vs = speed / base[(engine, r)]
        if samples == LARGE:
            ratios.setdefault(engine, []).append(vs)
        lines.append(
            f"| {engine} | {r} | {samples:,} | {need:,.1f} GB | {speed:,.0f} | {vs:.2f}x | "
            f"{speed / ceiling:.2f}x {MEMORY_ENGINES[engine][2]} | {peak / 2**20:,.0f} |"
        )
    lines.append("")
    for engine, rs in ratios.items():
        lines.append(
            f"{engine}: 20M vs 1M per round {', '.join(f'{x:.2f}x' for x in rs)}; median "
            f"{statistics.median(rs):.2f}x."
        )
    return lines


SCORERS = {
    "score-keras": "Keras model.predict, materialised float32 windows (TensorFlow)",
    "score-jax": "Keras model.predict, materialised float32 windows, on the JAX backend",
    "score-evaluate": "chunkfit evaluate (every window, figures and events included)",
    "score-predict": "chunkfit predict (scores written to a zarr array, detections)",
    "score-evaluate-jax": "chunkfit evaluate on the JAX backend (KERAS_BACKEND=jax)",
    "score-predict-jax": "chunkfit predict on the JAX backend",
}


def scoring(samples: int, repeats: int) -> list[str]:
    small = synth_store(65_536)
    store = synth_store(samples)
    trained = OUT / f"score-run-{MODEL}"
    run("score-run", small, run=str(trained))
    results: dict[str, list[float]] = {s: [] for s in SCORERS}
    for _ in range(repeats):
        for s in SCORERS:
            results[s].append(run(s, store, run=str(trained))["windows_per_s"])
            print(f"  {s}: {results[s][-1]:,.0f} windows/s", file=sys.stderr)

    def ratio(s: str) -> str:
        per_round = (a / b for a, b in zip(results[s], results["score-keras"], strict=True))
        return f"{statistics.median(per_round):.2f}x"

    lines = [
        (
            f"### Scoring: every window of the {samples:,}-sample synth store, window {WINDOW}, "
            f"batch {SCORE_BATCH}, {MODEL}; {repeats} round(s)"
        ),
        "",
        "| scorer | windows/s (median) | vs Keras model.predict | per round |",
        "|---|---:|---:|---|",
    ]
    for s, label in SCORERS.items():
        rounds = ", ".join(f"{v / 1000:.1f}k" for v in results[s])
        lines.append(f"| {label} | {statistics.median(results[s]):,.0f} | {ratio(s)} | {rounds} |")
    lines += [
        "",
        (
            "chunkfit's rows are timed from the call, TensorFlow imported (loading the run and "
            "tracing included); model.predict's from the call, after the windows were "
            "materialised."
        ),
    ]
    return lines


def quality(samples: int, seeds: int) -> list[str]:
    import chunkfit
    from chunkfit.core.windows import plan_split

    store = synth_store(samples, balanced=True)
    with chunkfit.open_store(store) as s:
        split = plan_split(
            s.segments, chunkfit.WindowSpec(WINDOW), chunkfit.SplitSpec(0.1)
        ).to_dict()
    ours, refs = [], []
    for seed in range(seeds):
        ours.append(
            [
                e["val_accuracy"]
                for e in run("chunkfit", store, epochs=3, fit={"seed": seed})["epochs"]
            ]
        )
        refs.append(run("quality-reference", store, split=split, seed=seed)["val_accuracy"])
        print(
            f"  seed {seed}: chunkfit {ours[-1][-1]:.4f}, materialised {refs[-1][-1]:.4f}",
            file=sys.stderr,
        )

    def row(name: str, runs: list[list[float]]) -> str:
        finals = " / ".join(f"{r[-1]:.4f}" for r in runs)
        return f"| {name} | {finals} | {statistics.mean(r[-1] for r in runs):.4f} |"

    diff = statistics.mean(r[-1] for r in ours) - statistics.mean(r[-1] for r in refs)
    return [
        (
            f"### Quality: balanced synth ({samples:,} samples, about half the windows positive), "
            f"3 epochs, last 10% held out (+ a {WINDOW}-sample gap); seeds 0..{seeds - 1}, "
            "same initial weights per seed"
        ),
        "",
        "| training | val accuracy after 3 epochs, per seed | mean |",
        "|---|---|---:|",
        row("model.fit on materialised windows, fully shuffled each epoch", refs),
        row(
            (
                "chunkfit default (blocks of 200,000 windows trained 4 at a time, windows shuffled "
                "jointly)"
            ),
            ours,
        ),
        "",
        f"chunkfit minus materialised, mean over seeds: {100 * diff:+.2f} points.",
    ]


def cpu_name() -> str:
    """The CPU's model name and its widest vector extension (from /proc/cpuinfo; Linux only): speeds
    and the fastest step differ between CPUs that ``lscpu`` names alike."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "CPU unknown"
    fields: dict[str, str] = {}
    for line in info.splitlines():  # the first CPU's fields
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    model, flags = fields.get("model name", "?"), set(fields.get("flags", "").split())
    widest = (
        "AVX-512" if "avx512f" in flags else "AVX2, no AVX-512" if "avx2" in flags else "no AVX2"
    )
    return f"{model} ({widest})"


def package_versions() -> dict[str, str]:
    """The versions of what trains, without importing it (importing JAX here would take the GPU's
    memory from the workers): TensorFlow only where installed."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for label, names in (
        ("TensorFlow", ("tensorflow-cpu", "tensorflow")),
        ("Keras", ("keras",)),
        ("JAX", ("jax",)),
        ("jaxlib", ("jaxlib",)),
    ):
        for name in names:
            try:
                out[label] = version(name)
                break
            except PackageNotFoundError:
                continue
    return out


def accelerator() -> str:
    """The GPU(s) ``nvidia-smi`` names, or "no GPU"."""
    try:
        names = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "no GPU"
    return "GPU: " + "; ".join(line.strip() for line in names.splitlines()) if names else "no GPU"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "sections",
        nargs="*",
        help="throughput, memory, quality, scoring [default: the first three]",
    )
    ap.add_argument(
        "--model",
        default="baseline-cnn",
        help="throughput, scoring: a built-in model [default: baseline-cnn]",
    )
    ap.add_argument("--samples", type=int, default=MILLION)
    ap.add_argument(
        "--repeats",
        type=int,
        default=2,
        help="rounds (throughput, scoring; memory: each round 1M then 20M)",
    )
    ap.add_argument("--seeds", type=int, default=3, help="quality: seeds per training method")
    ap.add_argument(
        "--strategies",
        nargs="+",
        choices=STRATEGIES,
        default=None,
        metavar="NAME",
        help=(
            f"throughput: which strategies to run, of {', '.join(STRATEGIES)} [default: all but "
            "the chunkfit-jax-dispatch/scan overrides; without TensorFlow, the JAX ones]"
        ),
    )
    ap.add_argument(
        "--engines",
        nargs="+",
        choices=list(MEMORY_ENGINES),
        default=list(MEMORY_ENGINES),
        metavar="NAME",
        help="memory: tensorflow, jax [default: both]",
    )
    ap.add_argument("--worker", nargs=3, metavar=("NAME", "STORE", "ARGS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    global MODEL  # the workers' model, set once from the command line
    MODEL = args.model
    sections = args.sections or ["throughput", "memory", "quality"]
    unknown = set(sections) - {"throughput", "memory", "quality", "scoring"}
    if unknown:
        ap.error(f"unknown section(s): {', '.join(sorted(unknown))}")
    command = " ".join(["python", "benchmarks/train.py", *sys.argv[1:]])
    versions = package_versions()
    if args.strategies is None:
        args.strategies = list(DEFAULT_STRATEGIES if "TensorFlow" in versions else JAX_ONLY)
    needs_tf = set(sections) - {"throughput"} or set(args.strategies) - set(JAX_ONLY)
    if "TensorFlow" not in versions and needs_tf:
        ap.error(
            "TensorFlow is not installed here: only the throughput section's JAX strategies run "
            f"({', '.join(JAX_ONLY)})"
        )
    header = [
        f"## `{command}`",
        "",
        (
            f"{os.cpu_count()} cores, {platform.machine()}, {cpu_name()}; {accelerator()}; Python "
            f"{platform.python_version()}, "
            f"{', '.join(f'{k} {v}' for k, v in versions.items())}; niceness {os.nice(0)}; "
            f"load average before: {os.getloadavg()[0]:.1f}"
        ),
        "",
    ]
    started = time.perf_counter()
    body: list[str] = []
    for name in sections:
        part = {
            "throughput": lambda: throughput(args.samples, args.repeats, tuple(args.strategies)),
            "memory": lambda: memory(args.repeats, tuple(args.engines)),
            "quality": lambda: quality(args.samples, args.seeds),
            "scoring": lambda: scoring(args.samples, args.repeats),
        }[name]()
        body += [*part, ""]
        print("\n".join(part) + "\n", flush=True)
    footer = [
        (
            f"Wall time {time.perf_counter() - started:,.0f} s; "
            f"load average after: {os.getloadavg()[0]:.1f}."
        ),
        "",
    ]
    text = "\n".join(header + body + footer)
    print(footer[0])
    previous = RESULTS.read_text() if RESULTS.exists() else "# Training benchmarks\n\n"
    RESULTS.write_text(previous.rstrip("\n") + "\n\n" + text)


if __name__ == "__main__":
    main()
