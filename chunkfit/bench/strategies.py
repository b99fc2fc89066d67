"""The strategies ``chunkfit bench`` compares, each trained in a process of its own.

``python -m chunkfit.bench.strategies NAME SPEC`` trains with strategy NAME on the problem SPEC
(``BenchSpec`` as JSON) and prints its figures as one JSON line; chunkfit.bench runs one such
process per strategy.
"""

from __future__ import annotations

import json
import math
import os
import resource
import sys
import tempfile
import time
from typing import Any

import numpy as np

from ..errors import UsageError
from ..train.record import peak_rss_bytes
from . import ON_JAX, STRATEGIES, TUNED, BenchSpec


def _problem(spec: BenchSpec) -> tuple[np.ndarray, np.ndarray]:
    """The signal (float64) and the class of every window start (any-event rule)."""
    from ..core.windows import any_event_labels
    from ..synth import SynthSpec, anomaly_positions

    sspec = SynthSpec(samples=spec.samples, anomalies=spec.n_anomalies, seed=spec.seed)
    rng = np.random.default_rng([spec.seed, 2, 0])
    x = np.sin(np.arange(spec.samples, dtype=np.float64)) + rng.normal(0.0, 0.2, spec.samples)
    events = anomaly_positions(sspec)
    x[events] += 0.5
    starts = np.arange(spec.n_windows, dtype=np.int64)
    return x, any_event_labels(starts, spec.window, events)


def _model(spec: BenchSpec, steps_per_execution: int = 1) -> Any:
    import keras

    from ..train.models import baseline_cnn, compile_model

    keras.utils.set_random_seed(spec.seed)
    model = baseline_cnn(spec.window, 1, 2)
    compile_model(
        model, optimizer=None, lr=None, loss=None, steps_per_execution=steps_per_execution
    )
    return model


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run_strategy(name: str, spec: BenchSpec, key: str | None = None) -> dict[str, Any]:
    """Train with one strategy in this process (one candidate ``key`` of a tuned anchor's);
    returns the measured figures."""
    import keras

    from .flops import count_flops

    build0 = time.perf_counter()
    x, y = _problem(spec)
    w, b = spec.window, spec.batch_size
    n = spec.n_windows
    onehot = np.eye(2, dtype=np.float32)[y]
    model = _model(spec)
    flops = count_flops(model).per_training_window
    if name in TUNED:
        return {**_tuned(name, spec, key, x, onehot), "flops_per_window": flops}
    trained = n * spec.epochs
    loss: float | None = None
    store_dir = None
    if name in ("materialised", "jax"):
        xs = np.lib.stride_tricks.sliding_window_view(x, w)[:, :, None].copy()  # float64, as asked
        ys = onehot.astype(np.float64)
        if name == "jax":  # the backend's own fast path: float32
            assert keras.backend.backend() == "jax", keras.backend.backend()
            xs, ys = xs.astype(np.float32), ys.astype(np.float32)
        t0, c0 = time.perf_counter(), _cpu()
        hist = model.fit(xs, ys, batch_size=b, epochs=spec.epochs, shuffle=True, verbose=0)
        loss = hist.history["loss"][-1]
    elif name in ("pydataset", "pydataset-workers"):
        data = _WindowBatches(
            x, onehot, w, b, spec.seed, workers=2 if name.endswith("workers") else 1
        )
        t0, c0 = time.perf_counter(), _cpu()
        hist = model.fit(data, epochs=spec.epochs, verbose=0)
        loss = hist.history["loss"][-1]
    elif name == "train-on-batch":
        rng = np.random.default_rng(spec.seed)
        span = np.arange(w)
        t0, c0 = time.perf_counter(), _cpu()
        for _ in range(spec.epochs):
            order = rng.permutation(n)
            for i in range(0, n, b):
                idx = order[i : i + b]
                out = model.train_on_batch(
                    x[idx[:, None] + span][:, :, None], onehot[idx], return_dict=True
                )
            loss = float(out["loss"])
    elif name == "timeseries":
        ds = keras.utils.timeseries_dataset_from_array(
            x[:, None].astype(np.float32),
            onehot,
            sequence_length=w,
            batch_size=b,
            shuffle=True,
            seed=spec.seed,
        )
        t0, c0 = time.perf_counter(), _cpu()
        hist = model.fit(ds, epochs=spec.epochs, verbose=0)
        loss = hist.history["loss"][-1]
    elif name in ("chunkfit", "chunkfit-jax"):
        from ..synth import SynthSpec, synth
        from ..train.fit import fit

        store_dir = tempfile.TemporaryDirectory(prefix="chunkfit-bench-")
        store = os.path.join(store_dir.name, "synth.zarr")
        synth(store, SynthSpec(samples=spec.samples, anomalies=spec.n_anomalies, seed=spec.seed))
        # The model is built and compiled outside the timing, as for the other strategies;
        # fit() applies chunkfit's default steps_per_execution to it. Unweighted, as the others
        # train: class 0 is the rare one here, and --class-weight auto would weigh it, and the loss,
        # up.
        t0, c0 = time.perf_counter(), _cpu()
        hist = fit(
            model,
            store,
            window=w,
            batch_size=b,
            epochs=spec.epochs,
            validation=0.0,
            seed=spec.seed,
            class_weight="none",
        )
        loss = hist.history["loss"][-1]
    elif name in ("ceiling", "ceiling-xla"):
        model = _model(spec)
        loss = _ceiling(model, x, onehot, spec, xla=name == "ceiling-xla")
        t0, c0 = _ceiling_start
    elif name in ("ceiling-jax", "ceiling-jax-scan"):
        model = _model(spec)
        loss = _ceiling_jax(model, x, onehot, spec, scan=name == "ceiling-jax-scan")
        t0, c0 = _ceiling_start
    else:
        raise UsageError(f"unknown strategy {name!r} (strategies: {', '.join(STRATEGIES)})")
    seconds = time.perf_counter() - t0
    cpu = _cpu() - c0
    if store_dir is not None:
        store_dir.cleanup()
    peak = peak_rss_bytes()
    return {
        "strategy": name,
        "candidate": None,
        "backend": keras.backend.backend(),
        "seconds": seconds,
        "windows": trained,
        "windows_per_s": trained / seconds,
        "cpu_utilisation": cpu / seconds,
        "peak_rss_bytes": peak,
        "final_loss": None if loss is None or not math.isfinite(loss) else float(loss),
        "setup_seconds": t0 - build0,
        "flops_per_window": flops,
    }


