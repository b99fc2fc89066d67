"""Compute threads and compile mode, measured on this machine for this model before TensorFlow's
runtime starts.

TensorFlow fixes its thread pools when its runtime starts, so thread counts cannot be tried inside
one process the way ``--jit auto`` tries XLA (chunkfit.train.tensorflow.autotune). A rule fixed on
one machine was wrong on the next (one compute thread beat every core on one machine and lost on
another). So, when ``--compute-threads`` is not given:

- a measurement cached for this machine (its usable cores), TensorFlow version, model, shapes,
  compile mode measured and precision is used (``by: cache``);
- else, for a run long enough that measuring costs at most ``BUDGET_SHARE`` of it (at
  ``ASSUMED_RATE``; ``PROBE_SECONDS``), each candidate (``candidates``: every core, one thread, and
  on 2 cores or more each batch as two halves side by side, chunkfit.train.tensorflow.halves, where
  the model's layers allow it) is measured in a child of its own: a fork of this process made
  once TensorFlow is imported and before its runtime starts, so a child imports nothing again
  (importing TensorFlow costs more than the measurement) and starts the runtime with its own
  threads. The children build the model and compile chunkfit's train step side by side (compiling is
  not timed), without XLA under ``--jit auto`` (the run's own trial then chooses XLA or not, on the
  threads chosen here) and in the run's mode under ``--jit on|off``, on a block of the run's group
  size (chunkfit.train.tensorflow.threadprobe), then take turns timing bursts of
  ``PROBE_BATCHES`` batches (A B A B ...), so that a change in the machine's load hits every
  candidate alike. The median burst of each counts; another thread
  count than the rule's must beat it by ``MARGIN`` (children's timings flatter one thread against
  whole runs: a close call stays with the rule). The fastest candidate trains the run, and the
  choice is cached. Linux only: a fork of a process that imported TensorFlow is not safe on macOS;
- else, for a run too short to measure, a built-in model trains each batch in halves side by side
  (``short_rule``: the fastest constant-batch step wherever it was measured), another on every core;
- else, and for models a child cannot rebuild (a ``keras.Model`` object; ``module:function``, whose
  code chunkfit runs once only), the rule: TensorFlow's default of every core.

Each child times the step as the run trains it on a CPU: on windows the input pipeline gathered
(chunkfit.train.tensorflow.pipeline).

``--deterministic`` runs use the rule too: a fixed, recorded choice. The cache is a JSON file in
``$CHUNKFIT_CACHE_DIR`` (default ``~/.cache/chunkfit``); deleting it measures again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

from ..precision import current_precision
from ..probing import cpu_name, read_cache, write_cache
from ..steps import cache_dir
from .threadprobe import (
    ProbeChild,
    ProbeSpec,
    import_for_children,
    timed,
)
from .threads import usable_cores

# (compute threads, halves): TensorFlow's default of every core; one compute thread (with one
# inter-op thread); and, on 2 cores or more, each batch as two halves side by side on half the
# cores each (chunkfit.train.tensorflow.halves; for models whose layers allow it)
CANDIDATES = ((0, 1), (1, 1))
HALVES = 2
MARGIN = 1.05  # how much faster than the rule another thread count must be to be chosen
BUDGET_SHARE = 0.05  # of the run's estimated length
# What a first measurement adds to a run's wall time, by the compile mode measured (True: XLA),
# as measured for baseline-cnn on a 2-core machine (benchmarks/ holds the method).
PROBE_SECONDS = {False: 1.9, True: 4.0}
ASSUMED_RATE = 50_000.0  # training windows/s for estimating a run's length (a fast model)
CACHE_FILE = "threads.json"
RULE = "the rule: every core"
SHORT_RULE = "the rule for built-in models: each batch in halves side by side"


@dataclasses.dataclass(frozen=True)
class ThreadChoice:
    """The compute threads a run starts TensorFlow with (None: the rule), why, what was measured
    (windows/s by ``"threads/mode"``), and the compile mode the measurement chose (None: not
    chosen)."""

    compute: int | None
    by: str
    windows_per_s: dict[str, float] | None = None
    jit: bool | None = None
    seconds: float | None = None
    halves: int = (
        1  # each batch as this many slices side by side (chunkfit.train.tensorflow.halves)
    )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"by": self.by}
        if self.halves > 1:
            out["halves"] = self.halves
        if self.windows_per_s:
            out["windows_per_s"] = self.windows_per_s
        if self.seconds is not None:
            out["seconds"] = self.seconds
        return out

    def describe(self, threads: dict[str, int]) -> str:
        """Part of the run's one line on how it trains."""
        n = threads.get("intra_op", 0)
        used = "every core" if n == 0 else "1 compute thread" if n == 1 else f"{n} compute threads"
        if self.halves > 1:
            used += f" for each of {self.halves} halves of every batch, side by side"
        timed = ""
        if self.windows_per_s:
            timed = (
                " ("
                + ", ".join(f"{_label(k)} {v:,.0f}" for k, v in self.windows_per_s.items())
                + " windows/s"
            )
            timed += f"; {self.seconds:.1f} s)" if self.seconds is not None else ")"
        return f"TensorFlow on {used}, chosen by {self.by}{timed}"


