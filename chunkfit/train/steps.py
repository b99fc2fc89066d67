"""Step planning every engine shares: a run's shapes, how a group's batches are cut into training
elements, and the sizes compiled shapes are rounded to.

A training element is one compiled call of an engine: up to ``MAX_STEPS`` batches, and unless
``--steps-per-execution`` asks for more, batches of at most ``ELEMENT_BYTES`` of windows in all.
Callbacks and progress hear of an element's batches together, so the cap keeps them timely; each
element costs a compiled call and a pass through the loop, so the cap stays large.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

MAX_STEPS = 256
ELEMENT_BYTES = 16 << 20


@dataclasses.dataclass(frozen=True)
class Shapes:
    """What every window of a run looks like: samples, channels, classes."""

    window: int
    channels: int
    classes: int
    targets: int = 0  # a picker's per-sample target columns after the channels (core.picks)

    @property
    def columns(self) -> int:
        """Columns of a block's samples: the channels, then any target columns."""
        return self.channels + self.targets


def batch_bytes(batch_size: int, window: int, n_channels: int, n_classes: int = 0) -> int:
    """Bytes of one batch of gathered float32 windows (and of its one-hot labels)."""
    return batch_size * (window * n_channels + n_classes) * 4


def element_steps(batch_size: int, window: int, n_channels: int) -> int:
    """Default batches per training element: MAX_STEPS, or fewer when they would exceed
    ELEMENT_BYTES."""
    return max(1, min(MAX_STEPS, ELEMENT_BYTES // batch_bytes(batch_size, window, n_channels)))


def step_batches(n_windows: int, batch_size: int, steps: int) -> list[int]:
    """Batches in each training element of a group of ``n_windows``: full elements of ``steps``
    full batches, the rest of the full batches, then the short last batch on its own.

    Example: 1,000 windows, batch 64, 4 steps: 15 full batches and 40 windows -> [4, 4, 4, 3, 1].
    """
    full, short = divmod(n_windows, batch_size)
    groups, rest = divmod(full, steps)
    return [steps] * groups + ([rest] if rest else []) + ([1] if short else [])


def bucket(n: int) -> int:
    """``n`` rounded up to one of 8 sizes per power of two: arrays of other lengths then share a
    few compiled shapes, at most 1/8 padding. Example: 1,000 -> 1,024; 1,100 -> 1,152."""
    if n <= 8:
        return max(n, 1)
    step = 1 << max(n.bit_length() - 4, 0)
    return -(-n // step) * step


def cache_dir() -> Path:
    """Where engines keep what they measured or compiled for this machine
    (``CHUNKFIT_CACHE_DIR``, else ``~/.cache/chunkfit``)."""
    root = os.environ.get("CHUNKFIT_CACHE_DIR")
    return Path(root) if root else Path.home() / ".cache" / "chunkfit"
