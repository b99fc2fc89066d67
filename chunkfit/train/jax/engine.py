"""``JaxEngine``: Keras on the JAX backend, driven one group of blocks at a time by the training
loop.

The interface chunkfit.train.engines.Engine describes: the loop owns epochs, block order,
callbacks and checkpoints. Here a group's samples (and its shuffled window
offsets and classes) become JAX arrays in the loader thread, and ``train`` runs the group's
elements (``steps.Steps``: the windows gathered inside each compiled step; an element's batches one
call each, or looped inside one call, ``--jax-loop``, chosen per machine by
chunkfit.train.jax.loopchoice) with the model's state read from and written back to its Keras
variables around each element, so that callbacks, checkpoints and ``model.get_weights`` see the
weights as they are. Every step is compiled by XLA (that is how JAX runs): ``--jit off`` is refused,
and ``--compute-threads`` too (XLA on the CPU uses every core).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ...config import FitOptions
from ...core.blocks import BlockData
from ..keras_state import build as build_state
from ..models import build_model, check_model, compile_model
from ..normalize import Normalizer
from ..singleprocess import SingleProcessEngine
from ..steps import Shapes, bucket, cache_dir, element_steps, step_batches
from .loopchoice import LoopChoice
from .options import check_options
from .steps import Steps, put_state, python_logs, scan_sizes, test_state, train_state

if TYPE_CHECKING:
    import keras


@dataclasses.dataclass(frozen=True)
class JaxBlock:
    """A group of blocks as the JAX engine trains it: samples on the device, offsets and classes in
    numpy."""

    n_windows: int
    n_blocks: int
    samples: Any  # jax.Array float32 [samples, channels]
    offsets: np.ndarray  # int32 [windows]
    labels: np.ndarray  # int32 [windows]
    on_device: tuple[Any, Any]  # the same offsets and labels as jax.Arrays, for the scan


def compilation_cache() -> None:
    """Keep XLA's compiled steps on disk for the next run of the same model and shapes (JAX's
    persistent compilation cache, beside chunkfit's thread cache), unless the user chose a cache:
    compiling a model's steps and scorer costs every short run seconds otherwise."""
    import jax

    chosen = getattr(jax.config, "jax_compilation_cache_dir", None)
    if chosen or os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return
    jax.config.update("jax_compilation_cache_dir", str(cache_dir() / "jax"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.1)


def seed_keras(seed: int) -> None:
    """``keras.utils.set_random_seed`` less its TensorFlow seed: Python's, numpy's and Keras's
    seeds. Keras seeds TensorFlow too whenever it can import it, and importing TensorFlow costs a
    JAX run that never uses it seconds."""
    import random

    import keras

    try:
        from keras.src.backend.common import global_state
        from keras.src.random import seed_generator
        from keras.src.utils import rng_utils
    except ImportError:  # a Keras that moved them
        keras.utils.set_random_seed(seed)
        return
    global_state.set_global_attribute(rng_utils.GLOBAL_RANDOM_SEED, seed)
    global_state.set_global_attribute(seed_generator.GLOBAL_SEED_GENERATOR, None)
    random.seed(seed)
    np.random.seed(seed)


class JaxEngine(SingleProcessEngine):
    """Keras on JAX: see the module docstring. Build with ``start``."""

    name = "jax"

    def __init__(
        self,
        model: keras.Model,
        opts: FitOptions,
        shapes: Shapes,
        steps: int,
        normalizer: Normalizer,
        class_weights: tuple[float, ...] | None,
    ) -> None:
        from ..augment import augmenter_for

        self.model, self.opts, self.shapes, self.steps = model, opts, shapes, steps
        self.normalizer = normalizer
        self.threads = {"intra_op": 0, "inter_op": 0}
        self.group_samples: int | None = None
        self.compiled = Steps(
            model,
            window=shapes.window,
            n_classes=shapes.classes,
            batch_size=opts.batch_size,
            normalizer=normalizer,
            class_weights=class_weights,
            augment=augmenter_for(opts.augment, opts.blocks.seed),
            targets=shapes.targets,
        )
        self._ready = False
        self.loop: LoopChoice | None = None
        self._warm = False  # the dispatched step has run once (compiled)

    @classmethod
    def start(
        cls,
        model: keras.Model | str,
        opts: FitOptions,
        shapes: Shapes,
        normalizer: Normalizer,
        class_weights: tuple[float, ...] | None = None,
        run_windows: int = 0,
        group_samples: int = 0,
        say: Callable[[str], None] | None = None,
    ) -> JaxEngine:
        """Seed Keras, build and compile ``model``; see ``TensorFlowEngine.start``."""
        check_options(opts)
        compilation_cache()
        seed_keras(opts.blocks.seed)
        built = (
            build_model(model, shapes.window, shapes.channels, shapes.classes)
            if isinstance(model, str)
            else model
        )
        picker = shapes.targets > 0
        check_model(built, shapes.window, shapes.channels, shapes.classes, picker=picker)
        steps = opts.steps_per_execution or element_steps(
            opts.batch_size, shapes.window, shapes.channels
        )
        compile_model(
            built,
            optimizer=opts.optimizer,
            lr=opts.lr,
            loss=opts.loss,
            steps_per_execution=1,
            classes=shapes.classes,
            picker=picker,
        )
        return cls(built, opts, shapes, steps, normalizer, class_weights)

    @property
    def fit_wrapper(self) -> keras.Model | None:
        """No wrapper model: ``train`` checks the model's own ``stop_training`` after each
        element."""
        return None

    def in_flight_bytes(self) -> int:
        """Memory of what trains beside the blocks: one element's offsets and classes, one batch of
        windows."""
        s, b = self.shapes, self.opts.batch_size
        return 2 * self.steps * b * 8 + b * s.window * s.channels * 4

    def pad_groups_to(self, group_samples: int) -> None:
        """Every training group's samples are padded to this many rows: the element compiles
        once."""
        self.group_samples = group_samples

    def tensors(self, data: BlockData, training: bool) -> JaxBlock:
        """A group's samples on the device, padded for training (runs in the loader thread)."""
        import jax

        samples = data.samples
        capacity = self.group_samples if training else bucket(samples.shape[0])
        if capacity is not None and capacity > samples.shape[0]:
            padded = np.zeros((capacity, *samples.shape[1:]), dtype=np.float32)
            padded[: samples.shape[0]] = samples
            samples = padded
        offsets, labels = np.asarray(data.offsets, np.int32), np.asarray(data.labels, np.int32)
        return JaxBlock(
            int(data.offsets.shape[0]),
            len(data.blocks),
            jax.device_put(np.asarray(samples, np.float32)),
            offsets,
            labels,
            (jax.device_put(offsets), jax.device_put(labels)),
        )

    def choose_compile(self, run_batches: int) -> None:
        """Set how an element's batches run (``--jax-loop``; for ``auto``, by timing both in the
        first full elements, chunkfit.train.jax.loopchoice). ``run_batches``: the run's training
        batches."""
        import jax

        self.loop = LoopChoice(
            self.opts.jax_loop,
            self.opts.deterministic,
            -(-run_batches // self.steps),
            self.steps,
            accelerator=jax.default_backend() != "cpu",
            run_batches=run_batches,
        )

    def threads_info(self) -> dict[str, Any]:
        return {**self.threads, "compute": None, "by": "XLA on JAX: every core"}

    def describe_threads(self) -> str | None:
        return "XLA's threads on every core"

    def compile_info(self) -> dict[str, Any]:
        """The compile choice for run.json; ``loop`` is None while the trial runs."""
        assert self.loop is not None
        return self.loop.to_dict(self.opts.batch_size)

    def compile_line(self) -> str | None:
        """The run's one line on how it trains, once the loop is chosen."""
        if self.loop is None or not self.loop.decided:
            return None
        return (
            "JAX engine: each step under XLA with its windows gathered inside, "
            f"{self.steps} steps per callback call, {self.loop.describe(self.opts.batch_size)}; "
            f"{self.describe_threads()}; "
            "--jax-loop dispatch|scan to choose"
        )

    def compile_summary(self) -> str | None:
        if self.loop is None or not self.loop.decided:
            return None
        return f"JAX, train step under XLA, --jax-loop {self.loop.mode}; --verbose says why"

    def prepare(self) -> None:
        """Create the optimizer slots and metric totals before the first step (a resumed run puts
        its own back)."""
        if not self._ready:
            s = self.shapes
            build_state(self.model, s.window, s.channels, s.classes, picker=s.targets > 0)
            if not self.model.optimizer.built:
                self.model.optimizer.build(self.model.trainable_variables)
            self._ready = True

    def step_batches(self, n_windows: int) -> list[int]:
        return step_batches(n_windows, self.opts.batch_size, self.steps)

    def train(self, tensors: JaxBlock, callbacks: keras.callbacks.CallbackList) -> None:
        """One group: its elements in order (dispatched or looped, ``--jax-loop``), callbacks around
        each as ``fit`` has them around each compiled call."""
        self.prepare()
        self.model.reset_metrics()  # as each fit call does; the bridge puts the epoch's totals back
        self.model.stop_training = False
        loop = self.loop
        assert loop is not None, "choose_compile first"
        for k, (lo, hi, n) in enumerate(self._elements(tensors.n_windows)):
            callbacks.on_train_batch_begin(k)
            state = train_state(self.model)
            # Only full elements take part in the trial, each with its first TRIAL_BATCHES batches
            # (the rest dispatched); the other elements follow the choice once made.
            if n == self.steps and not loop.decided:
                state, logs = self._trial(state, tensors, lo, hi, n)
            else:
                state, logs = self._element(
                    state, tensors, lo, hi, n, loop.jit is True, training=True
                )
            put_state(self.model, state)
            callbacks.on_train_batch_end(k, python_logs(logs))
            if self.model.stop_training:
                return

    def _trial(self, state: Any, tensors: JaxBlock, lo: int, hi: int, n: int) -> tuple[Any, Any]:
        """A full element of the loop trial: its first TRIAL_BATCHES batches in the mode on trial,
        timed (after one untimed batch the first time, which compiles the step), the rest
        dispatched."""
        loop, b = self.loop, self.opts.batch_size
        assert loop is not None
        scan = loop.next_mode()
        if not scan and not self._warm and n > 1:
            state, _ = self._element(state, tensors, lo, lo + b, 1, False, training=True)
            _finished(state, 0.0)
            lo, n, self._warm = lo + b, n - 1, True
        part = min(TRIAL_BATCHES, n)
        t0, cut = time.perf_counter(), lo + part * b
        state, logs = self._element(state, tensors, lo, cut, part, scan, training=True)
        loop.timed(scan, _finished(state, t0), part)
        if cut < hi:
            state, logs = self._element(state, tensors, cut, hi, n - part, False, training=True)
        return state, logs

    def evaluate(self, tensors: JaxBlock, callbacks: keras.callbacks.CallbackList) -> None:
        """One group of validation windows in order; the metrics hold its totals (the bridge carries
        them on)."""
        self.prepare()
        self.model.reset_metrics()
        b, batch, scan = self.opts.batch_size, 0, self.loop is not None and self.loop.jit is True
        for lo, hi, n in self._elements(tensors.n_windows):
            callbacks.on_test_batch_begin(batch)
            state, logs = self._element(
                test_state(self.model), tensors, lo, hi, n, scan, training=False
            )
            put_state(self.model, state)
            batch += -(-(hi - lo) // b)
            callbacks.on_test_batch_end(batch - 1, python_logs(logs))

    def _element(
        self, state: Any, tensors: JaxBlock, lo: int, hi: int, n: int, scan: bool, training: bool
    ) -> tuple[Any, Any]:
        """The windows ``lo:hi`` of a group (``n`` full batches, 0: one short batch): looped inside
        compiled calls with ``scan`` (the rest of a group's last element, under MIN_SCAN batches,
        one call each), else one call per batch. Returns (state, the last batch's logs)."""
        c, b, logs = self.compiled, self.opts.batch_size, None
        if scan and n:
            sizes, _ = scan_sizes(n, self.steps)
            looped = c.train_scan if training else c.test_scan
            for size in sizes:
                state, logs = looped(state, tensors.samples, *tensors.on_device, lo, size)
                lo += size * b
            if lo == hi:
                return state, logs
            n = (hi - lo) // b
        offsets, labels = tensors.offsets[lo:hi], tensors.labels[lo:hi]
        single = c.train if training else c.test
        return single(state, tensors.samples, *self._batches(offsets, labels, n))

    def _elements(self, n_windows: int) -> list[tuple[int, int, int]]:
        """(first window, end, full batches or 0 for the short last batch) of each element of a
        group."""
        out, lo, b = [], 0, self.opts.batch_size
        for k in step_batches(n_windows, b, self.steps):
            hi = min(lo + k * b, n_windows)
            out.append((lo, hi, k if hi - lo == k * b else 0))
            lo = hi
        return out

    def _batches(
        self, offsets: np.ndarray, labels: np.ndarray, n: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """An element's offsets and classes as [batches, batch] (n full batches; 0: one short
        batch)."""
        shape = (n, self.opts.batch_size) if n else (1, offsets.size)
        return offsets.reshape(shape), labels.reshape(shape)


# Batches of a trial element run in the mode on trial and timed: enough to time a step, few enough
# that the slower mode and the scan's compile cost the run little (the scan's length compiled for
# the trial serves groups' last elements after).
TRIAL_BATCHES = 32


def _finished(state: Any, t0: float) -> float:
    """Seconds since ``t0`` once ``state`` is computed (JAX returns before the work is done)."""
    import jax

    jax.block_until_ready(state)
    return time.perf_counter() - t0
