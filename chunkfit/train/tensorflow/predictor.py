"""``Predictor``: a model's outputs for windows gathered from a block's raw samples, in batches of
one size.

Every batch has exactly ``batch_size`` windows (the last one of a block padded with copies of its
own last window), so the model runs one compiled function with the batch size in its shapes. A
window's score then depends only on the batch it falls in: scoring that keeps batch boundaries in
place (chunkfit.score.scorer) gives bit-identical scores whatever the block size.

A block is one call: a compiled loop over its batches, each batch's gather and forward pass one
step, which scores much faster than one call per batch. The same step under XLA (samples padded
to one length) was no faster, so scoring runs without XLA whatever the run trained with.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import keras

# batches in flight at once inside a block's call: 2 scored faster than 1, more no faster
PARALLEL = 2


class Predictor:
    """Outputs of ``model`` for windows of ``window`` samples, ``batch_size`` at a time."""

    def __init__(self, model: keras.Model, window: int, n_channels: int, batch_size: int) -> None:
        import tensorflow as tf

        self.batch_size = batch_size
        span = tf.range(window, dtype=tf.int32)

        def scores(samples: Any, offsets: Any) -> Any:
            return model(tf.gather(samples, offsets[:, None] + span), training=False)

        def block(samples: Any, offsets: Any) -> Any:
            return tf.map_fn(
                lambda o: scores(samples, o),
                offsets,
                fn_output_signature=tf.float32,
                parallel_iterations=PARALLEL,
            )

        self._block = tf.function(
            block,
            autograph=False,
            input_signature=[
                tf.TensorSpec([None, n_channels], tf.float32),
                tf.TensorSpec([None, batch_size], tf.int32),
            ],
        )

    def __call__(self, samples: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """float32 [len(offsets), outputs]: the outputs for the windows
        ``samples[o : o + window]``."""
        import tensorflow as tf

        b, n = self.batch_size, int(offsets.size)
        padded = np.empty(-(-n // b) * b, dtype=np.int32)
        padded[:n] = offsets
        padded[n:] = offsets[-1]
        out = self._block(
            tf.constant(samples, dtype=tf.float32), tf.constant(padded.reshape(-1, b))
        )
        return np.asarray(out).reshape(padded.size, -1)[:n].astype(np.float32, copy=False)
