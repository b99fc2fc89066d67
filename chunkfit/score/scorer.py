"""The compiled scoring function of a model, on the engine of Keras's backend.

The loop that scores a store with it, block by block, is chunkfit.core.scoring.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import keras

    from ..train.tensorflow.predictor import Predictor


def make_predictor(
    model: keras.Model, window: int, n_channels: int, batch_size: int = 1024
) -> Predictor:
    """The compiled scoring function of ``model`` for windows of ``window`` samples, ``batch_size``
    at a time, on the engine of Keras's backend (chunkfit.train.backend)."""
    from ..train.backend import keras_backend

    if keras_backend() == "jax":
        from ..train.jax.predictor import Predictor as JaxPredictor

        return JaxPredictor(model, window, n_channels, batch_size)  # type: ignore[return-value]
    from ..train.tensorflow.predictor import Predictor

    return Predictor(model, window, n_channels, batch_size)
