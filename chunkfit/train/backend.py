"""Which Keras backend, hence which engine, a process trains and scores with.

Keras picks its backend once, when it is first imported: ``KERAS_BACKEND`` in the environment,
else ``backend`` in ``$KERAS_HOME/keras.json`` (``~/.keras``), else TensorFlow. chunkfit follows
the same choice, and ``chunkfit train --backend jax`` sets ``KERAS_BACKEND`` before Keras loads.
TensorFlow (chunkfit.train.tensorflow) is the default engine; JAX (chunkfit.train.jax) is the other.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

from ..errors import MissingExtraError, UsageError

BACKENDS = ("tensorflow", "jax")


def keras_backend() -> str:
    """The backend Keras runs (or will run) in this process, without importing Keras."""
    if "keras" in sys.modules:
        name = str(sys.modules["keras"].backend.backend())
    else:
        name = os.environ.get("KERAS_BACKEND") or configured_backend() or "tensorflow"
    if name not in BACKENDS:
        raise UsageError(
            f"KERAS_BACKEND={name}: chunkfit trains and scores on tensorflow or jax; set "
            "KERAS_BACKEND=tensorflow or jax"
        )
    if name == "jax" and "keras" not in sys.modules and importlib.util.find_spec("jax") is None:
        raise MissingExtraError(
            "the JAX backend needs the jax package: pip install 'chunkfit[jax]', or train on "
            "TensorFlow (unset KERAS_BACKEND)"
        )
    return name


def use_backend(name: str | None) -> None:
    """Make ``name`` the backend Keras loads (``--backend``); refused once Keras runs another."""
    if name is None:
        return
    if name not in BACKENDS:
        raise UsageError(f"--backend must be tensorflow or jax (received {name!r})")
    if "keras" in sys.modules and sys.modules["keras"].backend.backend() != name:
        raise UsageError(
            f"--backend {name}: Keras already runs on "
            f"{sys.modules['keras'].backend.backend()} in this process; set KERAS_BACKEND before "
            "Keras is imported"
        )
    os.environ["KERAS_BACKEND"] = name


def configured_backend() -> str | None:
    """The backend named in Keras's keras.json (``$KERAS_HOME``, else ``~/.keras``), if any."""
    home = os.environ.get("KERAS_HOME") or str(Path("~/.keras").expanduser())
    try:
        return json.loads((Path(home) / "keras.json").read_text()).get("backend")
    except (OSError, ValueError, AttributeError):
        return None
