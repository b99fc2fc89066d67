"""How many threads TensorFlow gives the model's arithmetic.

A model as small as the original question's CNN spends a training step on fixed per-op costs, not
arithmetic, and TensorFlow splitting each small op over every core costs more than it gains:
measured on 2 cores, baseline-cnn trained 20-30% faster with one compute thread (and one inter-op
thread), the other core left to the input pipeline, while dilated-resnet (80x the arithmetic per
window) trained 18% slower so. TensorFlow fixes these settings when its runtime starts, so they
are applied as TensorFlow is imported; in a process where TensorFlow already ran an op (a model
built before calling ``chunkfit.fit``) they stay as they are.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from ..._quiet import import_tensorflow_quietly
from ..models import SMALL_BUILTINS


def start_tensorflow(compute_threads: int | None, model: Any,
                     before: Callable[[ModuleType], None] | None = None) -> dict[str, int]:
    """Import TensorFlow with the compute threads for ``model``; returns the settings in effect
    (0 meaning TensorFlow's default of every core).

    ``compute_threads`` None picks 1 for the small built-in models on a machine without a GPU and
    TensorFlow's default otherwise; 0 keeps TensorFlow's default. A set number of compute threads
    comes with one inter-op thread. ``before(tensorflow)`` runs after these settings and before
    TensorFlow's runtime starts (chunkfit.train.tensorflow.distributed: logical devices, the strategy).
    """
    small = isinstance(model, str) and model in SMALL_BUILTINS

    def setup(tf: ModuleType) -> None:
        compute = compute_threads
        if compute is None:
            compute = 1 if small and not tf.config.list_physical_devices("GPU") else 0
        if compute > 0:
            tf.config.threading.set_intra_op_parallelism_threads(compute)
            tf.config.threading.set_inter_op_parallelism_threads(1)
        if before is not None:
            before(tf)

    if "tensorflow" in sys.modules:  # imported by the caller: configurable until its first op
        try:
            setup(sys.modules["tensorflow"])
        except RuntimeError:
            if before is not None:
                raise
    else:
        import_tensorflow_quietly(setup)
    import tensorflow as tf

    return {
        "intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
        "inter_op": tf.config.threading.get_inter_op_parallelism_threads(),
    }


# Buffers of this size or more come straight from the OS (mmap) and go back to it when freed.
MMAP_THRESHOLD = 4 << 20
_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter


def steady_heap() -> int | None:
    """Fix glibc's mmap threshold at ``MMAP_THRESHOLD``; returns it, or None where it does not apply.

    glibc raises the threshold to the size of every mmapped buffer freed (up to 32 MB), so after
    the first training element the input pipeline's 13.6 MB batches of windows come from the heap,
    whose freed space fragments and is not returned: measured on a 20M-sample store, a training
    process grew to 1.5-1.7 GB and stayed there; with the threshold fixed it stayed at 1.03-1.10 GB
    (the same as setting ``MALLOC_MMAP_THRESHOLD_``). A buffer that size is used for over a second,
    so mapping it costs nothing measurable.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc
        return None
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return MMAP_THRESHOLD if mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 else None
