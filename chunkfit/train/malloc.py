"""glibc's malloc arenas capped at one per core for a training process.

glibc gives a multi-threaded process up to eight malloc arenas per core, one per thread that
allocates while another holds an arena. A run's threads (TensorFlow's, tf.data's, the loader's)
allocate and free blocks, windows and tensors of changing sizes in turn across those arenas, and
each arena keeps what it freed, so a run's resident memory grows over its first minute; with one
arena per core it stays flat (measured with ``MALLOC_ARENA_MAX``; see the performance
documentation). Nothing is capped where the user set ``MALLOC_ARENA_MAX`` (their choice stands),
off Linux, or where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

from .tensorflow.threads import usable_cores

M_ARENA_MAX = -8  # glibc's malloc.h


def cap_arenas(arenas: int | None = None) -> bool:
    """At most ``arenas`` malloc arenas (default: one per core this process may use) from now on;
    those already made stay. Whether the cap was set."""
    if not sys.platform.startswith("linux") or "MALLOC_ARENA_MAX" in os.environ:
        return False
    arenas = arenas or usable_cores()
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others: no mallopt, nothing to cap
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, arenas))
