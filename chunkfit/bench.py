"""``chunkfit bench``: the original question's comparison, measured on this machine.

Every strategy trains the same model (baseline-cnn) on the same synthetic problem for the same
number of epochs, each in its own subprocess so that peak memory is per strategy:

- ``materialised``: model.fit on the fully materialised float64 window array (the question's
  reference);
- ``pydataset`` / ``pydataset-workers``: keras.utils.PyDataset building batches on the fly (1 / 2
  threads);
- ``train-on-batch``: a Python loop of model.train_on_batch;
- ``timeseries``: keras.utils.timeseries_dataset_from_array;
- ``jax``: Keras on the JAX backend (``KERAS_BACKEND=jax``), plain model.fit on materialised
  float32 windows: what a Keras user who switches backend gets (needs jax: the bench extra);
- ``chunkfit``: chunkfit.fit with default settings, unweighted (``class_weight="none"``) as the
  others train;
- ``chunkfit-jax``: the same on chunkfit's JAX engine (``KERAS_BACKEND=jax``);
- ``ceiling``: the same train step on one constant batch inside one compiled loop (no input work);
- ``ceiling-xla``: the same with the step compiled by XLA;
- ``ceiling-jax``: Keras's stateless train step on the JAX backend, jitted, on one constant batch,
  one call per step (its fastest form on these CPUs);
- ``ceiling-jax-scan``: the same with 256 steps looped inside each call (``lax.scan``; its fastest
  form on a GPU, where a step is shorter than its dispatch: chunkfit's ``--jax-loop scan``).

Every strategy runs under TensorFlow's default threads (every core), chunkfit's rule for a run too
short to measure threads (chunkfit.train.tensorflow.threadtune).
Each row has its ratio to the reference and to the best anchor: the fastest of ``jax`` and the
ceilings that ran. ``jax`` is left out of the default strategies where jax is not installed.

Training time excludes building the model and the inputs; peak RSS includes everything.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from ._quiet import QUIET_LOG_LEVEL
from .errors import UsageError
from .train.record import peak_rss_bytes

STRATEGIES = (
    "materialised",
    "pydataset",
    "pydataset-workers",
    "train-on-batch",
    "timeseries",
    "jax",
    "chunkfit",
    "chunkfit-jax",
    "ceiling",
    "ceiling-xla",
    "ceiling-jax",
    "ceiling-jax-scan",
)
REFERENCE = "materialised"
ANCHORS = ("jax", "ceiling", "ceiling-xla", "ceiling-jax", "ceiling-jax-scan")
ON_JAX = (
    "jax",
    "chunkfit-jax",
    "ceiling-jax",
    "ceiling-jax-scan",
)  # strategies run with KERAS_BACKEND=jax (they need jax)
MIN_WINDOW = 12  # baseline-cnn: Conv1D(kernel 9) leaves window - 8 samples, MaxPooling1D(4) needs 4


@dataclasses.dataclass(frozen=True)
class BenchSpec:
    samples: int = 262_144
    window: int = 104
    batch_size: int = 128
    epochs: int = 1
    anomalies: int | None = None  # default: the question's 50,000 per 1,049,344 samples
    seed: int = 0

    def __post_init__(self) -> None:
        if self.window < MIN_WINDOW:
            raise UsageError(
                f"--window must be at least {MIN_WINDOW}, the shortest window baseline-cnn's "
                f"convolution and pooling fit in (received window={self.window})"
            )
        if self.samples < self.window + self.batch_size:
            raise UsageError(
                f"--samples must exceed --window + --batch-size (received samples={self.samples}, "
                f"window={self.window}, batch_size={self.batch_size})"
            )
        for name, value in (("--epochs", self.epochs), ("--batch-size", self.batch_size)):
            if value < 1:
                raise UsageError(f"{name} must be a positive integer (received {value})")

    @property
    def n_anomalies(self) -> int:
        if self.anomalies is not None:
            return self.anomalies
        return round(self.samples * 50_000 / 1_049_344)

    @property
    def n_windows(self) -> int:
        return self.samples - self.window + 1


# -- worker side: runs inside one subprocess -----------------------------------------------------


def _problem(spec: BenchSpec) -> tuple[np.ndarray, np.ndarray]:
    """The signal (float64) and the class of every window start (any-event rule)."""
    from .core.windows import any_event_labels
    from .synth import SynthSpec, anomaly_positions

    sspec = SynthSpec(samples=spec.samples, anomalies=spec.n_anomalies, seed=spec.seed)
    rng = np.random.default_rng([spec.seed, 2, 0])
    x = np.sin(np.arange(spec.samples, dtype=np.float64)) + rng.normal(0.0, 0.2, spec.samples)
    events = anomaly_positions(sspec)
    x[events] += 0.5
    starts = np.arange(spec.n_windows, dtype=np.int64)
    return x, any_event_labels(starts, spec.window, events)


def _model(spec: BenchSpec, steps_per_execution: int = 1) -> Any:
    import keras

    from .train.models import baseline_cnn, compile_model

    keras.utils.set_random_seed(spec.seed)
    model = baseline_cnn(spec.window, 1, 2)
    compile_model(
        model, optimizer=None, lr=None, loss=None, steps_per_execution=steps_per_execution
    )
    return model


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run_strategy(name: str, spec: BenchSpec) -> dict[str, Any]:
    """Train with one strategy in this process; returns the measured figures."""
    import keras

    build0 = time.perf_counter()
    x, y = _problem(spec)
    w, b = spec.window, spec.batch_size
    n = spec.n_windows
    onehot = np.eye(2, dtype=np.float32)[y]
    model = _model(spec)
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
        from .synth import SynthSpec, synth
        from .train.fit import fit

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
        "backend": keras.backend.backend(),
        "seconds": seconds,
        "windows": trained,
        "windows_per_s": trained / seconds,
        "cpu_utilisation": cpu / seconds,
        "peak_rss_bytes": peak,
        "final_loss": None if loss is None or not math.isfinite(loss) else float(loss),
        "setup_seconds": t0 - build0,
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


# -- driver side -----------------------------------------------------------------------------------


def bench(
    spec: BenchSpec,
    strategies: tuple[str, ...] = STRATEGIES,
    progress: Any = None,
    plot_path: str | Path | None = None,
) -> dict[str, Any]:
    """Run every strategy in its own subprocess; returns the table as a dict (and per-row ratios).

    With ``plot_path`` a bar chart is drawn there too; its folder is checked before any strategy
    runs.
    """
    from .score.runs import check_output_folder

    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown:
        raise UsageError(f"unknown strategy {unknown[0]!r} (strategies: {', '.join(STRATEGIES)})")
    wanting = [s for s in strategies if s in ON_JAX]
    if wanting and not has_jax():
        raise UsageError(
            f"strategy {wanting[0]} needs the jax package: pip install 'chunkfit[bench]', or leave "
            f"{', '.join(wanting)} out of --strategies"
        )
    if plot_path is not None:
        check_output_folder(Path(plot_path))
    rows = []
    for k, name in enumerate(strategies):
        if progress is not None:
            progress(k, len(strategies), name)
        cmd = [sys.executable, "-m", "chunkfit.bench", name, json.dumps(dataclasses.asdict(spec))]
        env = {
            **os.environ,
            "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", QUIET_LOG_LEVEL),
        }
        if name in ON_JAX:
            env["KERAS_BACKEND"] = "jax"
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"strategy {name} failed:\n{proc.stderr[-3000:]}")
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    ref = next((r for r in rows if r["strategy"] == REFERENCE), None)
    anchors = [r for r in rows if r["strategy"] in ANCHORS]
    best = max(anchors, key=lambda r: r["windows_per_s"]) if anchors else None
    for r in rows:
        r["ratio_to_reference"] = r["windows_per_s"] / ref["windows_per_s"] if ref else None
        r["ratio_to_best_anchor"] = r["windows_per_s"] / best["windows_per_s"] if best else None
    result = {
        "spec": dataclasses.asdict(spec),
        "cores": os.cpu_count(),
        "rows": rows,
        "best_anchor": best["strategy"] if best else None,
    }
    if plot_path is not None:
        plot(result, plot_path)
    return result


def format_table(result: dict[str, Any]) -> str:
    s = result["spec"]
    head = (
        f"{s['samples']:,} samples, window {s['window']}, batch {s['batch_size']}, {s['epochs']} "
        "epoch(s), "
        f"{result['cores']} cores; reference = model.fit on the materialised float64 array"
    )
    best = result.get("best_anchor")
    if best is not None:
        head += f"; best anchor = {best}, the fastest of {', '.join(ANCHORS)} that ran"
    columns = (
        "| strategy | seconds | windows/s | vs reference | vs best anchor | CPU cores busy | peak "
        "RSS MB | final loss |"
    )
    lines = [head, "", columns, "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        ratio = "" if r["ratio_to_reference"] is None else f"{r['ratio_to_reference']:.2f}x"
        anchor = (
            "" if r.get("ratio_to_best_anchor") is None else f"{r['ratio_to_best_anchor']:.2f}x"
        )
        loss = "n/a" if r["final_loss"] is None else f"{r['final_loss']:.4f}"
        lines.append(
            f"| {r['strategy']} | {r['seconds']:.1f} | {r['windows_per_s']:,.0f} | {ratio} | "
            f"{anchor} | {r['cpu_utilisation']:.2f} | {r['peak_rss_bytes'] / 1e6:,.0f} | {loss} |"
        )
    return "\n".join(lines)


def has_jax() -> bool:
    """Whether the jax package is installed (the ``jax`` strategy needs it)."""
    import importlib.util

    return importlib.util.find_spec("jax") is not None


def default_strategies() -> tuple[str, ...]:
    """Every strategy, those on JAX only where jax is installed."""
    return tuple(s for s in STRATEGIES if s not in ON_JAX or has_jax())


def plot(result: dict[str, Any], path: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    names = [r["strategy"] for r in rows]
    speed = [r["windows_per_s"] for r in rows]
    fig, ax = plt.subplots(figsize=(8, 0.55 * len(rows) + 1.5))
    colors = [
        "tab:orange" if n == "chunkfit" else "tab:gray" if n in ANCHORS else "tab:blue"
        for n in names
    ]
    ax.barh(names[::-1], speed[::-1], color=colors[::-1])
    for i, r in enumerate(rows[::-1]):
        ratio = r.get("ratio_to_reference")
        ax.text(
            r["windows_per_s"],
            i,
            f" {r['windows_per_s']:,.0f}" + (f" ({ratio:.2f}x)" if ratio else ""),
            va="center",
        )
    ax.set_xlabel("training windows per second (higher is better)")
    s = result["spec"]
    ax.set_title(
        f"baseline-cnn, {s['samples']:,} samples, window {s['window']}, batch {s['batch_size']}"
    )
    ax.set_xlim(0, max(speed) * 1.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _worker_main(argv: list[str]) -> None:
    from .train.tensorflow.threads import start_tensorflow

    name, raw = argv
    # chunkfit starts TensorFlow itself, with the threads it picks for this machine and model; the
    # others keep TensorFlow's defaults, as their users would (Keras on JAX runs without
    # TensorFlow).
    if name not in (*ON_JAX, "chunkfit"):
        start_tensorflow(None)
    print(json.dumps(run_strategy(name, BenchSpec(**json.loads(raw)))))


if __name__ == "__main__":
    _worker_main(sys.argv[1:])
