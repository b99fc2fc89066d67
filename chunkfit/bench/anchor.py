"""The tuned anchor: Keras's own ``model.fit`` on materialised float32 windows, tuned as a Keras
user who cares about speed would tune it.

Candidates: ``steps_per_execution`` 1, 32 and 256 and, on TensorFlow, ``jit_compile`` off and on
(on JAX every step is compiled by XLA already). Each candidate trains a freshly built and compiled
model and is timed in steady state: its first execution (tracing and compiling) and whatever ends
within ``warmup`` seconds are not timed; then it trains for ``steady`` seconds (at least one
execution, at most one epoch's windows) and stops through ``model.stop_training``. The fastest
candidate is the anchor that chunkfit's ratios are taken against; steps_per_execution 1 without XLA
is the plain ``fit`` of the original question's story.

Keras's backend is fixed per process, and memory a candidate leaves behind would count against the
next: callers run each candidate in a process of its own. Its peak RSS is the high-water mark from
just before the model is built (reset there where Linux allows), so it holds the resident windows
and what ``fit`` adds to them, not what materialising passed through.
"""

from __future__ import annotations

import dataclasses
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

STEPS_PER_EXECUTION = (1, 32, 256)


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One setting of ``model.compile`` the anchor tries."""

    steps_per_execution: int
    jit_compile: bool

    @property
    def key(self) -> str:
        return f"spe{self.steps_per_execution}" + ("-xla" if self.jit_compile else "")


def candidates(backend: str) -> tuple[Candidate, ...]:
    """What the anchor tries on ``backend``: plain fit first."""
    jits = (False, True) if backend == "tensorflow" else (True,)
    return tuple(Candidate(s, j) for j in jits for s in STEPS_PER_EXECUTION)


def candidate(key: str) -> Candidate:
    """The candidate a ``Candidate.key`` names (``spe32``, ``spe256-xla``)."""
    spe, _, xla = key.removeprefix("spe").partition("-")
    return Candidate(int(spe), xla == "xla")


def reset_peak_rss() -> None:
    """Reset this process's peak RSS to its current RSS (Linux; elsewhere nothing happens)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def peak_rss() -> int:
    """Peak RSS in bytes since the last ``reset_peak_rss`` (since the start where not Linux)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def anchor_model(name: str, window: int, candidate: Candidate, seed: int = 0) -> Any:
    """A built-in model compiled as chunkfit compiles it (Adam 1e-3, cross-entropy, the event
    class's metrics), with the candidate's steps per execution and XLA setting."""
    import keras

    from ..train.metrics import compiled_metrics
    from ..train.models import build_model

    keras.utils.set_random_seed(seed)
    model = build_model(name, window, 1, 2)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss="categorical_crossentropy",
        metrics=compiled_metrics(2),
        steps_per_execution=candidate.steps_per_execution,
        jit_compile=candidate.jit_compile,
    )
    return model


def materialise(signal: np.ndarray, window: int) -> np.ndarray:
    """Every window of a one-channel ``signal``, float32 [n, window, 1]: what the anchor trains."""
    x = signal.astype(np.float32, copy=False)
    return np.lib.stride_tricks.sliding_window_view(x, window)[:, :, None].copy()


def _steady_callback(
    warmup: float, steady: float, batch_size: int, limit: int, clock: dict[str, Any]
) -> Any:
    import keras

    class Steady(keras.callbacks.Callback):
        """Times executions after the warm-up and stops the fit after ``steady`` seconds."""

        def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
            clock.update(begin=time.perf_counter(), start=None, windows=0, warm_windows=0)

        def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            self.last = -1

        def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
            loss = float((logs or {}).get("loss", float("nan")))  # waits for JAX's dispatch
            # steps last+1 .. batch of this epoch; the epoch's last batch may be short
            windows = min(limit, (batch + 1) * batch_size) - (self.last + 1) * batch_size
            self.last = batch
            now = time.perf_counter()
            clock["loss"] = loss
            if clock["start"] is None:
                clock["warm_windows"] += windows
                if now - clock["begin"] >= warmup or clock["warm_windows"] >= limit:
                    clock.update(start=now, cpu=_cpu(), warm=now - clock["begin"])
                return
            clock["windows"] += windows
            clock.update(end=now, cpu_end=_cpu())
            if now - clock["start"] >= steady or clock["windows"] >= limit:
                self.model.stop_training = True

    return Steady()


def measure(
    build: Callable[[Candidate], Any],
    x: np.ndarray,
    y: np.ndarray,
    candidate: Candidate,
    *,
    batch_size: int,
    warmup: float = 1.0,
    steady: float = 4.0,
) -> dict[str, Any]:
    """Train one candidate in steady state; its windows/s, CPU use and peak RSS."""
    import keras

    reset_peak_rss()
    model = build(candidate)
    clock: dict[str, Any] = {}
    limit = len(x)  # at most one epoch's windows warming up, and one timed
    model.fit(
        x,
        y,
        batch_size=batch_size,
        epochs=1000,
        shuffle=True,
        verbose=0,
        callbacks=[_steady_callback(warmup, steady, batch_size, limit, clock)],
    )
    windows = clock.get("windows", 0)
    seconds = clock["end"] - clock["start"] if windows else 0.0
    return {
        **dataclasses.asdict(candidate),
        "key": candidate.key,
        "backend": keras.backend.backend(),
        "windows": windows,
        "seconds": seconds,
        "windows_per_s": windows / seconds if seconds else float("nan"),
        "cpu_utilisation": (clock["cpu_end"] - clock["cpu"]) / seconds if seconds else None,
        "warmup_seconds": clock.get("warm"),
        "peak_rss_bytes": peak_rss(),
        "final_loss": clock.get("loss"),
    }


def best(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The fastest candidate (a NaN speed, a candidate that timed nothing, never wins)."""
    timed = [r for r in rows if r["windows_per_s"] == r["windows_per_s"]]
    return max(timed or rows, key=lambda r: r["windows_per_s"] if r in timed else -1.0)