def _label(key: str) -> str:
    candidate, _, mode = key.partition("/")
    threads, _, halves = candidate.partition("x")
    who = "every core" if threads == "0" else f"{threads} thread" + ("s" if threads != "1" else "")
    if halves:
        who += f" x {halves} halves"
    return f"{who}{' ' + {'xla': 'XLA', 'graph': 'without XLA'}[mode] if mode else ''}"


def cache_path() -> Path:
    """The file of this machine's thread measurements (chunkfit.train.steps.cache_dir)."""
    return cache_dir() / CACHE_FILE


def probe_key(
    model: str,
    window: int,
    channels: int,
    classes: int,
    batch_size: int,
    jit: str = "auto",
    precision: str = "float32",
) -> str | None:
    """What a measurement depends on: machine (the cores this process may use), TensorFlow, model,
    shapes, the compile mode measured (``measured_mode``) and the precision the run trains in. None
    for a model a probe cannot rebuild."""
    from ..models import BUILTINS

    if model in BUILTINS:
        what = model
    elif model.endswith(".keras") and Path(model).is_file():
        what = "keras:" + hashlib.sha256(Path(model).read_bytes()).hexdigest()[:16]
    else:
        return None
    machine = (
        f"{cpu_name()}|{usable_cores()}|{platform.machine()}|tensorflow {_tensorflow_version()}"
    )
    shapes = f"{window}x{channels}->{classes}|batch {batch_size}"
    return f"{machine}|{what}|{shapes}|{measured_mode(jit)}|{precision}"


def measured_mode(jit: str) -> str:
    """The compile mode a measurement for ``--jit`` times: XLA under ``on``; the fused step without
    XLA under ``auto`` (the run's own trial then chooses XLA or not); the unfused step under
    ``off``."""
    return {"on": "xla", "off": "unfused"}.get(jit, "graph")


def _tensorflow_version() -> str:
    """TensorFlow's version without importing it (whichever of its distributions is installed)."""
    from importlib.metadata import PackageNotFoundError, version

    for name in ("tensorflow", "tensorflow-cpu", "tensorflow-macos", "tf-nightly"):
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return "unknown"


def choose_threads(
    compute_threads: int | None,
    model: Any,
    *,
    deterministic: bool,
    window: int,
    channels: int,
    classes: int,
    batch_size: int,
    run_windows: int,
    jit: str = "auto",
    group_samples: int = 0,
    probe_windows: int | None = None,
) -> ThreadChoice | ProbeSpec:
    """The compute threads for this run (see the module docstring), or the ``ProbeSpec`` to measure
    them with (``Probe``, started before TensorFlow is imported). ``run_windows``: the windows the
    run will train, all epochs together; ``group_samples``: the samples of one of its groups of
    blocks; ``probe_windows``: the fewest worth measuring for (default: where the measurement is
    ``BUDGET_SHARE`` of the run)."""
    if compute_threads is not None:
        return ThreadChoice(compute_threads, "--compute-threads")
    if deterministic:
        return ThreadChoice(None, f"--deterministic (a fixed choice: {RULE})")
    key = (
        probe_key(model, window, channels, classes, batch_size, jit, current_precision())
        if isinstance(model, str)
        else None
    )
    if key is None:
        return ThreadChoice(None, f"{RULE} (only built-in models and .keras files are measured)")
    cached = _read_cache().get(key)
    if cached is not None:
        rates = {str(k): float(v) for k, v in cached["windows_per_s"].items()}
        return ThreadChoice(
            int(cached["compute"]),
            f"cache ({cache_path()}, measured {cached['when']})",
            rates,
            cached.get("jit"),
            cached.get("seconds"),
            int(cached.get("halves", 1)),
        )
    if "tensorflow" in sys.modules:
        return ThreadChoice(
            None, f"{RULE} (TensorFlow was imported before the run, so none is measured)"
        )
    if not sys.platform.startswith("linux"):
        return ThreadChoice(None, f"{RULE} (threads are measured on Linux only)")
    xla = jit == "on"  # --jit auto leaves XLA to the run's own trial, on the threads chosen here
    least = (
        probe_windows
        if probe_windows is not None
        else int(PROBE_SECONDS[xla] / BUDGET_SHARE * ASSUMED_RATE)
    )
    if run_windows < least:
        return short_rule(
            model, f"a run of {run_windows:,} windows is too short to measure threads"
        )
    return ProbeSpec(
        model, window, channels, classes, batch_size, (xla,), group_samples, fuse=jit != "off"
    )


