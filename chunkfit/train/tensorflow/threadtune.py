"""Compute threads and compile mode, measured on this machine for this model before TensorFlow's runtime starts.

TensorFlow fixes its thread pools when its runtime starts, so thread counts cannot be tried inside
one process the way ``--jit auto`` tries XLA (chunkfit.train.tensorflow.autotune). A rule fixed on
one machine was wrong on the next: one compute thread trained baseline-cnn 20-30% faster than every
core on one 2-core AMD EPYC, and its XLA step 0.75x as fast on another. So, when
``--compute-threads`` is not given:

- a measurement cached for this machine, TensorFlow version, model and shapes is used (``by: cache``);
- else, for a run long enough that measuring costs at most ``BUDGET_SHARE`` of it (at
  ``ASSUMED_RATE``), each candidate of ``CANDIDATES`` is measured in a child process of its own,
  started before this process imports TensorFlow so that their start-up overlaps its import (a
  first measurement added 6-8 s to a run on 2 cores: ``PROBE_SECONDS``). The children build the model
  and compile chunkfit's train step in each compile mode the run may use, side by side (compiling
  is not timed), on a block of the run's group size, then take turns timing bursts of
  ``PROBE_BATCHES`` batches (A B A B ...), so that a change in the machine's load hits every
  candidate alike. The median burst of each counts; another thread count than the rule's must beat
  it by ``MARGIN`` (on one 2-core EPYC the children measured one thread at 0.9-1.0x every core where
  whole runs trained at 0.6-0.75x: a close call stays with the rule). The fastest candidate trains
  the run; with ``--jit auto`` its fastest compile mode is the run's too, and the choice is cached;
- else, and for models a child cannot rebuild (a ``keras.Model`` object; ``module:function``, whose
  code chunkfit runs once only), the rule: TensorFlow's default of every core. The windows are
  gathered inside the compiled step, so no input work waits for a free core.

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
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ..._quiet import QUIET_LOG_LEVEL

# TensorFlow's default of every core, and one compute thread (with one inter-op thread)
CANDIDATES = (0, 1)
PROBE_BATCHES = 32  # batches per timed burst
ROUNDS = 4  # bursts per candidate and compile mode
MARGIN = 1.05  # how much faster than the rule another thread count must be to be chosen
PROBE_TIMEOUT = 120.0  # seconds for the whole measurement; past it the rule applies
BUDGET_SHARE = 0.05  # of the run's estimated length
# What a first measurement adds to a run's wall time on 2 cores, both modes: a whole 1-epoch run
# with it against the same run without, paired (farm-bench), 6.6 s median (6.0-8.4 s); the children's
# own import of TensorFlow overlaps the run's. An earlier bound of 20 s counted the run's import too.
PROBE_SECONDS = 8.0
ASSUMED_RATE = 50_000.0  # training windows/s for estimating a run's length (a fast model on 2 cores)
CACHE_FILE = "threads.json"
RULE = "the rule: every core"


@dataclasses.dataclass(frozen=True)
class ThreadChoice:
    """The compute threads a run starts TensorFlow with (None: the rule), why, what was measured
    (windows/s by ``"threads/mode"``), and the compile mode the measurement chose (None: not chosen)."""

    compute: int | None
    by: str
    windows_per_s: dict[str, float] | None = None
    jit: bool | None = None
    seconds: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"by": self.by}
        if self.windows_per_s:
            out["windows_per_s"] = self.windows_per_s
        if self.seconds is not None:
            out["seconds"] = self.seconds
        return out

    def describe(self, threads: dict[str, int]) -> str:
        """Part of the run's one line on how it trains."""
        n = threads.get("intra_op", 0)
        used = "every core" if n == 0 else "1 compute thread" if n == 1 else f"{n} compute threads"
        timed = ""
        if self.windows_per_s:
            timed = " (" + ", ".join(f"{_label(k)} {v:,.0f}" for k, v in self.windows_per_s.items()) + " windows/s"
            timed += f"; {self.seconds:.1f} s)" if self.seconds is not None else ")"
        return f"TensorFlow on {used}, chosen by {self.by}{timed}"


def _label(key: str) -> str:
    threads, _, mode = key.partition("/")
    who = "every core" if threads == "0" else f"{threads} thread" + ("s" if threads != "1" else "")
    return f"{who}{' ' + {'xla': 'XLA', 'graph': 'without XLA'}[mode] if mode else ''}"


