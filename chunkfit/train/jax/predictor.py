"""``Predictor`` on JAX: a model's outputs for windows gathered from a block's raw samples, in
batches of one size.

The same contract as chunkfit.train.tensorflow.predictor: every batch holds exactly
``batch_size`` windows (the last one padded with copies of the block's last window), so a
window's score depends only on the batch it falls in. A block is one compiled call, a
``lax.map`` over its batches, each the gather and the model's stateless forward pass with the
weights as they are now (passed in, so that a model still training scores its current weights).
JAX compiles per shape: a block's samples and batches are padded up to one of 8 sizes per power
of two, so blocks of other lengths share a few compiled functions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..steps import bucket
from .engine import compilation_cache
from .steps import gather

if TYPE_CHECKING:
    import keras


class Predictor:
    """Outputs of ``model`` for windows of ``window`` samples, ``batch_size`` at a time."""

    def __init__(self, model: keras.Model, window: int, n_channels: int, batch_size: int) -> None:
        import jax

        compilation_cache()
        self.model, self.batch_size, self.n_channels = model, batch_size, n_channels

        def block(trainable: Any, non_trainable: Any, samples: Any, offsets: Any) -> Any:
            def scores(o: Any) -> Any:
                y, _ = model.stateless_call(
                    trainable, non_trainable, gather(samples, o, window), training=False
                )
                return y

            return jax.lax.map(scores, offsets)

        self._block = jax.jit(block)

    def __call__(self, samples: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """float32 [len(offsets), outputs]: the outputs for the windows
        ``samples[o : o + window]``."""
        b, n = self.batch_size, int(offsets.size)
        batches = bucket(-(-n // b))
        padded = np.full(batches * b, offsets[-1], dtype=np.int32)
        padded[:n] = offsets
        rows = bucket(samples.shape[0])
        x = np.zeros((rows, self.n_channels), dtype=np.float32)
        x[: samples.shape[0]] = samples
        m = self.model
        out = self._block(
            [v.value for v in m.trainable_variables],
            [v.value for v in m.non_trainable_variables],
            x,
            padded.reshape(-1, b),
        )
        return np.asarray(out).reshape(padded.size, -1)[:n].astype(np.float32, copy=False)
