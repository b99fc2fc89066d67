"""Import TensorFlow without its start-up chatter on stderr (oneDNN and CPU-feature notices).

TensorFlow 2.21 writes these from C++ before any logging setting applies, so the only way to keep
a CLI's stderr to the one line a user needs is to point file descriptor 2 elsewhere meanwhile.
Set ``TF_CPP_MIN_LOG_LEVEL=0`` to see them.
"""

from __future__ import annotations

import os
import sys


def import_tensorflow_quietly() -> None:
    if "tensorflow" in sys.modules or os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2") in ("0", "1"):
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        import tensorflow as tf

        tf.constant(0.0) + 1.0  # the CPU-feature notice comes with the first op
        import keras  # noqa: F401
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
