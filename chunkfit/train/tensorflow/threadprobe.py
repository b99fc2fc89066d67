"""The measuring children of chunkfit.train.tensorflow.threadtune: one forked process per candidate
thread count, each building the model and compiling chunkfit's train step, then timing bursts of
``PROBE_BATCHES`` batches on request, the children taking turns.

A child is a fork of a process that imported TensorFlow before its runtime started, so it imports
nothing again and starts the runtime with its own threads. It dies with its parent (Linux), even
while it compiles, and answers one line per request on a pipe.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import statistics
import sys
import time
import warnings

from ..probing import read_line

PROBE_BATCHES = 32  # batches per timed burst
ROUNDS = 4  # bursts per candidate and compile mode, at most
TIMING_SECONDS = 0.5  # past it (a slow model's bursts), no more rounds than two
PROBE_TIMEOUT = 120.0  # seconds for the whole measurement; past it the rule applies


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


def candidate_key(compute: int, halves: int) -> str:
    """A candidate's name in ``windows_per_s``: ``"1"``, or ``"1x2"`` for one thread on each of two
    halves."""
    return f"{compute}x{halves}" if halves > 1 else str(compute)


def import_for_children() -> None:
    """What a child needs, imported once here (this process needs it next anyway), not in each
    child."""
    from .. import models  # noqa: F401  (Keras)
    from . import halves, pipeline, stepper  # noqa: F401


def timed(children: list[ProbeChild], spec: ProbeSpec) -> dict[str, float] | None:
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
                if seconds is None or seconds <= 0:  # a dead child's or an impossible answer
                    return None
                key = f"{candidate_key(child.compute, child.halves)}/{'xla' if mode else 'graph'}"
                bursts.setdefault(key, []).append(PROBE_BATCHES * spec.batch_size / seconds)
    return {key: round(statistics.median(rates), 1) for key, rates in bursts.items()}


class ProbeChild:
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
    def fork(cls, compute: int, halves: int, spec: ProbeSpec, unsafe: bool) -> ProbeChild:
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
        except OSError:
            return None
        line, self.buffer = read_line(self.answers, self.buffer, deadline)
        if line is None:
            return None
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
