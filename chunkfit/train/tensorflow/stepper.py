"""Several training steps per element of the input pipeline, each the model's own ``train_step``.

On a CPU a model as small as the original question's CNN spends a step on fixed costs, and
``model.fit`` adds its own per step: taking the next batch out of the tf.data iterator inside
Keras's compiled loop. Measured on 2 cores with baseline-cnn, fit reached 0.6-0.8x of the same
train step run back to back on one constant batch, however the batches were made. ``Stepper``
is a thin model around the user's: ``fit`` hands it elements of up to ``steps_per_execution``
batches (``chunkfit.train.tensorflow.pipeline.block_dataset``: [k, batch, window, channels], their labels, and how
many windows the last batch holds) and its ``train_step`` runs the wrapped model's own
``train_step`` on each batch in turn, inside one compiled loop. Loss, optimizer, metrics and any
custom ``train_step`` are the wrapped model's, batch by batch, exactly as ``fit`` would run them.
The batch size is part of the traced shapes, and the short last batch of a block gets a compiled
step of its own: for unknown batch sizes TensorFlow ran baseline-cnn's step 10-15% slower.
With ``jit`` the full batches' step runs under XLA (chunkfit.train.tensorflow.autotune says when).
"""

from __future__ import annotations

import threading
import time
from functools import partial
from typing import TYPE_CHECKING, Any

import keras

if TYPE_CHECKING:
    from .autotune import JitChoice


class Stepper(keras.Model):
    """Trains ``model`` (compiled) on elements that hold several batches; see the module docstring."""

    def __init__(self, model: keras.Model, jit: bool = False) -> None:
        super().__init__(name="chunkfit_stepper")
        self.wrapped = model
        self.jit = jit  # the model's train_step under XLA, inside the loop, unless ``choice`` says
        self.choice: JitChoice | None = None  # set before the first step: chunkfit.train.tensorflow.autotune
        self.built = True
        self.history = None  # fit returns it; the run's History lives with the wrapped model
        # The wrapped model's optimizer, so that nothing here creates optimizer state of its own.
        self.compile(optimizer=model.optimizer, steps_per_execution=1)
        self._short: Any = None
        self._wholes: dict[bool, Any] = {}
        self._spec: Any = None
        self._tracing: threading.Thread | None = None

    def prepare(self, element_spec: Any) -> None:
        """Build the optimizer and metrics and compile the step for full batches, before any data
        arrives (chunkfit calls this while the first block loads)."""
        self.build_state(element_spec)
        if self._own_loop():
            self.whole(self._next_mode()).get_concrete_function()

    def fit(self, x: Any = None, *args: Any, **kwargs: Any) -> Any:
        """``keras.Model.fit`` on a dataset of multi-batch elements (see ``prepare``)."""
        self.build_state(x.element_spec)
        try:
            return super().fit(x, *args, **kwargs)
        finally:  # no thread of TensorFlow's outlives the call (one still in it at exit aborts the process)
            self._wait_for_short()

    def build_state(self, element_spec: Any) -> None:
        """Create the variables the first step would create inside the trace: tf.function then traces
        it again (optimizer slots: a third of a second for baseline-cnn). The compiled metrics are
        built too (their state is discarded by fit's reset), so that the step can start its loop from
        their results and be traced once."""
        import tensorflow as tf

        model = self.wrapped
        if model.optimizer is not None and not model.optimizer.built:
            model.optimizer.build(model.trainable_variables)
        if _default_logs(model) and not all(getattr(m, "built", True) for m in model.metrics):
            # Built from shapes alone: labels stand in for predictions (a model's first eager call
            # would cost a tenth of a second).
            labels = element_spec[1]
            y = tf.zeros([1, *labels.shape[2:]], dtype=labels.dtype)
            model.compute_metrics(None, y, y)
        if self._spec is None:  # one trace each, whatever the number of batches in an element
            self._spec = element_spec
            self._short = tf.function(self._train_short, input_signature=element_spec, autograph=False)

    def whole(self, jit: bool) -> Any:
        """The compiled loop for elements of full batches, its step under XLA or not (each built once)."""
        import tensorflow as tf

        if jit not in self._wholes:
            step = (tf.function(self.wrapped.train_step, jit_compile=True, autograph=False) if jit
                    else self.wrapped.train_step)
            self._wholes[jit] = tf.function(partial(self._train_whole, step), input_signature=self._spec[:-1],
                                            autograph=False)
        return self._wholes[jit]

    def _own_loop(self) -> bool:
        import tensorflow as tf

        return not self.run_eagerly and not tf.distribute.has_strategy()

    def make_train_function(self, force: bool = False) -> Any:
        """Keras's loop calls this function once per element. It picks the compiled step for full
        batches or the one for the short last batch; the latter is compiled in the background while
        the first full element trains (on baseline-cnn, tracing it took a fifth of a second).
        Under a distribution strategy, or run eagerly, Keras's own function runs ``train_step``."""
        if self.train_function is not None and not force:
            return self.train_function
        if not self._own_loop():
            return super().make_train_function(force)

        def train_function(iterator: Any) -> Any:
            element = next(iterator)
            if int(element[-1]) < element[0].shape[1]:
                self._wait_for_short()
                return self._short(*element)
            jit = self._next_mode()
            t0 = time.perf_counter()
            logs = self.whole(jit)(*element[:-1])  # returns when the element has trained
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

        parts, last = tuple(data[:-1]), data[-1]
        return tf.cond(last < tf.shape(parts[0])[1], lambda: self._train_short(*parts, last),
                       lambda: self._train_whole(self.wrapped.train_step, *parts))

    def _train_whole(self, one_step: Any, *parts: Any) -> Any:
        """Every batch of the element is full: the model's train_step on each, in one loop.

        ``parts`` are the element's windows, labels and (with class weights) sample weights, each
        [batches, batch, ...]; batch k is ``(x[k], y[k][, w[k]])``, as Keras's fit hands it over.
        """
        import tensorflow as tf

        model = self.wrapped
        if _default_logs(model) and all(getattr(m, "built", True) for m in model.metrics):
            # Keras's own train_step returns the metric results, so the loop can start from them
            # and trace the step once (tracing is a second or so of an epoch at this model size).
            first, logs = 0, model.get_metrics_result()
        else:  # a custom train_step may log anything: the first step gives the loop its logs
            first, logs = 1, model.train_step(tuple(p[0] for p in parts))

        def step(k: tf.Tensor, _: Any) -> tuple[tf.Tensor, Any]:
            return k + 1, one_step(tuple(p[k] for p in parts))

        _, logs = tf.while_loop(lambda k, _: k < tf.shape(parts[0])[0], step, (tf.constant(first), logs))
        return logs

    def _train_short(self, *element: Any) -> Any:
        """The element is the short last batch alone, padded to the batch size; its last part is how
        many windows are real."""
        last = element[-1]
        return self.wrapped.train_step(tuple(p[0][:last] for p in element[:-1]))


def _default_logs(model: keras.Model) -> bool:
    """Whether ``model.train_step`` returns ``model.get_metrics_result()``, as Keras's own does."""
    kind = type(model)
    return kind.train_step is keras.Model.train_step and kind.compute_metrics is keras.Model.compute_metrics
