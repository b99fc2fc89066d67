"""The measuring children of chunkfit.train.choice: one fresh Python process per candidate (an
engine at a precision), each timing bursts of the real train step on request, the children taking
turns.

The parent has not loaded Keras (its backend is what is being chosen), so each child is a new
interpreter (``python -m chunkfit.train.choiceprobe SPEC``) with ``KERAS_BACKEND`` set to its
engine. It builds the model, compiles the engine's own train step (TensorFlow: chunkfit's
multi-batch step on the threads a short run of the run's model would get, with and without XLA;
JAX: the jitted step of chunkfit.train.jax.steps, dispatched batch by batch), and then answers one
line per request on its stdin: ``t`` times one burst of ``BURST`` batches (seconds; TensorFlow the
faster of its two compile modes), ``v`` gives the loss and accuracy on held-out windows of the
synthetic task it trains on (for the precision's tolerance, chunkfit.train.precision). Compiling is
timed by no one. A child dies with its parent (Linux).

The task: windows of Gaussian noise whose class is the quantile of their first channel's mean, so a
few hundred steps learn something that float32 and bfloat16 can be compared on.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from typing import Any

from .probing import read_line

BURST = 32  # batches per timed burst
ROUNDS = 5  # bursts per candidate, at most
SLOW_BURST = 2.0  # seconds: past it (a slow model's bursts), no more rounds than three
OUTRUN = 10.0  # a burst this many times the fastest one's length drops its candidate
MIN_PATIENCE = 20.0  # seconds: never dropped sooner
READY = 150.0  # seconds for a bfloat16 candidate to compile and run its first burst
TIMEOUT = 300.0  # seconds for the whole measurement (imports and compiles included)


class Child:
    """A measuring child: one candidate (``"engine/precision"``) answering on its pipes."""

    def __init__(self, key: str, spec: dict[str, Any]) -> None:
        engine, _, precision = key.partition("/")
        env = {**os.environ, "KERAS_BACKEND": engine, "TF_CPP_MIN_LOG_LEVEL": "3"}
        job = json.dumps({**spec, "engine": engine, "precision": precision})
        self.key = key
        self.proc = subprocess.Popen(
            self.command(job),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        self.buffer = b""

    def command(self, job: str) -> list[str]:
        """The child's command line: this module, serving ``job``."""
        return [sys.executable, "-m", "chunkfit.train.choiceprobe", job]

    def ask(self, request: str | None, deadline: float) -> list[float] | None:
        """Send ``request`` (None: wait for "ready"); the numbers of its answer, or None on failure
        or timeout."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            if request is not None:
                self.proc.stdin.write(request.encode() + b"\n")
                self.proc.stdin.flush()
        except OSError:
            return None
        line, self.buffer = read_line(self.proc.stdout.fileno(), self.buffer, deadline)
        if line is None:
            return None
        try:
            return [float(v) for v in line.split()]
        except ValueError:
            return None

    def waited(self, deadline: float) -> bool:
        """Whether an unanswered request ran out of time with the child still alive (not slow: a
        child that died or closed its pipe fails, and is never timed as slow)."""
        return time.monotonic() >= deadline and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.returncode is not None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass


def measure(keys: list[str], spec: dict[str, Any], validate: bool) -> dict[str, Any] | None:
    """windows/s of each candidate in ``keys`` (the median of its bursts, the children taking turns
    A B A B ..., so that a change in the machine's load hits all alike) and, with ``validate``,
    each one's held-out ``[loss, accuracy]`` after the same steps; None when a child failed or the
    measurement ran past ``TIMEOUT``. A candidate whose burst outlasts its patience (``OUTRUN``
    times the fastest) is dropped with the rate that patience gives; one whose child died fails the
    whole measurement, never timed as fast."""
    deadline = time.monotonic() + TIMEOUT
    children: list[Child] = []
    windows = BURST * spec["batch_size"]
    try:
        for key in keys:  # each started inside the try: whatever was started is stopped
            children.append(Child(key, spec))
        bursts: dict[str, list[float]] = {key: [] for key in keys}
        dropped: set[str] = set()
        # a bfloat16 candidate that has not compiled and run its first burst by READY is out
        ready_by = time.monotonic() + READY
        for child in children:
            by = ready_by if child.key.endswith("bfloat16") else deadline
            if child.ask(None, by) is None:
                if not child.key.endswith("bfloat16") or by >= deadline or not child.waited(by):
                    return None
                dropped.add(child.key)
                bursts[child.key].append(windows / READY)
                child.stop()
        started = time.monotonic()
        for done in range(ROUNDS):
            if done >= 3 and time.monotonic() - started > SLOW_BURST * len(keys) * done:
                break
            for child in children:
                if child.key in dropped:
                    continue
                # a candidate far slower than the fastest is out of the running: it is not waited
                # for past OUTRUN times the fastest burst (its rate then at most what that gives)
                fastest = min((windows / max(r) for r in bursts.values() if r), default=None)
                patience = max(MIN_PATIENCE, OUTRUN * fastest) if fastest else TIMEOUT
                asked = time.monotonic()
                by = min(deadline, asked + patience)
                answer = child.ask("t", by)
                if answer is None and fastest is not None and by < deadline and child.waited(by):
                    dropped.add(child.key)
                    bursts[child.key].append(windows / (time.monotonic() - asked))
                    child.stop()
                    continue
                if not answer or answer[0] <= 0:  # failed, died, or an answer no burst can give
                    return None
                bursts[child.key].append(windows / answer[0])
        out: dict[str, Any] = {
            "windows_per_s": {k: round(statistics.median(v), 1) for k, v in bursts.items()}
        }
        if validate:
            figures = {
                child.key: child.ask("v", deadline)
                for child in children
                if child.key not in dropped
            }
            if any(f is None or len(f) != 2 for f in figures.values()):
                return None
            out["validation"] = {k: [round(x, 5) for x in v or []] for k, v in figures.items()}
        return out
    except OSError:  # no process to start: out of processes or memory
        return None
    finally:
        for child in children:
            child.stop()


def _task(spec: dict[str, Any], rows: int, seed: int) -> tuple[Any, Any, Any]:
    """Samples, window offsets and classes of the synthetic task (see the module docstring)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    window, channels, classes = spec["window"], spec["channels"], spec["classes"]
    samples = rng.normal(size=(rows + window, channels)).astype(np.float32)
    offsets = rng.integers(0, rows, rows).astype(np.int32)
    means = np.cumsum(np.concatenate([[0.0], samples[:, 0]]))
    mean = (means[offsets + window] - means[offsets]) / window
    edges = np.quantile(mean, np.linspace(0, 1, classes + 1)[1:-1])
    return samples, offsets, np.digitize(mean, edges).astype(np.int32)


def _serve(spec: dict[str, Any]) -> None:
    """In a child: build, compile, answer "ready" (``0``), then one line per request."""
    import keras

    from .models import build_model, compile_model
    from .precision import set_policy

    set_policy(spec["precision"])
    if spec["engine"] == "tensorflow":
        _tensorflow_threads(spec)  # before TensorFlow's runtime starts
    keras.utils.set_random_seed(0)
    model = build_model(
        spec["model"], spec["window"], spec["channels"], spec["classes"], unsafe=spec["unsafe"]
    )
    compile_model(
        model, optimizer=None, lr=None, loss=None, steps_per_execution=1, classes=spec["classes"]
    )
    n = BURST * spec["batch_size"]
    samples, offsets, labels = _task(spec, n, 0)
    held = _task(spec, 8 * spec["batch_size"], 1)
    offsets = offsets.reshape(BURST, spec["batch_size"])
    labels = labels.reshape(BURST, spec["batch_size"])
    burst, figures = (_tensorflow if spec["engine"] == "tensorflow" else _jax)(
        model, spec, samples, offsets, labels, held
    )
    burst()  # compiles
    _answer([0.0])
    for line in sys.stdin:
        request = line.strip()
        if request == "t":
            _answer([burst()])
        elif request == "v":
            _answer(figures())


def _answer(numbers: list[float]) -> None:
    sys.stdout.write(" ".join(repr(float(v)) for v in numbers) + "\n")
    sys.stdout.flush()


def _tensorflow(
    model: Any, spec: dict[str, Any], samples: Any, offsets: Any, labels: Any, held: Any
) -> tuple[Any, Any]:
    import numpy as np
    import tensorflow as tf

    from .tensorflow.halves import splittable
    from .tensorflow.pipeline import train_element_spec, windows_at
    from .tensorflow.stepper import Stepper
    from .tensorflow.threadtune import short_rule

    halves = short_rule(spec["model"], "").halves
    halves = halves if halves > 1 and splittable(model) else 1
    stepper = Stepper(
        model, window=spec["window"], n_classes=spec["classes"], halves=halves, gathered=True
    )
    stepper.build_state(
        train_element_spec(spec["batch_size"], spec["window"], spec["channels"]), spec["channels"]
    )
    x = tf.constant(samples)
    windows = windows_at(x, tf.constant(offsets), spec["window"])
    y = tf.constant(labels)
    steps = [stepper.whole(False), stepper.whole(True)]
    for step in steps:
        step(x, windows, y)  # compiles

    def burst() -> float:
        times = []
        for step in steps:
            t0 = time.perf_counter()
            step(x, windows, y)
            times.append(time.perf_counter() - t0)
        return min(times)

    def figures() -> list[float]:
        s, o, c = held
        w = np.lib.stride_tricks.sliding_window_view(s, spec["window"], axis=0)[o]
        w = np.moveaxis(w, -1, 1)
        logs = model.evaluate(
            w, keras_onehot(c, spec["classes"]), verbose=0, return_dict=True, batch_size=256
        )
        return [float(logs["loss"]), float(logs.get("accuracy", logs.get("acc", 0.0)))]

    return burst, figures


def _tensorflow_threads(spec: dict[str, Any]) -> None:
    """The threads a short run of the model gets (chunkfit.train.tensorflow.threadtune's rule): a
    long run measures its own, which only makes TensorFlow faster than measured here."""
    import tensorflow as tf

    from .tensorflow.threads import set_compute_threads
    from .tensorflow.threadtune import short_rule

    rule = short_rule(spec["model"], "")
    set_compute_threads(tf, rule.compute, inter=rule.halves)


def _jax(
    model: Any, spec: dict[str, Any], samples: Any, offsets: Any, labels: Any, held: Any
) -> tuple[Any, Any]:
    import jax
    import numpy as np

    from .jax.steps import Steps, put_state, test_state, train_state
    from .keras_state import build as build_state
    from .normalize import Normalizer

    build_state(model, spec["window"], spec["channels"], spec["classes"], picker=False)
    if not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)

    steps = Steps(
        model,
        window=spec["window"],
        n_classes=spec["classes"],
        batch_size=spec["batch_size"],
        normalizer=Normalizer("none"),
        class_weights=None,
    )
    x = jax.device_put(samples)
    state = [train_state(model)]

    def burst() -> float:
        t0 = time.perf_counter()
        s, _ = steps.train(state[0], x, offsets, labels)  # numpy rows, as the engine passes them
        jax.block_until_ready(s)
        state[0] = s
        return time.perf_counter() - t0

    def figures() -> list[float]:
        put_state(model, state[0])
        for metric in model.metrics:
            metric.reset_state()
        hs, ho, hc = held
        t = test_state(model)
        xs = jax.device_put(hs)
        logs = None
        for k in range(0, len(ho), spec["batch_size"]):
            t, logs = steps.test(
                t, xs, ho[None, k : k + spec["batch_size"]], hc[None, k : k + spec["batch_size"]]
            )
        assert logs is not None
        logs = {key: float(np.asarray(v)) for key, v in jax.device_get(logs).items()}
        return [logs["loss"], logs.get("accuracy", logs.get("acc", 0.0))]

    return burst, figures


def keras_onehot(classes: Any, n: int) -> Any:
    import numpy as np

    return np.eye(n, dtype=np.float32)[classes]


def _die_with_parent() -> None:
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


if __name__ == "__main__":
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent's Ctrl-C is the parent's
    _serve(json.loads(sys.argv[1]))
