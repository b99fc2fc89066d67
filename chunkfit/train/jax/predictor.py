"""``Predictor`` on JAX: a model's outputs for windows gathered from a block's raw samples, in
batches of one size.

The same contract as chunkfit.train.tensorflow.predictor: every batch holds exactly
``batch_size`` windows (the last one padded with copies of the block's last window), so a
window's score depends only on the batch it falls in. The block's samples cross into JAX once;
each batch is then one compiled call, the gather and the model's stateless forward pass with the
weights as they are now (passed in, so that a model still training scores its current weights),
dispatched from Python while earlier batches run (``LOOP = "dispatch"``). Looping the batches
inside one compiled call (``"map"``, a ``lax.map``) spares the dispatch but runs the loop's body
slower on a CPU. The gather promises XLA its indices are in bounds (they are: offsets are padded
with the block's last offset), which spares a bounds check per element. The samples are padded up
to one of 8 lengths per power of two, so blocks of other lengths share a few compiled functions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..steps import bucket
from .engine import compilation_cache

if TYPE_CHECKING:
    import keras

# how a block's batches run: "dispatch" (one call per batch) or "map" (one call per block)
LOOP = "dispatch"


def gather(samples: Any, offsets: Any, window: int) -> Any:
    """The windows ``samples[o : o + window]`` of ``offsets`` (each in bounds): float32
    [len(offsets), window, channels]."""
    import jax.numpy as jnp

    at = offsets[:, None] + jnp.arange(window, dtype=offsets.dtype)
    return samples.at[at].get(mode="promise_in_bounds")


class Predictor:
    """Outputs of ``model`` for windows of ``window`` samples, ``batch_size`` at a time."""

    def __init__(self, model: keras.Model, window: int, n_channels: int, batch_size: int) -> None:
        import jax

        compilation_cache()
        self.model, self.batch_size, self.n_channels = model, batch_size, n_channels
        self.loop = LOOP

        def scores(trainable: Any, non_trainable: Any, samples: Any, offsets: Any) -> Any:
            y, _ = model.stateless_call(
                trainable, non_trainable, gather(samples, offsets, window), training=False
            )
            return y

        def block(trainable: Any, non_trainable: Any, samples: Any, offsets: Any) -> Any:
            return jax.lax.map(lambda o: scores(trainable, non_trainable, samples, o), offsets)

        self._batch = jax.jit(scores)
        self._block = jax.jit(block)

    def __call__(self, samples: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """float32 [len(offsets), outputs]: the outputs for the windows
        ``samples[o : o + window]``."""
        import jax

        b, n = self.batch_size, int(offsets.size)
        batches = -(-n // b) if self.loop == "dispatch" else bucket(-(-n // b))
        padded = np.full((batches, b), offsets[-1], dtype=np.int32)
        padded.reshape(-1)[:n] = offsets
        x = np.zeros((bucket(samples.shape[0]), self.n_channels), dtype=np.float32)
        x[: samples.shape[0]] = samples
        m = self.model
        weights = (
            [v.value for v in m.trainable_variables],
            [v.value for v in m.non_trainable_variables],
        )
        if self.loop == "dispatch":
            on_device = jax.device_put(x)
            outs = [self._batch(*weights, on_device, o) for o in padded]
            out = np.concatenate([np.asarray(o) for o in outs])
        else:
            out = np.asarray(self._block(*weights, x, padded)).reshape(batches * b, -1)
        return out[:n].astype(np.float32, copy=False)
