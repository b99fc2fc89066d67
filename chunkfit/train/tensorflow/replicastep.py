"""The distributed engine's step: each replica's share of a global batch, trained (or evaluated)
under ``strategy.run`` with Keras layers, loss, optimizer and metrics, not Keras's loop.

A replica's loss is sum(weight * loss) over its slice divided by the real windows of the whole
global batch, and the optimizer sums the replicas' gradients: the step is the single-process step
on the global batch, up to float32 summation order (chunkfit.train.tensorflow.distributed).
Augmentation (chunkfit.train.augment) runs on each replica's share, its draws keyed by the
optimizer's step count and the replica.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...errors import UsageError

if TYPE_CHECKING:
    import keras

    from ..augment import Augmenter
    from ..normalize import Normalizer
    from ..steps import Shapes


class ReplicaStep:
    """The compiled steps of ``model`` under ``strategy`` with ``replicas`` replicas, on global
    batches of ``batch_size`` windows of ``shapes``, standardised by ``normalizer``; ``weighted``:
    training windows carry class weights (``class_weights``, one per class index), ``augment``
    augments them."""

    def __init__(
        self,
        model: keras.Model,
        strategy: Any,
        normalizer: Normalizer,
        shapes: Shapes,
        replicas: int,
        batch_size: int,
        weighted: bool,
        class_weights: list[float] | None = None,
        augment: Augmenter | None = None,
    ) -> None:
        self.model, self.strategy, self.normalizer, self.shapes = (
            model,
            strategy,
            normalizer,
            shapes,
        )
        self.replicas, self.batch_size, self.weighted = replicas, batch_size, weighted
        self._loss = _elementwise_loss(model)
        self.class_weights, self.augment = class_weights, augment

    def compiled(self, training: bool) -> Any:
        """One compiled call per element: the replicas' train (or evaluation) step under
        ``strategy.run`` for each of its global batches, called as ``fn(samples, index, classes,
        weights, real, counts)`` (chunkfit.train.tensorflow.distributed.ShardedTensors)."""
        import tensorflow as tf

        replica_fn = self._replica_train if training else self._replica_eval
        s = self.shapes
        per = -(-self.batch_size // self.replicas)
        grid = tf.TensorSpec([None, self.replicas, per])
        spec = (
            tf.TensorSpec([None, s.channels], tf.float32),
            tf.TensorSpec([None, self.replicas, per], tf.int32),
            tf.TensorSpec([None, self.replicas, per], tf.int32),
            grid,
            grid,
            tf.TensorSpec([None], tf.float32),
        )
        strategy = self.strategy

        def loop(
            samples: Any, index: Any, classes: Any, weights: Any, real: Any, counts: Any
        ) -> Any:
            def body(k: Any) -> Any:
                strategy.run(
                    replica_fn, args=(samples, index[k], classes[k], weights[k], real[k], counts[k])
                )
                return k + 1

            return tf.while_loop(lambda k: k < tf.shape(index)[0], body, [tf.constant(0)])

        return tf.function(loop, input_signature=spec, autograph=False)

    def _windows(self, samples: Any, index: Any, classes: Any) -> tuple[Any, Any]:
        import tensorflow as tf

        r = tf.distribute.get_replica_context().replica_id_in_sync_group
        x = tf.gather(samples, index[r][:, None] + tf.range(self.shapes.window))
        return self.normalizer.apply(x), tf.one_hot(
            classes[r], self.shapes.classes, dtype=tf.float32
        )

    def _replica_train(
        self, samples: Any, index: Any, classes: Any, weights: Any, real: Any, count: Any
    ) -> None:
        import tensorflow as tf

        model = self.model
        r = tf.distribute.get_replica_context().replica_id_in_sync_group
        x, y = self._windows(samples, index, classes)
        w, mask = weights[r], real[r]
        if self.augment is not None:
            step = model.optimizer.iterations * self.replicas + tf.cast(r, tf.int64)
            x, mixed = self.augment(x, classes[r], step)
            y = tf.one_hot(mixed, self.shapes.classes, dtype=tf.float32)
            if self.class_weights is not None:  # a mixed window weighs as its new class
                new = tf.gather(tf.constant(self.class_weights, tf.float32), mixed) * mask
                w = tf.where(tf.equal(mixed, classes[r]), w, new)
        with tf.GradientTape() as tape:
            p = model(x, training=True)
            total = tf.reduce_sum(self._loss(y, p) * w)
            extra = tf.add_n(model.losses) if model.losses else tf.constant(0.0)
            loss = total / tf.maximum(count, 1.0) + extra / self.replicas
        grads = tape.gradient(loss, model.trainable_variables)
        model.optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        self._track(total, extra, mask, x, y, p, w if self.weighted else None)

    def _replica_eval(
        self, samples: Any, index: Any, classes: Any, weights: Any, real: Any, count: Any
    ) -> None:
        import tensorflow as tf

        model = self.model
        r = tf.distribute.get_replica_context().replica_id_in_sync_group
        x, y = self._windows(samples, index, classes)
        mask = real[r]
        p = model(x, training=False)
        extra = tf.add_n(model.losses) if model.losses else tf.constant(0.0)
        self._track(tf.reduce_sum(self._loss(y, p) * mask), extra, mask, x, y, p, None)

    def _track(self, total: Any, extra: Any, mask: Any, x: Any, y: Any, p: Any, w: Any) -> None:
        """The loss tracker and compiled metrics, as Keras's step updates them, for this replica's
        part: summed over replicas, the tracker gets the global batch's loss weighted by its
        windows. The metrics see the real windows only (the padding comes last): Keras's unweighted
        metrics ignore sample weights."""
        import tensorflow as tf

        model = self.model
        n = tf.reduce_sum(mask)
        model._loss_tracker.update_state(tf.math.divide_no_nan(total, n) + extra, sample_weight=n)
        k = tf.cast(n, tf.int32)
        model.compute_metrics(x[:k], y[:k], p[:k], sample_weight=None if w is None else w[:k])


def _elementwise_loss(model: keras.Model) -> Callable[[Any, Any], Any]:
    """The compiled loss of a single-output model, one value per window (no reduction)."""
    import keras

    spec = model.loss
    if isinstance(spec, (list, tuple, dict)):
        raise UsageError(
            "several workers or devices train single-output models only (the model's loss is a "
            f"{type(spec).__name__} of losses)"
        )
    fn = keras.losses.get(spec) if isinstance(spec, str) else spec
    if isinstance(fn, keras.losses.Loss):
        return fn.call  # type: ignore[no-any-return]
    return fn  # type: ignore[no-any-return]
