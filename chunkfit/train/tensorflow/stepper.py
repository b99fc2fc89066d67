"""Several training steps per element of the input pipeline, each the model's own ``train_step`` on
windows the input pipeline copied (on a CPU) or the compiled step gathers (on a GPU).

On a CPU a model as small as baseline-cnn spends a step on fixed costs, and ``model.fit`` adds its
own per step (taking the next batch out of the tf.data iterator inside Keras's compiled loop), so
fit runs well below the same step run back to back on one constant batch. ``Stepper`` is a thin
model around the user's: ``fit`` hands it elements of up to ``steps_per_execution`` batches of
window offsets and class indices (``chunkfit.train.tensorflow.pipeline.train_dataset``), with the
block's raw samples beside them (``fit(..., samples=...)``), and its compiled loop runs, for each
batch in turn, the gather of its windows (``pipeline.windows_at``), the batch
(``pipeline.batch_of``: standardisation, augmentation, one-hot labels, class weights) and the
wrapped model's own ``train_step``; with ``gathered`` the elements hold the windows, copied by
numpy in the input pipeline (on a CPU, where numpy copies windows faster than TensorFlow's gather:
chunkfit.train.tensorflow.pipeline).

Loss, optimizer, metrics and any custom ``train_step`` are the wrapped model's, batch by batch, as
``fit`` would run them, with one difference: where the model keeps Keras's own ``train_step`` and
its compiled metrics are all Keras's own (PR-AUC, precision, recall, accuracy...), they are
updated once per element, on the labels and predictions of all its batches, instead of after each
batch: those metrics add counts and sums, so their results are the same up to float rounding, and
the per-batch update is a sizeable share of a small model's step. A metric of the user's own is
updated batch by batch.

With ``fuse``, a plain Adam updates each variable in one kernel (chunkfit.train.tensorflow.fused).
With ``jit`` the gather and the step of a full batch are one XLA computation: XLA fuses the gather
with the first layer, so the step runs about as fast as on one constant batch. With ``halves``
each full batch's forward and backward pass run as independent halves on two threads
(chunkfit.train.tensorflow.halves). The batch size is part of the traced shapes (TensorFlow runs a
step traced for unknown batch sizes slower), and the short last batch of a block gets a compiled
step of its own (without XLA).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import keras

from .fused import fused_adam
from .halves import split_batch
from .pipeline import batch_of, samples_spec, windows_at

if TYPE_CHECKING:
    from ..augment import Augmenter
    from .autotune import JitChoice


class Stepper(keras.Model):
    """Trains ``model`` (compiled) on elements that hold several batches; see the module docstring.

    ``window`` and ``n_classes`` shape the batches; ``normalize`` standardises the gathered windows
    and ``class_weights`` (one per class index) weighs them, as Keras's ``class_weight`` would;
    ``augment`` augments training batches, its draws keyed by the optimizer's step count.
    """

    def __init__(
        self,
        model: keras.Model,
        *,
        window: int,
        n_classes: int,
        jit: bool = False,
        normalize: Callable[[Any], Any] | None = None,
        class_weights: list[float] | None = None,
        gathered: bool = False,
        fuse: bool = False,
        halves: int = 1,
        augment: Augmenter | None = None,
        targets: int = 0,
    ) -> None:
        super().__init__(name="chunkfit_stepper")
        self.wrapped = model
        self.jit = jit  # the step under XLA, unless ``choice`` says
        self.choice: JitChoice | None = (
            None  # set before the first step: chunkfit.train.tensorflow.autotune
        )
        # Elements hold the windows, gathered in the input pipeline (``train_dataset``'s
        # ``window``), instead of their offsets.
        self.gathered = gathered
        # Keras's Adam update as one kernel per variable (chunkfit.train.tensorflow.fused); off, the
        # step is Keras's op for op, and its logs equal model.fit's to the last digit.
        self.fuse = fuse
        # Each full batch's forward and backward pass as this many independent slices, run side by
        # side by TensorFlow's inter-op threads (chunkfit.train.tensorflow.halves).
        self.halves = halves
        self.built = True
        self.history = None  # fit returns it; the run's History lives with the wrapped model
        self._window = window
        self._batch = partial(batch_of, n_classes=n_classes, normalize=normalize, targets=targets)
        self._n_classes = n_classes
        self._class_weights = class_weights
        self._augment = augment
        self._samples: Any = None  # the raw samples of the block being trained
        # The wrapped model's optimizer, so that nothing here creates optimizer state of its own.
        self.compile(optimizer=model.optimizer, steps_per_execution=1)
        self._short: Any = None
        self._wholes: dict[bool, Any] = {}
        self._spec: Any = None
        self._tracing: threading.Thread | None = None
        # Held while a step is traced: the one that defers the metrics swaps the wrapped model's
        # compute_metrics for the length of its trace (see ``_one_kept``).
        self._trace_lock = threading.RLock()

    def prepare(self, element_spec: Any, n_channels: int) -> None:
        """Build the optimizer and metrics and trace the step for full batches, before any data
        arrives (chunkfit calls this while the first block loads)."""
        self.build_state(element_spec, n_channels)
        if self._own_loop():
            self.whole(self._next_mode()).get_concrete_function()

    def fit(self, x: Any = None, *args: Any, samples: Any = None, **kwargs: Any) -> Any:
        """``keras.Model.fit`` on a dataset of multi-batch elements whose windows start in
        ``samples`` (float32 [samples, channels]; see the module docstring)."""
        self._samples = samples
        self.build_state(x.element_spec, int(samples.shape[-1]))
        try:
            return super().fit(x, *args, **kwargs)
        # no thread of TensorFlow's outlives the call (one still in it at exit aborts the process)
        finally:
            self._wait_for_short()
            self._samples = None

    def build_state(self, element_spec: Any, n_channels: int) -> None:
        """Create the variables the first step would create inside the trace: tf.function then
        traces it again (optimizer slots: a third of a second for baseline-cnn). The compiled
        metrics are built too (their state is discarded by fit's reset), so that the step can start
        its loop from their results and be traced once."""
        import tensorflow as tf

        model = self.wrapped
        if model.optimizer is not None and not model.optimizer.built:
            model.optimizer.build(model.trainable_variables)
        if _default_logs(model) and not all(getattr(m, "built", True) for m in model.metrics):
            # Built from shapes alone: labels stand in for predictions (a model's first eager call
            # would cost a tenth of a second).
            y = tf.zeros([1, self._n_classes], dtype=tf.float32)
            model.compute_metrics(None, y, y)
        if self._spec is None:  # one trace each, whatever the number of batches in an element
            self._spec = (samples_spec(n_channels), *element_spec)
            self._short = tf.function(
                self._train_short, input_signature=self._spec, autograph=False
            )

    def whole(self, jit: bool) -> Any:
        """The compiled loop for elements of full batches, its step under XLA or not (each built
        once)."""
        import tensorflow as tf

        if jit not in self._wholes:
            defer = _deferrable(self.wrapped, self._n_classes)
            one, loop = (
                (self._one_kept, self._train_kept) if defer else (self._one, self._train_whole)
            )
            step = tf.function(one, jit_compile=True, autograph=False) if jit else one
            self._wholes[jit] = tf.function(
                partial(loop, step), input_signature=self._spec[:-1], autograph=False
            )
        return self._wholes[jit]

    def _one(self, samples: Any, offsets: Any, labels: Any) -> Any:
        """One full batch: its windows gathered from ``samples``, then the model's train step."""
        with (
            self._trace_lock,
            fused_adam(self._fused_optimizer()),
            split_batch(self.wrapped, self.halves),
        ):
            return self.wrapped.train_step(self._batch_of(samples, offsets, labels))

    def _one_kept(self, samples: Any, offsets: Any, labels: Any) -> tuple[Any, ...]:
        """``_one`` without the update of the compiled metrics: it returns the batch's one-hot
        labels, predictions (float32, as the metrics read them) and, with class weights, its
        weights, for ``_train_kept`` to update them once."""
        import tensorflow as tf

        model = self.wrapped
        kept: list[Any] = []

        def keep(x: Any, y: Any, y_pred: Any, sample_weight: Any = None) -> dict[str, Any]:
            kept.extend(t for t in (y, tf.cast(y_pred, tf.float32), sample_weight) if t is not None)
            return {}

        # Keras's train_step ends with self.compute_metrics(x, y, y_pred, sample_weight)
        with self._trace_lock, fused_adam(self._fused_optimizer()), split_batch(model, self.halves):
            object.__setattr__(model, "compute_metrics", keep)
            try:
                model.train_step(self._batch_of(samples, offsets, labels))
            finally:
                object.__delattr__(model, "compute_metrics")
        return tuple(kept)

    def _fused_optimizer(self) -> Any:
        return self.wrapped.optimizer if self.fuse else None

    def _batch_of(self, samples: Any, offsets: Any, labels: Any) -> tuple[Any, ...]:
        """The batch of ``offsets`` (or, ``gathered``, of the windows they hold) and ``labels``."""
        import tensorflow as tf

        weights = (
            None if self._class_weights is None else tf.constant(self._class_weights, tf.float32)
        )
        windows = offsets if self.gathered else windows_at(samples, offsets, self._window)
        return self._batch(
            windows,
            labels,
            class_weights=weights,
            augment=self._augment,
            step=None if self._augment is None else self.wrapped.optimizer.iterations,
        )

    def _own_loop(self) -> bool:
        import tensorflow as tf

        return not self.run_eagerly and not tf.distribute.has_strategy()

    def make_train_function(self, force: bool = False) -> Any:
        """Keras's loop calls this function once per element. It picks the compiled step for full
        batches or the one for the short last batch; the latter is compiled in the background while
        the first full element trains.
        Under a distribution strategy, or run eagerly, Keras's own function runs ``train_step``."""
        current: Any = getattr(self, "train_function", None)
        if current is not None and not force:
            return current
        if not self._own_loop():
            return super().make_train_function(force)

        def train_function(iterator: Any) -> Any:
            element = next(iterator)
            if int(element[-1]) < element[0].shape[1]:
                self._wait_for_short()
                return self._short(self._samples, *element)
            jit = self._next_mode()
            t0 = time.perf_counter()
            logs = self.whole(jit)(
                self._samples, *element[:-1]
            )  # returns when the element has trained
            if self.choice is not None and not self.choice.decided:
                self.choice.timed(jit, time.perf_counter() - t0, int(element[0].shape[0]))
            if self._tracing is None:
                self._tracing = threading.Thread(target=self._trace_short, name="chunkfit-trace")
                self._tracing.start()
            return logs

        self.train_function = train_function
        return train_function

    def _next_mode(self) -> bool:
        return self.choice.next_mode() if self.choice is not None else self.jit

    def _trace_short(self) -> None:
        try:
            self._short.get_concrete_function()
        except Exception:  # noqa: BLE001 - the step is traced again where it runs, and raises there
            pass

    def _wait_for_short(self) -> None:
        if self._tracing is not None:
            self._tracing.join()

    def reset_metrics(self) -> None:
        """``fit`` starts by resetting metrics: the wrapped model's are the ones that count."""
        super().reset_metrics()
        self.wrapped.reset_metrics()

    def call(self, inputs: Any, training: bool = False) -> Any:
        return self.wrapped(inputs, training=training)

    def train_step(self, data: Any) -> Any:
        """One element, for Keras's own loop (see ``make_train_function``)."""
        import tensorflow as tf

        offsets, labels, last = data
        return tf.cond(
            last < tf.shape(offsets)[1],
            lambda: self._train_short(self._samples, offsets, labels, last),
            lambda: self._train_whole(self._one, self._samples, offsets, labels),
        )

    def _train_whole(self, one_step: Any, samples: Any, offsets: Any, labels: Any) -> Any:
        """Every batch of the element is full: ``one_step`` on each, in one loop.

        ``offsets`` and ``labels`` are [batches, batch]; batch k is the windows of ``offsets[k]``.
        """
        import tensorflow as tf

        model = self.wrapped
        if _default_logs(model) and all(getattr(m, "built", True) for m in model.metrics):
            # Keras's own train_step returns the metric results, so the loop can start from them
            # and trace the step once (tracing is a second or so of an epoch at this model size).
            first, logs = 0, model.get_metrics_result()
        else:  # a custom train_step may log anything: the first step gives the loop its logs
            first, logs = 1, self._one(samples, offsets[0], labels[0])

        def step(k: tf.Tensor, _: Any) -> tuple[tf.Tensor, Any]:
            return k + 1, one_step(samples, offsets[k], labels[k])

        _, logs = tf.while_loop(
            lambda k, _: k < tf.shape(offsets)[0], step, (tf.constant(first), logs)
        )
        return logs

    def _train_kept(self, one_step: Any, samples: Any, offsets: Any, labels: Any) -> Any:
        """As ``_train_whole``, with ``one_step`` a ``_one_kept``: the compiled metrics are updated
        once, after the loop, on the labels, predictions and weights of every batch."""
        import tensorflow as tf

        n, b = tf.shape(offsets)[0], offsets.shape[1]
        shapes = [[b, self._n_classes]] * 2 + ([] if self._class_weights is None else [[b]])
        kept = tuple(tf.TensorArray(tf.float32, size=n, element_shape=s) for s in shapes)

        def step(k: tf.Tensor, kept: tuple[Any, ...]) -> tuple[tf.Tensor, tuple[Any, ...]]:
            batch = one_step(samples, offsets[k], labels[k])
            return k + 1, tuple(a.write(k, t) for a, t in zip(kept, batch, strict=True))

        _, kept = tf.while_loop(lambda k, _: k < n, step, (tf.constant(0), kept))
        y, y_pred, *weights = (a.concat() for a in kept)
        return self.wrapped.compute_metrics(
            None, y, y_pred, sample_weight=weights[0] if weights else None
        )

    def _train_short(self, samples: Any, offsets: Any, labels: Any, last: Any) -> Any:
        """The element is the short last batch alone, padded to the batch size; ``last`` is how many
        windows are real."""
        with self._trace_lock, fused_adam(self._fused_optimizer()):
            return self.wrapped.train_step(
                self._batch_of(samples, offsets[0][:last], labels[0][:last])
            )


def _default_logs(model: keras.Model) -> bool:
    """Whether ``model.train_step`` returns ``model.get_metrics_result()``, as Keras's own does."""
    kind = type(model)
    return (
        kind.train_step is keras.Model.train_step
        and kind.compute_metrics is keras.Model.compute_metrics
    )


def _deferrable(model: keras.Model, n_classes: int) -> bool:
    """Whether the compiled metrics of ``model`` can be updated once on many batches instead of
    batch by batch (``Stepper._train_kept``): Keras's own ``train_step`` and ``compute_metrics``,
    one output of ``n_classes`` scores per window, and only Keras's own metrics (confusion counts,
    sums and means of per-window values, which add up across batches); a metric of the user's own
    might not."""
    compiled = getattr(model, "_compile_metrics", None)
    if not _default_logs(model) or compiled is None or not compiled.built or not compiled.metrics:
        return False
    try:
        outputs = list(model.outputs)
    except (AttributeError, TypeError, ValueError):  # a subclassed model has none
        return False
    if len(outputs) != 1 or tuple(outputs[0].shape[1:]) != (n_classes,):
        return False
    return all(
        _keras_own(type(m)) and _keras_own(getattr(m, "_fn", None) or type(m))
        for m in compiled.metrics
    )


def _keras_own(thing: Any) -> bool:
    return getattr(thing, "__module__", "").startswith("keras.")