@dataclasses.dataclass(frozen=True)
class ProbeSpec:
    """What a measuring child builds and trains: ``model`` (a built-in name or a .keras file), the
    run's shapes and batch size, the compile modes to time (True: XLA), and how many samples a
    group of the run holds (the child gathers its windows from as many, as the run will)."""

    model: str
    window: int
    channels: int
    classes: int
    batch_size: int
    modes: tuple[bool, ...]
    samples: int = 0


def cache_path() -> Path:
    root = os.environ.get("CHUNKFIT_CACHE_DIR")
    return (Path(root) if root else Path.home() / ".cache" / "chunkfit") / CACHE_FILE


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
    machine = f"{_cpu_name()}|{os.cpu_count()}|{platform.machine()}|tensorflow {_tensorflow_version()}"
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


def choose_threads(compute_threads: int | None, model: Any, *, deterministic: bool, window: int, channels: int,
                   classes: int, batch_size: int, run_windows: int, jit: str = "auto", group_samples: int = 0,
                   probe_windows: int | None = None) -> ThreadChoice | ProbeSpec:
    """The compute threads for this run (see the module docstring), or the ``ProbeSpec`` to measure
    them with (``Probe``, started before TensorFlow is imported). ``run_windows``: the windows the
    run will train, all epochs together; ``group_samples``: the samples of one of its groups of blocks;
    ``probe_windows``: the fewest worth measuring for (default: where the measurement is
    ``BUDGET_SHARE`` of the run)."""
    if compute_threads is not None:
        return ThreadChoice(compute_threads, "--compute-threads")
    if deterministic:
        return ThreadChoice(None, f"--deterministic (a fixed choice: {RULE})")
    key = probe_key(model, window, channels, classes, batch_size) if isinstance(model, str) else None
    if key is None:
        return ThreadChoice(None, f"{RULE} (only built-in models and .keras files are measured)")
    cached = _read_cache().get(key)
    if cached is not None:
        rates = {str(k): float(v) for k, v in cached["windows_per_s"].items()}
        return ThreadChoice(int(cached["compute"]), f"cache ({cache_path()}, measured {cached['when']})", rates,
                            cached.get("jit"), cached.get("seconds"))
    if "tensorflow" in sys.modules:
        return ThreadChoice(None, f"{RULE} (TensorFlow was imported before the run, so none is measured)")
    if os.name != "posix":
        return ThreadChoice(None, f"{RULE} (threads are measured on POSIX systems only)")
    least = probe_windows if probe_windows is not None else int(PROBE_SECONDS / BUDGET_SHARE * ASSUMED_RATE)
    if run_windows < least:
        return ThreadChoice(None, f"{RULE} (a run of {run_windows:,} windows is too short to measure threads)")
    modes = (True, False) if jit == "auto" else (jit == "on",)
    return ProbeSpec(model, window, channels, classes, batch_size, modes, group_samples)


class Probe:
    """The measurement of ``spec``: children started now, timed by ``finish``."""

    def __init__(self, spec: ProbeSpec) -> None:
        from ..models import unsafe_files_allowed

        self.spec, self.t0 = spec, time.perf_counter()
        self.children: list[_Child] = []
        try:
            # All start and compile at once (compiling is timed by no one); they take turns later.
            self.children.extend(_Child.start(c, spec, unsafe_files_allowed()) for c in CANDIDATES)
        except OSError:
            self.stop()

    def finish(self) -> ThreadChoice:
        """Time every candidate, taking turns; cache and return the fastest."""
        try:
            speeds = _timed(self.children, self.spec) if len(self.children) == len(CANDIDATES) else None
        finally:
            self.stop()
        return _chosen(self.spec, speeds, round(time.perf_counter() - self.t0, 1))

    def stop(self) -> None:
        for child in self.children:
            child.stop()


def _chosen(spec: ProbeSpec, speeds: dict[str, float] | None, seconds: float) -> ThreadChoice:
    if speeds is None:
        return ThreadChoice(None, f"{RULE} (the measurement failed)")
    best = _fastest(speeds)
    compute, _, mode = best.partition("/")
    jit = mode == "xla" if len(spec.modes) > 1 else None
    entry = {"compute": int(compute), "windows_per_s": speeds, "jit": jit, "seconds": seconds,
             "when": time.strftime("%Y-%m-%d %H:%M")}
    key = probe_key(spec.model, spec.window, spec.channels, spec.classes, spec.batch_size)
    if key is not None:
        _write_cache(key, entry)
    return ThreadChoice(int(compute), "autotune (measured now)", speeds, jit, seconds)


