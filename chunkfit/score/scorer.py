"""The compiled scoring function of a model, and the engine that scores when the user chose none.

The loop that scores a store with it, block by block, is chunkfit.core.scoring.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import TYPE_CHECKING

from ..train.backend import BACKENDS, keras_backend, use_backend

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


def _chosen() -> bool:
    """Whether the backend is already decided: Keras loaded, or ``KERAS_BACKEND`` set."""
    return "keras" in sys.modules or bool(os.environ.get("KERAS_BACKEND"))


def scoring_engine() -> str:
    """The engine that scores in this process: the backend the user chose (``KERAS_BACKEND``, a
    ``--backend`` option, Keras's own keras.json, or Keras already running), else the rule measured
    by benchmarks/scoring.py: TensorFlow where it is installed (its predictor, a loop of batches in
    one graph call, scored faster than the JAX engine on the CPUs measured), else JAX.
    """
    if _chosen():
        return keras_backend()
    configured = keras_backend()
    if configured != "tensorflow":  # keras.json names another backend
        return configured
    for name in BACKENDS:
        if importlib.util.find_spec(name) is not None:
            return name
    return configured


def use_scoring_engine() -> str:
    """Make ``scoring_engine()`` the backend Keras loads in this process; returns its name. Called
    before a run's model loads."""
    name = scoring_engine()
    if not _chosen() and name != keras_backend():
        use_backend(name)
    return name
