"""How many compute threads, measured on this machine for this model, before TensorFlow starts.

TensorFlow fixes its thread pools when its runtime starts, so candidates cannot be tried inside
one process the way ``--jit auto`` tries XLA (chunkfit.train.tensorflow.autotune). A rule fixed on
one machine was wrong on the next: one compute thread trained baseline-cnn 20-30% faster than
every core on one 2-core AMD EPYC and its constant-batch step 0.79x as fast on another. So, when
``--compute-threads`` is not given:

- a measurement cached for this machine, TensorFlow version and model is used (``by: cache``);
- else a run long enough to pay for it (``PROBE_WINDOWS`` training windows or more) measures each
  candidate in ``CANDIDATES`` in a subprocess of its own: chunkfit's real train step and input
  pipeline on random windows of the run's shapes, the best element time of each compile mode (as
  ``--jit auto`` times them); the fastest candidate trains the run, and the timings are cached;
- else, and for models a subprocess cannot rebuild (a ``keras.Model`` object; ``module:function``,
  whose code chunkfit runs once only), the rule of chunkfit.train.tensorflow.threads.

``--deterministic`` runs use the rule too: a fixed, recorded choice. The cache is a JSON file in
``$CHUNKFIT_CACHE_DIR`` (default ``~/.cache/chunkfit``); deleting it measures again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# one compute thread (with one inter-op thread), and TensorFlow's default of every core
CANDIDATES = (1, 0)
# a probe costs each candidate a TensorFlow start, two compiles and a few dozen batches: 25-70 s in
# all on 2 cores (idle to loaded), about 5% of a run of this many windows at 20,000 windows/s
PROBE_WINDOWS = 12_000_000
PROBE_STEPS = 24  # batches per timed element
PROBE_TIMEOUT = 120.0
CACHE_FILE = "threads.json"
RULE = "the rule: one thread for small built-in models on a CPU, else every core"


@dataclasses.dataclass(frozen=True)
class ThreadChoice:
    """The compute threads a run starts TensorFlow with (None: the rule), why, and what was measured."""

    compute: int | None
    by: str
    windows_per_s: dict[str, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"by": self.by, **({"windows_per_s": self.windows_per_s} if self.windows_per_s else {})}

    def describe(self, threads: dict[str, int]) -> str:
        """One line for the run's output."""
        n = threads.get("intra_op", 0)
        used = "every core" if n == 0 else "1 compute thread" if n == 1 else f"{n} compute threads"
        timed = ""
        if self.windows_per_s:
            timed = " (" + ", ".join(f"{_label(k)} {v:,.0f}" for k, v in self.windows_per_s.items()) + " windows/s)"
        return f"TensorFlow on {used}, chosen by {self.by}{timed}; --compute-threads N to choose"


def _label(key: str) -> str:
    return "every core" if key == "0" else f"{key} thread"


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
                   classes: int, batch_size: int, run_windows: int, probe_windows: int = PROBE_WINDOWS,
                   say: Callable[[str], None] | None = None) -> ThreadChoice:
    """The compute threads for this run (see the module docstring); ``run_windows``: the windows the
    run will train, all epochs together; ``say`` is told before a measurement starts."""
    if compute_threads is not None:
        return ThreadChoice(compute_threads, "--compute-threads")
    if deterministic:
        return ThreadChoice(None, f"--deterministic (a fixed choice: {RULE})")
    key = probe_key(model, window, channels, classes, batch_size) if isinstance(model, str) else None
    if key is None:
        return ThreadChoice(None, f"{RULE} (only built-in models and .keras files are measured)")
    if "tensorflow" in sys.modules:
        return ThreadChoice(None, f"{RULE} (TensorFlow was imported before the run, so none is measured)")
    cached = _read_cache().get(key)
    if cached is not None:
        return ThreadChoice(int(cached["compute"]), f"cache ({cache_path()}, measured {cached['when']})",
                            cached["windows_per_s"])
    if run_windows < probe_windows:
        return ThreadChoice(None, f"{RULE} (a run of {run_windows:,} windows is too short to measure threads)")
    if say is not None:
        say(f"measuring how fast {model} trains on one compute thread and on every core (once for this machine "
            f"and model: cached in {cache_path()})")
    speeds = {str(c): probe(c, model, window, channels, classes, batch_size) for c in CANDIDATES}
    if any(v is None for v in speeds.values()):
        return ThreadChoice(None, f"{RULE} (a measurement failed)")
    measured = {k: round(float(v), 1) for k, v in speeds.items() if v is not None}
    best = int(max(measured, key=lambda k: measured[k]))
    _write_cache(key, {"compute": best, "windows_per_s": measured, "when": time.strftime("%Y-%m-%d %H:%M")})
    return ThreadChoice(best, "autotune (measured now)", measured)


def probe(compute: int, model: str, window: int, channels: int, classes: int, batch_size: int) -> float | None:
    """Training windows/s of ``model`` under ``compute`` threads, in a subprocess; None if it failed."""
    cmd = [sys.executable, "-m", "chunkfit.train.tensorflow.threadtune",
           json.dumps({"compute": compute, "model": model, "window": window, "channels": channels,
                       "classes": classes, "batch_size": batch_size})]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")}
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=PROBE_TIMEOUT, env=env, check=False)
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        return None
    return float(json.loads(done.stdout.strip().splitlines()[-1])["windows_per_s"])


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


def _measure(compute: int, model: str, window: int, channels: int, classes: int, batch_size: int) -> float:
    """In the probe subprocess: the best training windows/s of either compile mode, on random windows."""
    import numpy as np

    from ...config import FitOptions
    from ..blocks import BlockData
    from ..normalize import Normalizer
    from .autotune import TRIALS, JitChoice
    from .engine import Shapes, TensorFlowEngine

    opts = FitOptions(batch_size=batch_size, compute_threads=compute, steps_per_execution=PROBE_STEPS)
    engine = TensorFlowEngine.start(model, opts, Shapes(window, channels, classes), Normalizer("none"))
    choice = JitChoice("auto", False, 10**9, PROBE_STEPS)
    engine.stepper.choice = choice
    engine.prepare()
    n = (len(TRIALS) + 1) * PROBE_STEPS * batch_size
    rng = np.random.default_rng(0)
    data = BlockData((), rng.normal(size=(n + window, channels)).astype(np.float32),
                     rng.permutation(n).astype(np.int32), rng.integers(0, classes, n).astype(np.int32))
    import keras

    engine.train(engine.tensors(data, training=True), keras.callbacks.CallbackList([]))
    best = min(min(t) for t in choice.timings.values() if t)
    return batch_size / best


if __name__ == "__main__":
    spec = json.loads(sys.argv[1])
    print(json.dumps({"windows_per_s": _measure(**spec)}))