def _fastest(speeds: dict[str, float]) -> str:
    """The fastest ``"threads/mode"`` of ``speeds``; another thread count than the rule's (every core,
    "0") only when it beats the rule's best mode by ``MARGIN``: on a shared machine one thread's
    bursts moved more than every core's, so a close call stays with the rule."""
    best = max(speeds, key=lambda k: speeds[k])
    rule = max((k for k in speeds if k.startswith("0/")), key=lambda k: speeds[k], default=best)
    return best if speeds[best] >= MARGIN * speeds[rule] else rule


def _timed(children: list[_Child], spec: ProbeSpec) -> dict[str, float] | None:
    """windows/s of each child and mode, ``"threads/xla"`` or ``"threads/graph"``: the median of its
    bursts, the children taking turns; None if one failed."""
    deadline = time.monotonic() + PROBE_TIMEOUT
    if any(child.ask("ready", deadline) is None for child in children):
        return None
    bursts: dict[str, list[float]] = {}
    for _ in range(ROUNDS):
        for mode in spec.modes:
            for child in children:
                seconds = child.ask("xla" if mode else "graph", deadline)
                if seconds is None:
                    return None
                key = f"{child.compute}/{'xla' if mode else 'graph'}"
                bursts.setdefault(key, []).append(PROBE_BATCHES * spec.batch_size / seconds)
    return {key: round(statistics.median(rates), 1) for key, rates in bursts.items()}


class _Child:
    """A child process measuring one candidate; it answers one line per request on its stdout."""

    def __init__(self, proc: subprocess.Popen[bytes], compute: int) -> None:
        self.proc, self.compute = proc, compute
        self.buffer = b""

    @classmethod
    def start(cls, compute: int, spec: ProbeSpec, unsafe: bool) -> _Child:
        job = json.dumps({"compute": compute, "unsafe": unsafe, "spec": dataclasses.asdict(spec)})
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", QUIET_LOG_LEVEL)}
        proc = subprocess.Popen([sys.executable, "-m", __name__, job], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, env=env)
        return cls(proc, compute)

    def ask(self, request: str, deadline: float) -> float | None:
        """Send ``request``; its answer (seconds, or 0.0 for "ready"), or None on failure or timeout."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        out = self.proc.stdout.fileno()
        try:
            if request != "ready":
                self.proc.stdin.write(request.encode() + b"\n")
                self.proc.stdin.flush()
            while b"\n" not in self.buffer:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([out], [], [], left)[0]:
                    return None
                chunk = os.read(out, 4096)
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
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


def _serve(compute: int, spec: ProbeSpec, unsafe: bool) -> None:
    """In a child: start TensorFlow with ``compute`` threads, compile the train step in each mode of
    ``spec``, then time one burst per line of stdin, answering on stdout."""
    from .threads import start_tensorflow

    threads = start_tensorflow(compute)  # before TensorFlow's first op: after it they are fixed
    assert compute == 0 or threads["intra_op"] == compute, threads
    import numpy as np
    import tensorflow as tf

    from ..models import build_model, compile_model
    from .pipeline import train_element_spec
    from .stepper import Stepper

    model = build_model(spec.model, spec.window, spec.channels, spec.classes, unsafe=unsafe)
    compile_model(model, optimizer=None, lr=None, loss=None, steps_per_execution=PROBE_BATCHES, classes=spec.classes)
    stepper = Stepper(model, window=spec.window, n_classes=spec.classes, fuse=spec.modes != (False,))
    stepper.build_state(train_element_spec(spec.batch_size), spec.channels)
    rng = np.random.default_rng(0)
    n = PROBE_BATCHES * spec.batch_size
    rows = max(spec.samples, n + spec.window)
    samples = tf.constant(rng.normal(size=(rows, spec.channels)).astype(np.float32))
    starts = rng.integers(0, rows - spec.window + 1, n)
    offsets = tf.constant(starts.reshape(PROBE_BATCHES, spec.batch_size).astype(np.int32))
    labels = tf.constant(rng.integers(0, spec.classes, (PROBE_BATCHES, spec.batch_size)).astype(np.int32))
    steps = {mode: stepper.whole(mode) for mode in spec.modes}
    for step in steps.values():
        step(samples, offsets, labels)  # compiles
    out = sys.stdout.buffer
    out.write(b"0\n")
    out.flush()
    for line in sys.stdin.buffer:
        step = steps[line.strip() == b"xla"]
        t0 = time.perf_counter()
        step(samples, offsets, labels)
        out.write(f"{time.perf_counter() - t0!r}\n".encode())
        out.flush()


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


if __name__ == "__main__":
    job = json.loads(sys.argv[1])
    _serve(int(job["compute"]), ProbeSpec(**{**job["spec"], "modes": tuple(job["spec"]["modes"])}), bool(job["unsafe"]))
