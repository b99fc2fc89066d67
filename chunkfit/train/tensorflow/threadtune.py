"""Compute threads and compile mode, measured on this machine for this model before TensorFlow's
runtime starts.

TensorFlow fixes its thread pools when its runtime starts, so thread counts cannot be tried inside
one process the way ``--jit auto`` tries XLA (chunkfit.train.tensorflow.autotune). A rule fixed on
one machine was wrong on the next (one compute thread beat every core on one machine and lost on
another). So, when ``--compute-threads`` is not given:

- a measurement cached for this machine, TensorFlow version, model and shapes is used
  (``by: cache``);
- else, for a run long enough that measuring costs at most ``BUDGET_SHARE`` of it (at
  ``ASSUMED_RATE``; ``PROBE_SECONDS``), each candidate (``candidates``: every core, one thread, and
  on 2 cores or more each batch as two halves side by side, chunkfit.train.tensorflow.halves, where
  the model's layers allow it) is measured in a child of its own: a fork of this process made
  once TensorFlow is imported and before its runtime starts, so a child imports nothing again
  (importing TensorFlow costs more than the measurement) and starts the runtime with its own
  threads. The children build the model and compile chunkfit's train step side by side (compiling is
  not timed), without XLA under ``--jit auto`` (the run's own trial then chooses XLA or not, on the
  threads chosen here) and in the run's mode under ``--jit on|off``, on a block of the run's group
  size, then take turns timing bursts of ``PROBE_BATCHES`` batches (A B A B ...), so that a change
  in the machine's load hits every candidate alike. The median burst of each counts; another thread
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
import os
import platform
import select
import signal
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from ..steps import cache_dir
from .threads import usable_cores

# (compute threads, halves): TensorFlow's default of every core; one compute thread (with one
# inter-op thread); and, on 2 cores or more, each batch as two halves side by side on half the
# cores each (chunkfit.train.tensorflow.halves; for models whose layers allow it)
CANDIDATES = ((0, 1), (1, 1))
HALVES = 2
PROBE_BATCHES = 32  # batches per timed burst
ROUNDS = 4  # bursts per candidate and compile mode, at most
TIMING_SECONDS = 0.5  # past it (a slow model's bursts), no more rounds than two
MARGIN = 1.05  # how much faster than the rule another thread count must be to be chosen
PROBE_TIMEOUT = 120.0  # seconds for the whole measurement; past it the rule applies
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


@dataclasses.dataclass(frozen=True)
class ProbeSpec:
    """What a measuring child builds and trains: ``model`` (a built-in name or a .keras file), the
    run's shapes and batch size, the compile modes to time (True: XLA), and how many samples a
    group of the run holds (the child draws its windows from as many; gathering them is not timed,
    as the run's input pipeline copies them beside the step)."""

    model: str
    window: int
    channels: int
    classes: int
    batch_size: int
    modes: tuple[bool, ...]
    samples: int = 0
    fuse: bool = True


def cache_path() -> Path:
    """The file of this machine's thread measurements (chunkfit.train.steps.cache_dir)."""
    return cache_dir() / CACHE_FILE


def probe_key(model: str, window: int, channels: int, classes: int, batch_size: int) -> str | None:
    """What a measurement depends on: machine, TensorFlow, model and shapes. None for a model a
    probe cannot rebuild."""
    from ..models import BUILTINS

    if model in BUILTINS:
        what = model
    elif model.endswith(".keras") and Path(model).is_file():
        what = "keras:" + hashlib.sha256(Path(model).read_bytes()).hexdigest()[:16]
    else:
        return None
    machine = (
        f"{_cpu_name()}|{os.cpu_count()}|{platform.machine()}|tensorflow {_tensorflow_version()}"
    )
    return f"{machine}|{what}|{window}x{channels}->{classes}|batch {batch_size}"


def _tensorflow_version() -> str:
    """TensorFlow's version without importing it (whichever of its distributions is installed)."""
    from importlib.metadata import PackageNotFoundError, version

    for name in ("tensorflow", "tensorflow-cpu", "tensorflow-macos", "tf-nightly"):
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return "unknown"


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown cpu"


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
        probe_key(model, window, channels, classes, batch_size) if isinstance(model, str) else None
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
    children: list[_Child] = []
    try:
        from ..models import unsafe_files_allowed

        _import_for_children()
        unsafe = unsafe_files_allowed()
        # All build and compile at once (compiling is timed by no one); they take turns later.
        children.extend(_Child.fork(c, h, spec, unsafe) for c, h in candidates())
        speeds = _timed(children, spec)
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


def _key(compute: int, halves: int) -> str:
    """A candidate's name in ``windows_per_s``: ``"1"``, or ``"1x2"`` for one thread on each of two
    halves."""
    return f"{compute}x{halves}" if halves > 1 else str(compute)


def _import_for_children() -> None:
    """What a child needs, imported once here (this process needs it next anyway), not in each
    child."""
    from .. import models  # noqa: F401  (Keras)
    from . import halves, pipeline, stepper  # noqa: F401


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
    key = probe_key(spec.model, spec.window, spec.channels, spec.classes, spec.batch_size)
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


def _timed(children: list[_Child], spec: ProbeSpec) -> dict[str, float] | None:
    """windows/s of each child and mode, ``"threads/xla"`` or ``"threads/graph"``: the median of its
    bursts, the children taking turns; None if one failed."""
    deadline = time.monotonic() + PROBE_TIMEOUT
    ready = [child.ask("ready", deadline) for child in children]
    if any(answer is None for answer in ready):
        return None
    children = [
        child for child, answer in zip(children, ready, strict=True) if answer == 0
    ]  # -1: does not apply
    bursts: dict[str, list[float]] = {}
    timing = time.monotonic()
    for done in range(ROUNDS):
        if done >= 2 and time.monotonic() - timing > TIMING_SECONDS:  # a slow model: fewer rounds
            break
        for mode in spec.modes:
            for child in children:
                seconds = child.ask("xla" if mode else "graph", deadline)
                if seconds is None:
                    return None
                key = f"{_key(child.compute, child.halves)}/{'xla' if mode else 'graph'}"
                bursts.setdefault(key, []).append(PROBE_BATCHES * spec.batch_size / seconds)
    return {key: round(statistics.median(rates), 1) for key, rates in bursts.items()}


class _Child:
    """A forked child measuring one candidate; it answers one line per request on its pipe."""

    def __init__(self, pid: int, requests: int, answers: int, compute: int, halves: int) -> None:
        self.pid, self.requests, self.answers, self.compute, self.halves = (
            pid,
            requests,
            answers,
            compute,
            halves,
        )
        self.buffer = b""

    @classmethod
    def fork(cls, compute: int, halves: int, spec: ProbeSpec, unsafe: bool) -> _Child:
        requests, answers = os.pipe(), os.pipe()
        parent = os.getpid()
        for stream in (
            sys.stdout,
            sys.stderr,
        ):  # what is buffered here is written once, by this process
            stream.flush()
        with (
            warnings.catch_warnings()
        ):  # Python 3.12+: fork with threads running (TensorFlow's, idle)
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # the child: it never returns from here
            code = 1
            try:
                os.close(requests[1])
                os.close(answers[0])
                _detach(parent)
                _serve(compute, halves, spec, unsafe, requests[0], answers[1])
                code = 0
            finally:
                os._exit(code)
        os.close(requests[0])
        os.close(answers[1])
        return cls(pid, requests[1], answers[0], compute, halves)

    def ask(self, request: str, deadline: float) -> float | None:
        """Send ``request``; its answer (seconds, or 0.0 for "ready"), or None on failure or
        timeout."""
        try:
            if request != "ready":
                os.write(self.requests, request.encode() + b"\n")
            while b"\n" not in self.buffer:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([self.answers], [], [], left)[0]:
                    return None
                chunk = os.read(self.answers, 4096)
                if not chunk:
                    return None
                self.buffer += chunk
        except OSError:
            return None
        line, self.buffer = self.buffer.split(b"\n", 1)
        try:
            return float(line)
        except ValueError:
            return None

    def stop(self) -> None:
        for fd in (self.requests, self.answers):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(self.pid, 0)


def _detach(parent: int) -> None:
    """In a child: killed with this process's parent (Linux), its output and the parent's signal
    handlers (Ctrl-C's checkpoint) left behind."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(1)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)


def _serve(
    compute: int, halves: int, spec: ProbeSpec, unsafe: bool, requests: int, answers: int
) -> None:
    """In a child: start TensorFlow's runtime with ``compute`` threads (on each of ``halves`` of a
    batch), compile the train step in each mode of ``spec``, then time one burst per request line,
    answering on ``answers``; -1 for "ready" where the model cannot be split in halves."""
    import numpy as np
    import tensorflow as tf

    from ..models import build_model, compile_model
    from .halves import splittable
    from .pipeline import train_element_spec, windows_at
    from .stepper import Stepper
    from .threads import set_compute_threads

    set_compute_threads(tf, compute, inter=halves)  # the runtime starts with this child's first op

    model = build_model(spec.model, spec.window, spec.channels, spec.classes, unsafe=unsafe)
    if halves > 1 and not splittable(model):
        os.write(answers, b"-1\n")
        return
    compile_model(
        model,
        optimizer=None,
        lr=None,
        loss=None,
        steps_per_execution=PROBE_BATCHES,
        classes=spec.classes,
    )
    stepper = Stepper(
        model,
        window=spec.window,
        n_classes=spec.classes,
        fuse=spec.fuse,
        halves=halves,
        gathered=True,
    )
    stepper.build_state(
        train_element_spec(spec.batch_size, spec.window, spec.channels), spec.channels
    )
    rng = np.random.default_rng(0)
    n = PROBE_BATCHES * spec.batch_size
    rows = max(spec.samples, n + spec.window)
    samples = tf.constant(rng.normal(size=(rows, spec.channels)).astype(np.float32))
    starts = rng.integers(0, rows - spec.window + 1, n)
    offsets = tf.constant(starts.reshape(PROBE_BATCHES, spec.batch_size).astype(np.int32))
    windows = windows_at(
        samples, offsets, spec.window
    )  # as the run's input pipeline hands them over
    labels = tf.constant(
        rng.integers(0, spec.classes, (PROBE_BATCHES, spec.batch_size)).astype(np.int32)
    )
    steps = {mode: stepper.whole(mode) for mode in spec.modes}
    for step in steps.values():
        step(samples, windows, labels)  # compiles
    os.write(answers, b"0\n")
    for line in os.fdopen(requests, "rb"):
        step = steps[line.strip() == b"xla"]
        t0 = time.perf_counter()
        step(samples, windows, labels)
        os.write(answers, f"{time.perf_counter() - t0!r}\n".encode())


def _read_cache() -> dict[str, Any]:
    try:
        data = json.loads(cache_path().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_cache(key: str, entry: dict[str, Any]) -> None:
    path = cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = _read_cache()
        data[key] = entry
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, path)
    except OSError:  # a read-only home: the run goes on, measured again next time
        pass


if __name__ == "__main__":  # measure and cache now (benchmarks/train.py: a later run's cache)
    from ..._quiet import import_tensorflow_quietly

    job = json.loads(sys.argv[1])
    spec = ProbeSpec(**{**job, "modes": tuple(job["modes"])})
    import_tensorflow_quietly(lambda tf: print(json.dumps(dataclasses.asdict(measure(spec)))))
