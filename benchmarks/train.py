"""Training throughput, memory and quality of chunkfit against the original question's reference.

    python benchmarks/train.py [throughput] [memory] [quality] [scoring] [--model NAME]
                               [--samples N] [--repeats R] [--seeds S] [--strategies NAME ...]
                               [--engines tensorflow|jax|default ...] [--quick]

Sections (throughput, memory and quality when none is named):

- throughput: on the original question's problem (synth store, window 104, batch 128, baseline-cnn,
  or the built-in model ``--model`` names, e.g. dilated-resnet with ``--samples 262144``), windows
  per second of training and peak RSS of (1) model.fit on the fully materialised float64 window
  array, (2) a keras.utils.PyDataset building batches on the fly, (J) Keras on the JAX backend
  (``KERAS_BACKEND=jax``, the bench extra's jax) with plain model.fit on materialised float32
  windows, (A) and (AJ) the tuned anchor: model.fit on materialised float32 windows on TensorFlow
  and on JAX with steps_per_execution 1, 32 and 256 and, on TensorFlow, XLA off and on, one row per
  candidate, each in a process of its own and timed in steady state (chunkfit.bench.anchor; the
  spe=1 rows without XLA are the plain fit), (3) chunkfit defaults, KERAS_BACKEND unset so that
  chunkfit picks the engine (its second epoch, after ``--jit auto``'s trial; each chunkfit run
  has an empty cache of its own, as on a machine chunkfit has not trained on), (3f) and (3j) on
  the TensorFlow and JAX engines by name, (3t) the same
  in a later run on this machine (the threads measurement made before it, untimed, and cached), (3b)
  chunkfit with steps_per_execution=1, (3d) chunkfit ``--jit off``, (4) the compute ceiling: the
  train step on one constant batch in one compiled loop, under TensorFlow's default threads, and
  (4c) the same with the step under XLA, (4e) with each batch as two halves side by side (half the
  cores each: chunkfit.train.tensorflow.halves). The ceilings run Keras's own train step, its
  metrics updated after every batch, as ``fit`` runs it; chunkfit's step updates Keras's own metrics
  once per compiled call (chunkfit.train.tensorflow.stepper), so it can pass them. (1b), (3c), (4b)
  and (4d) run on one compute thread, to show what the thread setting alone is worth. Each strategy
  runs in its own subprocess, in rounds so that machine noise hits all alike; the table shows
  medians and per-round ratios to (1), to the tuned anchor (the fastest (A)/(AJ) candidate) and to
  the ceiling (the fastest (4*) of either engine), and GFLOP/s with their share of the CPU's
  float32 peak (chunkfit.bench.flops: FLOPs per window counted from the model's layers).
- memory: chunkfit --chunk 200000 on a 20,000,000-sample synth store (one epoch) against the 1M
  store (its second epoch), on each engine ``--engines`` names (TensorFlow's, with (4), (4b), (4c)
  and (4e) run next to each size, JAX's, with (4j), and ``default``, the engine chunkfit picks),
  and whether its peak RSS at 20M stays under 1.5 GB.
- quality: on the balanced synth problem (about half the windows positive), validation accuracy
  after 3 epochs of chunkfit against model.fit on the materialised, fully shuffled windows of the
  same split, from the same initial weights, over several seeds (one run's accuracy moves by a
  point or two from epoch to epoch, so single runs cannot resolve a 1-point difference).
- scoring: windows per second and peak RSS of ``chunkfit evaluate`` (the API, every window of the
  store) and ``chunkfit predict`` (scores written to a zarr array), with chunkfit's defaults and on
  each engine by name, against Keras ``model.predict`` on the materialised float32 windows on
  TensorFlow and on JAX at batch 256, 1024 and 4096 (the best of them the anchor), with the same
  model (trained one epoch on a small store); chunkfit's timed from the call (loading the run and
  tracing included), Keras's after a warm-up per batch size.

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
SCORE_BATCHES = (256, 1024, 4096)  # Keras predict's batch, tuned
SCAN = 256  # steps per call of (4js): chunkfit's batches per element for baseline-cnn
MILLION = 1_049_344
LARGE = 20_000_000
STRATEGIES = (
    "reference",
    "reference-1t",
    "pydataset",
    "jax",
    "anchor-tf",
    "anchor-jax",
    "chunkfit",
    "chunkfit-cached",
    "chunkfit-tf",
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
    "anchor-jax",
    "chunkfit-jax",
    "chunkfit-jax-dispatch",
    "chunkfit-jax-scan",
    "ceiling-jax",
    "ceiling-jax-scan",
)
# The tuned anchor: one row per candidate (chunkfit.bench.anchor), each in a process of its own.
TUNED = {"anchor-tf": "tensorflow", "anchor-jax": "jax"}
CEILINGS = (
    "ceiling",
    "ceiling-1t",
    "ceiling-xla",
    "ceiling-xla-1t",
    "ceiling-halves",
    "ceiling-jax",
    "ceiling-jax-scan",
)
ON_JAX = (*JAX_ONLY, "score-jax", "score-evaluate-jax", "score-predict-jax")
# chunkfit's own defaults: KERAS_BACKEND left unset, so that chunkfit picks the engine; every other
# strategy names its backend.
DEFAULTS = ("chunkfit", "chunkfit-cached", "score-run", "score-evaluate", "score-predict")
QUICK = {"warmup": 0.5, "steady": 1.0, "ceiling_seconds": 3.0}  # --quick
FULL = {"warmup": 1.0, "steady": 4.0, "ceiling_seconds": 10.0}
TIMING = dict(FULL)  # set once from the command line
LABELS = {
    "reference": "(1) model.fit, materialised float64 windows (the original question)",
    "reference-1t": "(1b) the same on 1 compute thread",
    "pydataset": "(2) keras.utils.PyDataset, batches built on the fly",
    "jax": "(J) Keras on the JAX backend, plain model.fit on materialised float32 windows",
    "anchor-tf": "(A) Keras on TensorFlow, model.fit, materialised float32 windows",
    "anchor-jax": "(AJ) Keras on JAX, model.fit, materialised float32 windows",
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
    "chunkfit-tf": (
        "(3f) chunkfit on its TensorFlow engine (KERAS_BACKEND=tensorflow), defaults otherwise"
    ),
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
        "engine": run.get("engine"),
        "choice": run.get("choice"),
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
    seconds = args["timing"]["ceiling_seconds"]
    steps = max(50, min(4000, round(seconds * 20 / (time.perf_counter() - t0))))
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
        seconds = args["timing"]["ceiling_seconds"]
        steps = SCAN * max(2, min(64, round(seconds * 2 / (time.perf_counter() - t0))))
    else:

        def loop(state: Any, steps: int) -> Any:
            for _ in range(steps):
                state = step(state)
            return jax.block_until_ready(state)

        state = loop(state, 20)
        t0 = time.perf_counter()
        state = loop(state, 20)
        seconds = args["timing"]["ceiling_seconds"]
        steps = max(50, min(4000, round(seconds * 20 / (time.perf_counter() - t0))))
    t0 = time.perf_counter()
    loop(state, steps)
    return {"windows": steps * BATCH, "seconds": time.perf_counter() - t0}


def work_anchor(store: str, args: dict[str, Any]) -> dict[str, Any]:
    """One candidate of the tuned anchor (chunkfit.bench.anchor): model.fit on the materialised
    float32 windows, on the backend ``run`` set, timed in steady state."""
    import numpy as np

    from chunkfit import open_store
    from chunkfit.bench.anchor import anchor_model, candidate, materialise, measure
    from chunkfit.core.windows import any_event_labels

    if os.environ.get("KERAS_BACKEND") != "jax":
        from chunkfit.train.tensorflow.threads import start_tensorflow

        start_tensorflow(None)  # TensorFlow's default threads, as a Keras user has them
    with open_store(store) as s:
        signal = s.read(0, s.n_samples)[:, 0]
        labels = any_event_labels(np.arange(s.n_samples - WINDOW + 1), WINDOW, s.events)
    x, y = materialise(signal, WINDOW), np.eye(2, dtype=np.float32)[labels]
    del signal
    timing = args["timing"]
    row = measure(
        lambda c: anchor_model(args["model"], WINDOW, c),
        x,
        y,
        candidate(args["candidate"]),
        batch_size=BATCH,
        warmup=timing["warmup"],
        steady=timing["steady"],
    )
    # The peak from just before the model was built, the windows resident (chunkfit.bench.anchor)
    return {**row, "peak_rss": row["peak_rss_bytes"]}


def work_flops(store: str, args: dict[str, Any]) -> dict[str, Any]:
    """FLOPs per training window of the model (chunkfit.bench.flops)."""
    from chunkfit.bench.flops import count_flops
    from chunkfit.train.models import build_model

    flops = count_flops(build_model(args["model"], WINDOW, 1, 2))
    return {**flops.to_dict(), "windows": 0, "seconds": 0.0}


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
    """Keras ``model.predict`` on every window of ``store``, materialised as float32, at each batch
    size of SCORE_BATCHES (on the backend ``run`` set: TensorFlow, or JAX for score-jax). Each batch
    size is warmed up first on a slice with the same last-batch shape (tracing and compiling not
    timed), and its peak RSS counted from just before it (chunkfit.bench.anchor)."""
    import keras

    from chunkfit import open_store
    from chunkfit.bench.anchor import materialise, peak_rss, reset_peak_rss

    with open_store(store) as s:
        windows = materialise(s.read(0, s.n_samples)[:, 0], WINDOW)
    model = keras.saving.load_model(Path(args["run"]) / "model.keras", compile=False)
    rows = []
    for batch in SCORE_BATCHES:
        reset_peak_rss()
        model.predict(windows[: 2 * batch + len(windows) % batch], batch_size=batch, verbose=0)
        t0 = time.perf_counter()
        model.predict(windows, batch_size=batch, verbose=0)
        seconds = time.perf_counter() - t0
        rows.append(
            {
                "batch": batch,
                "windows": len(windows),
                "seconds": seconds,
                "windows_per_s": len(windows) / seconds,
                "peak_rss": peak_rss(),
            }
        )
    fastest = max(rows, key=lambda r: r["windows_per_s"])
    return {
        "windows": fastest["windows"],
        "seconds": fastest["seconds"],
        "batches": rows,
        "peak_rss": max(r["peak_rss"] for r in rows),
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
        windows = chunkfit.evaluate(args["run"], store)["windows"]
    else:
        with tempfile.TemporaryDirectory() as tmp:
            windows = chunkfit.predict(args["run"], store, Path(tmp) / "scores.zarr").windows
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
    "chunkfit-tf": work_chunkfit,
    "anchor-tf": work_anchor,
    "anchor-jax": work_anchor,
    "flops": work_flops,
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
    "score-evaluate-tf": lambda s, a: work_score_chunkfit(s, a, "evaluate"),
    "score-predict-tf": lambda s, a: work_score_chunkfit(s, a, "predict"),
    "score-predict-jax": lambda s, a: work_score_chunkfit(s, a, "predict"),
    "score-predict": lambda s, a: work_score_chunkfit(s, a, "predict"),
}


def worker(name: str, store: str, args_json: str) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # TensorFlow starts inside each strategy, so that its threads can still be set there.
    result = WORKERS[name](store, json.loads(args_json))
    result.setdefault("peak_rss", peak_rss())
    print(json.dumps(result))


def run(name: str, store: Path, **args: Any) -> dict[str, Any]:
    args.setdefault("model", MODEL)
    args.setdefault("timing", TIMING)
    cmd = [sys.executable, __file__, "--worker", name, str(store), json.dumps(args)]
    env = dict(os.environ)
    env.pop("KERAS_BACKEND", None)
    if name in ON_JAX:
        env["KERAS_BACKEND"] = "jax"
    elif name not in DEFAULTS:
        env["KERAS_BACKEND"] = "tensorflow"
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if proc.returncode != 0:
        sys.exit(f"worker {name} failed:\n{proc.stderr}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["windows_per_s"] = out["windows"] / out["seconds"] if out["seconds"] else float("nan")
    OUT.mkdir(exist_ok=True)
    with (OUT / "train-results.jsonl").open("a") as log:  # every result as it comes, raw
        log.write(json.dumps({"name": name, "store": str(store), "args": args, "out": out}) + "\n")
    return out


# -- sections --------------------------------------------------------------------------------------


def throughput(samples: int, repeats: int, strategies: tuple[str, ...] = STRATEGIES) -> list[str]:
    """Each strategy once per round (an anchor once per candidate), rounds interleaved; a table of
    medians and of per-round ratios to (1), the tuned anchor and the ceiling."""
    store = synth_store(samples)
    from chunkfit.bench.anchor import candidates

    jobs: list[tuple[str, str | None]] = []
    for s in strategies:
        if s in TUNED:
            jobs += [(s, c.key) for c in candidates(TUNED[s])]
        else:
            jobs.append((s, None))
    names = [row_name(s, key) for s, key in jobs]
    results: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    flops = run("flops", store)
    for _ in range(repeats):
        for (s, key), name in zip(jobs, names, strict=True):
            results[name].append(run(s, store, candidate=key) if key else run(s, store))
            print(f"  {name}: {results[name][-1]['windows_per_s']:,.0f} windows/s", file=sys.stderr)
    return throughput_table(samples, repeats, results, flops) + chunkfit_notes(results)


def row_name(strategy: str, key: str | None) -> str:
    return f"{strategy}:{key}" if key else strategy


def row_label(name: str) -> str:
    strategy, _, key = name.partition(":")
    if not key:
        return LABELS[strategy]
    from chunkfit.bench.anchor import candidate

    c = candidate(key)
    xla = ", XLA" if c.jit_compile and strategy == "anchor-tf" else ""
    plain = " (plain fit)" if c.steps_per_execution == 1 and not xla else ""
    return f"{LABELS[strategy]}, spe={c.steps_per_execution}{xla}{plain}"


def best_per_round(results: dict[str, list[dict[str, Any]]], group: list[str]) -> list[float]:
    """The fastest of ``group`` in each round (NaN-free)."""
    rounds = len(next(iter(results.values())))
    return [
        max(
            results[g][k]["windows_per_s"]
            for g in group
            if math.isfinite(results[g][k]["windows_per_s"])
        )
        for k in range(rounds)
    ]


def throughput_table(
    samples: int,
    repeats: int,
    results: dict[str, list[dict[str, Any]]],
    flops: dict[str, Any],
) -> list[str]:
    from chunkfit.bench.flops import cpu_peak

    speed = {s: statistics.median(r["windows_per_s"] for r in v) for s, v in results.items()}
    tuned = [n for n in results if n.partition(":")[0] in TUNED]
    ceilings = [n for n in results if n in CEILINGS]
    bases = {
        "reference": [r["windows_per_s"] for r in results["reference"]]
        if "reference" in results
        else None,
        "tuned": best_per_round(results, tuned) if tuned else None,
        "ceiling": best_per_round(results, ceilings) if ceilings else None,
    }

    def ratio(s: str, base: str) -> str:
        # Per round, so that load from other processes, which drifts over minutes, mostly cancels.
        if bases[base] is None:
            return "-"
        per_round = (a["windows_per_s"] / b for a, b in zip(results[s], bases[base], strict=True))
        return f"{statistics.median(per_round):.2f}x"

    peak = cpu_peak()
    per_window = flops["training_flops"]
    lines = [
        (
            f"### Throughput: {samples:,}-sample synth store, window {WINDOW}, batch {BATCH}, "
            f"{MODEL}; {repeats} round(s)"
        ),
        "",
        (
            "| strategy | windows/s (median) | vs (1) | vs tuned anchor | vs ceiling | GFLOP/s | "
            "of peak | per round | peak RSS MB |"
        ),
        "|---|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for s, rs in results.items():
        mem = max(r["peak_rss"] for r in rs) / 2**20
        rounds = ", ".join(f"{r['windows_per_s'] / 1000:.1f}k" for r in rs)
        gflops = speed[s] * per_window / 1e9
        share = f"{100 * gflops / peak.gflops:.1f}%" if peak else "-"
        lines.append(
            f"| {row_label(s)} | {speed[s]:,.0f} | {ratio(s, 'reference')} | "
            f"{ratio(s, 'tuned')} | {ratio(s, 'ceiling')} | {gflops:.1f} | {share} | {rounds} | "
            f"{mem:,.0f} |"
        )
    best_tuned = max(tuned, key=lambda n: speed[n]) if tuned else None
    best_ceiling = max(ceilings, key=lambda n: speed[n]) if ceilings else None
    lines += [
        "",
        (
            "Ratios are medians of the per-round ratios. The tuned anchor is the fastest candidate "
            "of (A)/(AJ) in each round, each timed in steady state (its first execution and "
            f"{TIMING['warmup']} s untimed, then {TIMING['steady']} s, at most an epoch, each; "
            f"fastest by median: {row_label(best_tuned) if best_tuned else '-'}); the ceiling is "
            "the fastest of the constant-batch ceilings (4*) in each round (fastest by median: "
            f"{LABELS[best_ceiling] if best_ceiling else '-'}). chunkfit's rows time a whole epoch "
            "(the second), everything inside it included."
        ),
        (
            f"FLOPs per training window: {per_window:,} ({flops['multiply_adds']:,} multiply-adds "
            "x 2 forward, x 3 for forward and backward; counted from the model's Conv/Dense "
            "layers by chunkfit.bench.flops"
            + (
                f"; not counted: {', '.join(flops['uncounted_layers'])}"
                if flops["uncounted_layers"]
                else ""
            )
            + "). "
            + (
                f"CPU float32 peak: {peak.formula()}; flags {', '.join(peak.flags)}."
                if peak
                else ""
            )
        ),
    ]
    return lines


def chunkfit_notes(results: dict[str, list[dict[str, Any]]]) -> list[str]:
    lines: list[str] = []
    for name in ("chunkfit", "chunkfit-cached"):
        if name in results:
            engines = [
                (
                    f"{c['engine']} ({c['engine_by']}), {c['precision']} ({c['precision_by']})"
                    if (c := r.get("choice"))
                    else str(r.get("engine"))
                )
                for r in results[name]
            ]
            label = LABELS[name].split(" ")[0]
            lines += [f"{label} trained on: {'; '.join(engines)}."]
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
    "default": ("chunkfit", (), "-"),  # the engine chunkfit picks; no ceiling run beside it
    "tensorflow": (
        "chunkfit-tf",
        ("ceiling", "ceiling-1t", "ceiling-xla", "ceiling-halves"),
        "(4)/(4b)/(4c)/(4e)",
    ),
    "jax": ("chunkfit-jax", ("ceiling-jax",), "(4j)"),
}


MEMORY_LIMIT = 1.5e9  # issue 47: chunkfit train at 20M samples stays under 1.5 GB


def memory(repeats: int, engines: tuple[str, ...] = ("tensorflow", "jax")) -> list[str]:
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
                ceiling = max((run(c, store)["windows_per_s"] for c in ceilings), default=math.nan)
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
        vs_ceiling = (
            f"{speed / ceiling:.2f}x {MEMORY_ENGINES[engine][2]}" if math.isfinite(ceiling) else "-"
        )
        lines.append(
            f"| {engine} | {r} | {samples:,} | {need:,.1f} GB | {speed:,.0f} | {vs:.2f}x | "
            f"{vs_ceiling} | {peak / 2**20:,.0f} |"
        )
    lines.append("")
    for engine, r, samples, _, _, peak in rows:
        if samples == LARGE:
            verdict = "under" if peak < MEMORY_LIMIT else "NOT under"
            lines.append(
                f"{engine}, round {r}: peak RSS at {LARGE:,} samples {peak / 1e9:.2f} GB, "
                f"{verdict} the 1.5 GB target."
            )
    for engine, rs in ratios.items():
        lines.append(
            f"{engine}: 20M vs 1M per round {', '.join(f'{x:.2f}x' for x in rs)}; median "
            f"{statistics.median(rs):.2f}x."
        )
    return lines


KERAS_SCORERS = {
    "score-keras": "Keras model.predict, materialised float32 windows (TensorFlow)",
    "score-jax": "Keras model.predict, materialised float32 windows, on the JAX backend",
}
SCORERS = {
    "score-evaluate": "chunkfit evaluate, defaults (every window, figures and events included)",
    "score-predict": "chunkfit predict, defaults (scores written to a zarr array, detections)",
    "score-evaluate-tf": "chunkfit evaluate on the TensorFlow engine (KERAS_BACKEND=tensorflow)",
    "score-predict-tf": "chunkfit predict on the TensorFlow engine",
    "score-evaluate-jax": "chunkfit evaluate on the JAX engine (KERAS_BACKEND=jax)",
    "score-predict-jax": "chunkfit predict on the JAX engine",
}


def scoring(samples: int, repeats: int) -> list[str]:
    """chunkfit evaluate and predict against the best Keras predict (either backend, batch tuned)
    on the materialised windows, in interleaved rounds."""
    small = synth_store(65_536)
    store = synth_store(samples)
    trained = OUT / f"score-run-{MODEL}"
    run("score-run", small, run=str(trained))
    results: dict[str, list[dict[str, Any]]] = {}
    for _ in range(repeats):
        for s in KERAS_SCORERS:
            got = run(s, store, run=str(trained))
            for b in got["batches"]:
                results.setdefault(f"{s}:{b['batch']}", []).append(b)
            print(f"  {s}: {got['windows_per_s']:,.0f} windows/s (best batch)", file=sys.stderr)
        for s in SCORERS:
            results.setdefault(s, []).append(run(s, store, run=str(trained)))
            print(f"  {s}: {results[s][-1]['windows_per_s']:,.0f} windows/s", file=sys.stderr)
    keras_rows = [n for n in results if n.partition(":")[0] in KERAS_SCORERS]
    best = best_per_round(results, keras_rows)

    def ratio(s: str) -> str:
        per_round = (a["windows_per_s"] / b for a, b in zip(results[s], best, strict=True))
        return f"{statistics.median(per_round):.2f}x"

    lines = [
        (
            f"### Scoring: every window of the {samples:,}-sample synth store, window {WINDOW}, "
            f"{MODEL}; {repeats} round(s)"
        ),
        "",
        "| scorer | windows/s (median) | vs best Keras predict | per round | peak RSS MB |",
        "|---|---:|---:|---|---:|",
    ]
    for s, rs in results.items():
        name, _, batch = s.partition(":")
        label = f"{KERAS_SCORERS[name]}, batch {batch}" if batch else SCORERS[s]
        rounds = ", ".join(f"{r['windows_per_s'] / 1000:.1f}k" for r in rs)
        speed = statistics.median(r["windows_per_s"] for r in rs)
        mem = max(r["peak_rss"] for r in rs) / 2**20
        lines.append(f"| {label} | {speed:,.0f} | {ratio(s)} | {rounds} | {mem:,.0f} |")
    lines += [
        "",
        (
            "The best Keras predict is the fastest Keras row in each round. chunkfit's rows are "
            "timed from the call, the backend imported (loading the run, tracing and compiling "
            "included), at chunkfit's default batch; model.predict's after the windows were "
            "materialised and each batch size warmed up (tracing and compiling not timed). A "
            "Keras row's peak RSS counts from just before its batch size, the windows resident."
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
        default=["tensorflow", "jax"],
        metavar="NAME",
        help=(
            "memory: tensorflow, jax, default (the engine chunkfit picks, no ceiling beside it) "
            "[default: tensorflow jax]"
        ),
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help=(
            f"shorter timings: anchor candidates {QUICK['warmup']} s warm-up and "
            f"{QUICK['steady']} s timed (else {FULL['warmup']} s and {FULL['steady']} s), "
            f"ceilings about {QUICK['ceiling_seconds']:.0f} s "
            f"(else {FULL['ceiling_seconds']:.0f} s)"
        ),
    )
    ap.add_argument("--worker", nargs=3, metavar=("NAME", "STORE", "ARGS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    global MODEL  # the workers' model, set once from the command line
    MODEL = args.model
    TIMING.update(QUICK if args.quick else FULL)
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
