"""``chunkfit bench``: the original question's comparison, measured on this machine.

Every strategy trains the same model (baseline-cnn) on the same synthetic problem for the same
number of epochs, each in its own subprocess (chunkfit.bench.strategies) so that peak memory is
per strategy:

- ``materialised``: model.fit on the fully materialised float64 window array (the question's
  reference);
- ``pydataset`` / ``pydataset-workers``: keras.utils.PyDataset building batches on the fly (1 / 2
  threads);
- ``train-on-batch``: a Python loop of model.train_on_batch;
- ``timeseries``: keras.utils.timeseries_dataset_from_array;
- ``jax``: Keras on the JAX backend (``KERAS_BACKEND=jax``), plain model.fit on materialised
  float32 windows: what a Keras user who switches backend gets (needs jax: the bench extra);
- ``anchor-tensorflow`` / ``anchor-jax``: the tuned anchor (chunkfit.bench.anchor), model.fit on
  materialised float32 windows with steps_per_execution 1, 32 and 256 and, on TensorFlow, XLA off
  and on, each candidate in a process of its own and timed in steady state (a row each);
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
Each row has its ratio to the reference, to the tuned anchor (the fastest anchor candidate that
ran) and to the ceiling (the fastest ceiling that ran), and its achieved GFLOP/s with their share
of the CPU's float32 peak (chunkfit.bench.flops). The strategies on JAX are left out of the
default strategies where jax is not installed.

Training time excludes building the model and the inputs (and an anchor candidate's warm-up); peak
RSS includes everything.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .._quiet import QUIET_LOG_LEVEL
from ..errors import MissingExtraError, UsageError
from .anchor import candidates
from .flops import achieved, cpu_peak

STRATEGIES = (
    "materialised",
    "pydataset",
    "pydataset-workers",
    "train-on-batch",
    "timeseries",
    "jax",
    "anchor-tensorflow",
    "anchor-jax",
    "chunkfit",
    "chunkfit-jax",
    "ceiling",
    "ceiling-xla",
    "ceiling-jax",
    "ceiling-jax-scan",
)
REFERENCE = "materialised"
TUNED = ("anchor-tensorflow", "anchor-jax")  # one row per candidate: chunkfit.bench.anchor
CEILINGS = ("ceiling", "ceiling-xla", "ceiling-jax", "ceiling-jax-scan")
ON_JAX = (
    "jax",
    "anchor-jax",
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
    warmup_seconds: float = 1.0  # an anchor candidate's untimed start (at most an epoch's windows)
    steady_seconds: float = 3.0  # and its timed steady state (at most an epoch's windows)

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
    from ..score.runs import check_output_folder

    for name in strategies:
        jobs(name)  # refuses an unknown name before anything runs
    wanting = [s for s in strategies if s.partition(":")[0] in ON_JAX]
    if wanting and not has_jax():
        raise MissingExtraError(
            f"strategy {wanting[0]} needs the jax package: pip install 'chunkfit[bench]', or leave "
            f"{', '.join(wanting)} out of --strategies"
        )
    if plot_path is not None:
        check_output_folder(Path(plot_path))
    rows = []
    for k, name in enumerate(strategies):
        if progress is not None:
            progress(k, len(strategies), name)
        rows += [_run(strategy, spec, key) for strategy, key in jobs(name)]
    ref = next((r for r in rows if r["strategy"] == REFERENCE), None)
    tuned = _fastest(r for r in rows if r["strategy"] in TUNED)
    ceiling = _fastest(r for r in rows if r["strategy"] in CEILINGS)
    peak = cpu_peak()
    for r in rows:
        r["ratio_to_reference"] = r["windows_per_s"] / ref["windows_per_s"] if ref else None
        r["ratio_to_tuned_anchor"] = r["windows_per_s"] / tuned["windows_per_s"] if tuned else None
        r["ratio_to_ceiling"] = r["windows_per_s"] / ceiling["windows_per_s"] if ceiling else None
        r.update(achieved(r["windows_per_s"], r["flops_per_window"], peak))
    result = {
        "spec": dataclasses.asdict(spec),
        "cores": os.cpu_count(),
        "rows": rows,
        "tuned_anchor": _label(tuned) if tuned else None,
        "ceiling": ceiling["strategy"] if ceiling else None,
        "flops_per_window": rows[0]["flops_per_window"] if rows else None,
        "cpu_peak": peak.to_dict() if peak else None,
    }
    if plot_path is not None:
        plot(result, plot_path)
    return result


def jobs(name: str) -> list[tuple[str, str | None]]:
    """The subprocesses one ``--strategies`` entry runs: (strategy, anchor candidate or None).

    An anchor runs every candidate of its backend; ``anchor-tensorflow:spe32-xla`` only that one.
    """
    strategy, _, key = name.partition(":")
    if strategy not in STRATEGIES:
        raise UsageError(f"unknown strategy {name!r} (strategies: {', '.join(STRATEGIES)})")
    if strategy not in TUNED:
        if key:
            raise UsageError(f"strategy {strategy} has no candidates (received {name!r})")
        return [(strategy, None)]
    keys = [c.key for c in candidates(strategy.removeprefix("anchor-"))]
    if key and key not in keys:
        raise UsageError(f"unknown candidate {key!r} of {strategy} (candidates: {', '.join(keys)})")
    return [(strategy, k) for k in ([key] if key else keys)]


def _run(name: str, spec: BenchSpec, key: str | None = None) -> dict[str, Any]:
    """One strategy (one anchor candidate) in a subprocess of its own; its JSON row."""
    cmd = [
        sys.executable,
        "-m",
        "chunkfit.bench.strategies",
        name,
        json.dumps(dataclasses.asdict(spec)),
        *([key] if key is not None else []),
    ]
    env = {
        **os.environ,
        "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", QUIET_LOG_LEVEL),
    }
    if name in ON_JAX:
        env["KERAS_BACKEND"] = "jax"
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"strategy {name} failed:\n{proc.stderr[-3000:]}")
    row: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return row


def _fastest(rows: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    timed = [r for r in rows if math.isfinite(r["windows_per_s"])]
    return max(timed, key=lambda r: r["windows_per_s"]) if timed else None


def _label(row: dict[str, Any]) -> str:
    """A row's name in the table: the strategy, and an anchor candidate's settings."""
    return f"{row['strategy']} {row['candidate']}" if row.get("candidate") else row["strategy"]


def _times(x: float | None) -> str:
    return "" if x is None else f"{x:.2f}x"


def format_table(result: dict[str, Any]) -> str:
    s = result["spec"]
    head = (
        f"{s['samples']:,} samples, window {s['window']}, batch {s['batch_size']}, {s['epochs']} "
        "epoch(s), "
        f"{result['cores']} cores; reference = model.fit on the materialised float64 array"
    )
    if result.get("tuned_anchor") is not None:
        head += f"; tuned anchor = {result['tuned_anchor']}, the fastest anchor candidate"
    if result.get("ceiling") is not None:
        head += f"; ceiling = {result['ceiling']}, the fastest ceiling that ran"
    columns = (
        "| strategy | seconds | windows/s | vs reference | vs tuned anchor | vs ceiling | GFLOP/s "
        "| of peak | CPU cores busy | peak RSS MB | final loss |"
    )
    lines = [head, "", columns, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        loss = "n/a" if r["final_loss"] is None else f"{r['final_loss']:.4f}"
        share = "" if r["peak_share"] is None else f"{100 * r['peak_share']:.1f}%"
        busy = "" if r["cpu_utilisation"] is None else f"{r['cpu_utilisation']:.2f}"
        lines.append(
            f"| {_label(r)} | {r['seconds']:.1f} | {r['windows_per_s']:,.0f} | "
            f"{_times(r['ratio_to_reference'])} | {_times(r['ratio_to_tuned_anchor'])} | "
            f"{_times(r['ratio_to_ceiling'])} | {r['gflop_per_s']:.1f} | {share} | {busy} | "
            f"{r['peak_rss_bytes'] / 1e6:,.0f} | {loss} |"
        )
    peak, flops = result.get("cpu_peak"), result.get("flops_per_window")
    if flops is not None:
        lines += [
            "",
            f"FLOPs per training window: {flops:,} (multiply-adds x 2, x 3 for forward and "
            "backward; chunkfit.bench.flops)."
            + (f" CPU float32 peak: {peak['formula']}." if peak else ""),
        ]
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
    names = [_label(r) for r in rows]
    speed = [r["windows_per_s"] for r in rows]
    fig, ax = plt.subplots(figsize=(8, 0.55 * len(rows) + 1.5))
    colors = [
        "tab:orange"
        if n.startswith("chunkfit")
        else "tab:gray"
        if n.startswith(TUNED + CEILINGS)
        else "tab:blue"
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