def _tuned(
    name: str, spec: BenchSpec, key: str | None, x: np.ndarray, onehot: np.ndarray
) -> dict[str, Any]:
    """One candidate of the tuned anchor (chunkfit.bench.anchor) on materialised float32 windows,
    timed in steady state."""
    import keras

    from .anchor import anchor_model, candidate, materialise, measure

    backend = name.removeprefix("anchor-")
    assert keras.backend.backend() == backend, (keras.backend.backend(), backend)
    if key is None:
        raise UsageError(f"strategy {name} runs one candidate per process: name it")
    setup0 = time.perf_counter()
    xs = materialise(x, spec.window)
    row = measure(
        lambda c: anchor_model("baseline-cnn", spec.window, c, spec.seed),
        xs,
        onehot,
        candidate(key),
        batch_size=spec.batch_size,
        warmup=spec.warmup_seconds,
        steady=spec.steady_seconds,
    )
    loss = row["final_loss"]
    return {
        "strategy": name,
        "candidate": key,
        "backend": backend,
        "seconds": row["seconds"],
        "windows": row["windows"],
        "windows_per_s": row["windows_per_s"],
        "cpu_utilisation": row["cpu_utilisation"],
        "peak_rss_bytes": row["peak_rss_bytes"],
        "final_loss": None if loss is None or not math.isfinite(loss) else float(loss),
        "setup_seconds": time.perf_counter() - setup0 - row["seconds"],
    }


_ceiling_start: tuple[float, float] = (0.0, 0.0)


