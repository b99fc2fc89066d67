"""How many threads TensorFlow gives the model's arithmetic.

TensorFlow fixes these settings when its runtime starts, so they are applied as TensorFlow is
imported; in a process where TensorFlow already ran an op (a model built before calling
``chunkfit.fit``) they stay as they are. Which number trains fastest depends on the machine and
the model (chunkfit.train.tensorflow.threadtune measures it): one compute thread beat every core
on one machine and lost to it on another.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from types import ModuleType

from ..._quiet import import_tensorflow_quietly


def start_tensorflow(
    compute_threads: int | None | Callable[[ModuleType], int | None | tuple[int | None, int]],
    before: Callable[[ModuleType], None] | None = None,
) -> dict[str, int]:
    """Import TensorFlow with ``compute_threads`` for the model's arithmetic; returns the settings
    in effect (0 meaning TensorFlow's default of every core).

    None or 0 keeps TensorFlow's default; a set number of compute threads comes with one inter-op
    thread. A callable is asked for the number once TensorFlow is imported and before its runtime
    starts (chunkfit.train.tensorflow.threadtune measures there); it may answer (compute threads,
    inter-op threads). ``before(tensorflow)`` runs after
    these settings and before the runtime starts (chunkfit.train.tensorflow.distributed: logical
    devices, the strategy).
    """

    def setup(tf: ModuleType) -> None:
        asked = compute_threads(tf) if callable(compute_threads) else compute_threads
        set_compute_threads(tf, *(asked if isinstance(asked, tuple) else (asked,)))
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


def usable_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def set_compute_threads(tf: ModuleType, compute: int | None, inter: int = 1) -> None:
    """Before TensorFlow's runtime starts: ``compute`` threads for the model's arithmetic, with
    ``inter`` inter-op threads (one; two to run a batch's halves side by side:
    chunkfit.train.tensorflow.halves). None or 0: TensorFlow's default of every core."""
    if compute is not None and compute > 0:
        tf.config.threading.set_intra_op_parallelism_threads(compute)
        tf.config.threading.set_inter_op_parallelism_threads(inter)