def short_rule(model: str, why: str) -> ThreadChoice:
    """The choice for a run too short to measure: a built-in model (both split) trains each batch in
    halves side by side on 2 cores or more, anything else on every core. Halves won clearly wherever
    they were measured (chunkfit.train.tensorflow.halves); where a measurement is cached or the
    run is long enough, the measurement decides instead. A .keras file's layers are not known before
    TensorFlow starts, so it takes every core."""
    from ..models import BUILTINS

    cores = usable_cores()
    if model in BUILTINS and cores >= HALVES:
        return ThreadChoice(max(1, cores // HALVES), f"{SHORT_RULE} ({why})", halves=HALVES)
    return ThreadChoice(None, f"{RULE} ({why})")


def measure(spec: ProbeSpec) -> ThreadChoice:
    """Measure ``spec`` now, in this process's children, and cache the fastest. Call it with
    TensorFlow imported and its runtime not started (``start_tensorflow``'s callable): each child is
    a fork of this process, so it starts TensorFlow with its own threads without importing it again.
    """
    t0 = time.perf_counter()
    children: list[ProbeChild] = []
    try:
        from ..models import unsafe_files_allowed

        import_for_children()
        unsafe = unsafe_files_allowed()
        # All build and compile at once (compiling is timed by no one); they take turns later.
        children.extend(ProbeChild.fork(c, h, spec, unsafe) for c, h in candidates())
        speeds = timed(children, spec)
    except OSError:  # no fork: out of processes or memory
        speeds = None
    finally:
        for child in children:
            child.stop()
    return _chosen(spec, speeds, round(time.perf_counter() - t0, 1))


def candidates() -> list[tuple[int, int]]:
    """The (compute threads, halves) measured on this machine (see ``CANDIDATES``)."""
    cores = usable_cores()
    return [*CANDIDATES, *([(max(1, cores // HALVES), HALVES)] if cores >= HALVES else [])]


def _chosen(spec: ProbeSpec, speeds: dict[str, float] | None, seconds: float) -> ThreadChoice:
    if speeds is None:
        return ThreadChoice(None, f"{RULE} (the measurement failed)")
    best = _fastest(speeds)
    candidate, _, mode = best.partition("/")
    compute, _, halves = candidate.partition("x")
    jit = mode == "xla" if len(spec.modes) > 1 else None
    entry = {
        "compute": int(compute),
        "halves": int(halves or 1),
        "windows_per_s": speeds,
        "jit": jit,
        "seconds": seconds,
        "when": time.strftime("%Y-%m-%d %H:%M"),
    }
    jit_flag = "on" if spec.modes == (True,) else "auto" if spec.fuse else "off"
    key = probe_key(
        spec.model,
        spec.window,
        spec.channels,
        spec.classes,
        spec.batch_size,
        jit_flag,
        current_precision(),
    )
    if key is not None:
        _write_cache(key, entry)
    return ThreadChoice(
        int(compute), "autotune (measured now)", speeds, jit, seconds, int(halves or 1)
    )


def _fastest(speeds: dict[str, float]) -> str:
    """The fastest ``"threads/mode"`` of ``speeds``; another thread count than the rule's (every
    core, "0") only when it beats the rule's best mode by ``MARGIN``: on a shared machine one
    thread's bursts moved more than every core's, so a close call stays with the rule."""
    best = max(speeds, key=lambda k: speeds[k])
    rule = max((k for k in speeds if k.startswith("0/")), key=lambda k: speeds[k], default=best)
    return best if speeds[best] >= MARGIN * speeds[rule] else rule


def _read_cache() -> dict[str, Any]:
    return read_cache(cache_path())


def _write_cache(key: str, entry: dict[str, Any]) -> None:
    write_cache(cache_path(), key, entry)


if __name__ == "__main__":  # measure and cache now (benchmarks/train.py: a later run's cache)
    from ..._quiet import import_tensorflow_quietly

    job = json.loads(sys.argv[1])
    spec = ProbeSpec(**{**job, "modes": tuple(job["modes"])})
    import_tensorflow_quietly(lambda tf: print(json.dumps(dataclasses.asdict(measure(spec)))))