def _ceiling(model: Any, x: np.ndarray, onehot: np.ndarray, spec: BenchSpec, xla: bool) -> float:
    """The compiled train step on one constant batch, ``steps`` times inside one tf.function; with
    ``xla`` the step is compiled by XLA (inside the plain loop, as chunkfit compiles it)."""
    global _ceiling_start
    import tensorflow as tf

    w, b = spec.window, spec.batch_size
    xb = tf.constant(
        np.lib.stride_tricks.sliding_window_view(x[: b + w - 1], w)[:b, :, None], tf.float32
    )
    yb = tf.constant(onehot[:b])
    steps = math.ceil(spec.n_windows / b) * spec.epochs
    step = tf.function(model.train_step, jit_compile=True) if xla else model.train_step

    @tf.function
    def loop(n: tf.Tensor) -> Any:
        logs = step((xb, yb))
        for _ in tf.range(n - 1):
            logs = step((xb, yb))
        return logs["loss"]

    loop(tf.constant(2))  # trace and warm up outside the timing
    _ceiling_start = (time.perf_counter(), _cpu())
    return float(loop(tf.constant(steps)))


def _ceiling_jax(
    model: Any, x: np.ndarray, onehot: np.ndarray, spec: BenchSpec, scan: bool
) -> float:
    """Keras's stateless train step on the JAX backend, jitted, on one constant batch: the JAX
    engine's step without its gather, one call per step, or with ``scan`` up to SCAN steps per call
    (the rest one call each; fewer per call when the run has fewer steps)."""
    global _ceiling_start
    import jax

    assert model.optimizer is not None
    w, b = spec.window, spec.batch_size
    xb = jax.device_put(
        np.lib.stride_tricks.sliding_window_view(x[: b + w - 1], w)[:b, :, None].astype(np.float32)
    )
    yb = jax.device_put(onehot[:b])
    model.fit(
        np.asarray(xb), np.asarray(yb), batch_size=b, verbose=0
    )  # builds the optimizer and metrics
    state = (
        [v.value for v in model.trainable_variables],
        [v.value for v in model.non_trainable_variables],
        [v.value for v in model.optimizer.variables],
        [v.value for v in model.metrics_variables],
    )
    step = jax.jit(lambda s: model.train_step(s, (xb, yb)), donate_argnums=0)
    steps = math.ceil(spec.n_windows / b) * spec.epochs
    size = min(SCAN, steps)
    looped, n_loops = None, steps // size if scan else 0

    def body(s: Any, _: Any) -> tuple[Any, Any]:
        logs, s = model.train_step(s, (xb, yb))
        return s, logs["loss"]

    if n_loops:
        looped = jax.jit(lambda s: jax.lax.scan(body, s, None, length=size), donate_argnums=0)
        state, _ = looped(state)  # compile and warm up outside the timing
    logs, state = step(state)
    jax.block_until_ready(logs)
    _ceiling_start = (time.perf_counter(), _cpu())
    for _ in range(n_loops):
        state, losses = looped(state)  # type: ignore[misc]
        logs = {"loss": losses[-1]}
    for _ in range(steps - n_loops * size):
        logs, state = step(state)
    return float(logs["loss"])


SCAN = 256  # ceiling-jax-scan's steps per call: the JAX engine's element for baseline-cnn


class _WindowBatches:
    """A keras.utils.PyDataset yielding shuffled batches cut from the signal on the fly."""

    def __new__(
        cls, x: np.ndarray, onehot: np.ndarray, window: int, batch: int, seed: int, workers: int
    ) -> Any:
        import keras

        class WindowBatches(keras.utils.PyDataset):
            def __init__(self) -> None:
                super().__init__(workers=workers, use_multiprocessing=False, max_queue_size=16)
                self.span = np.arange(window)
                self.rng = np.random.default_rng(seed)
                self.order = self.rng.permutation(x.size - window + 1)

            def __len__(self) -> int:
                return math.ceil(self.order.size / batch)

            def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
                idx = self.order[i * batch : (i + 1) * batch]
                return x[idx[:, None] + self.span][:, :, None], onehot[idx]

            def on_epoch_end(self) -> None:
                self.order = self.rng.permutation(self.order.size)

        return WindowBatches()


def _worker_main(argv: list[str]) -> None:
    from ..train.tensorflow.threads import start_tensorflow

    name, raw, *key = argv
    # chunkfit starts TensorFlow itself, with the threads it picks for this machine and model; the
    # others keep TensorFlow's defaults, as their users would (Keras on JAX runs without
    # TensorFlow).
    if name not in (*ON_JAX, "chunkfit"):
        start_tensorflow(None)
    print(json.dumps(run_strategy(name, BenchSpec(**json.loads(raw)), *key)))


if __name__ == "__main__":
    _worker_main(sys.argv[1:])
