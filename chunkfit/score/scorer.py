"""The compiled scoring function of a model, on the engine of Keras's backend.

The loop that scores a store with it, block by block, is chunkfit.core.scoring.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import keras

    from ..train.engines import Predictor


def make_predictor(
    model: keras.Model, window: int, n_channels: int, batch_size: int = 1024
) -> Predictor:
    """The compiled scoring function of ``model`` for windows of ``window`` samples, ``batch_size``
    at a time, on the engine of Keras's backend (chunkfit.train.engines)."""
    from ..train.engines import engine_for_backend

    return engine_for_backend().predictor(model, window, n_channels, batch_size)
