"""Several training steps per element of the input pipeline, each the model's own ``train_step``.

On a CPU a model as small as the original question's CNN spends a step on fixed costs, and
``model.fit`` adds its own per step: taking the next batch out of the tf.data iterator inside
Keras's compiled loop. Measured on 2 cores with baseline-cnn, fit reached 0.6-0.8x of the same
train step run back to back on one constant batch, however the batches were made. ``Stepper``
is a thin model around the user's: ``fit`` hands it elements of up to ``steps_per_execution``
batches ([k, batch, window, channels]) and its ``train_step`` runs the wrapped model's own
``train_step`` on each batch in turn, inside one compiled loop. Loss, optimizer, metrics and any
custom ``train_step`` are the wrapped model's, batch by batch, exactly as ``fit`` would run them.
"""

from __future__ import annotations

from typing import Any

import keras


class Stepper(keras.Model):
    """Trains ``model`` (compiled) on elements that hold several batches; see the module docstring."""

    def __init__(self, model: keras.Model) -> None:
        super().__init__(name="chunkfit_stepper")
        self.wrapped = model
        self.built = True
        self.history = None  # fit returns it; the run's History lives with the wrapped model
        # The wrapped model's optimizer, so that nothing here creates optimizer state of its own.
        self.compile(optimizer=model.optimizer, steps_per_execution=1)

    def fit(self, x: Any = None, *args: Any, **kwargs: Any) -> Any:
        """``keras.Model.fit`` on a dataset of multi-batch elements; the wrapped model's compiled
        metrics are built first (from one batch, state discarded by fit's reset) so that the
        training loop can start from their results."""
        model = self.wrapped
        if _default_logs(model) and not all(getattr(m, "built", True) for m in model.metrics):
            xs, ys = next(iter(x.take(1)))
            model.compute_metrics(xs[0], ys[0], model(xs[0], training=False))
        return super().fit(x, *args, **kwargs)

    def reset_metrics(self) -> None:
        """``fit`` starts by resetting metrics: the wrapped model's are the ones that count."""
        super().reset_metrics()
        self.wrapped.reset_metrics()

    def call(self, inputs: Any, training: bool = False) -> Any:
        return self.wrapped(inputs, training=training)

    def train_step(self, data: Any) -> Any:
        import tensorflow as tf

        xs, ys = data
        model = self.wrapped
        if _default_logs(model) and all(getattr(m, "built", True) for m in model.metrics):
            # Keras's own train_step returns the metric results, so the loop can start from them
            # and trace the step once (tracing is a second or so of an epoch at this model size).
            first, logs = 0, model.get_metrics_result()
        else:  # a custom train_step may log anything: the first step gives the loop its logs
            first, logs = 1, model.train_step((xs[0], ys[0]))

        def step(k: tf.Tensor, _: Any) -> tuple[tf.Tensor, Any]:
            return k + 1, model.train_step((xs[k], ys[k]))

        _, logs = tf.while_loop(lambda k, _: k < tf.shape(xs)[0], step, (tf.constant(first), logs))
        return logs


def _default_logs(model: keras.Model) -> bool:
    """Whether ``model.train_step`` returns ``model.get_metrics_result()``, as Keras's own does."""
    kind = type(model)
    return kind.train_step is keras.Model.train_step and kind.compute_metrics is keras.Model.compute_metrics
