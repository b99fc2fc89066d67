"""What one epoch trains under ``--oversample`` and ``--label-margin``: balanced epochs.

An epoch trains every training window whose class is not ``IGNORED`` (chunkfit.core.labels) once,
and the windows of the rarest class (counted on the training split) ``repeat`` times in all, where
``repeat`` is the whole number that brings the rarest class nearest to the share ``oversample`` of
the epoch (at least 1: a class already that common is not repeated). The copies go into the same
group of blocks as the window they copy, and the group's windows are shuffled together
(chunkfit.core.blocks.window_order over the group's enlarged count), so the epoch's content is a
pure function of the labels and its order a pure function of (seed, epoch, group): a resumed run
trains exactly what the uninterrupted one would.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .blocks import Block, epoch_indices
from .labels import Labeller


def oversample_repeat(counts: np.ndarray, share: float) -> int:
    """Times each window of the rarest class trains per epoch so that the class makes up about
    ``share`` of the epoch: round(share / (1 - share) * others / rare), at least 1 (1 when
    ``share`` is 0 or the class is absent).

    Example: counts [9_900, 100], share 0.25 -> round(1/3 * 9_900 / 100) = 33: an epoch of 9_900
    + 3_300 windows, 25.0% of them the rarest class.
    """
    c = np.asarray(counts, dtype=np.int64)
    rare = int(c.min()) if c.size else 0
    if share <= 0 or rare == 0:
        return 1
    others = int(c.sum()) - rare
    return max(1, round(share / (1 - share) * others / rare))


@dataclasses.dataclass(frozen=True)
class Balance:
    """How a run's epochs are made up: windows left out (``ignored``, by the label margin) and the
    rarest class index ``rare`` trained ``repeat`` times, from the training split's ``counts``."""

    counts: tuple[int, ...]  # training windows per class index, ignored ones left out
    ignored: int
    rare: int
    repeat: int
    share: float  # the --oversample asked for

    @classmethod
    def of(cls, counts_with_ignored: np.ndarray, share: float) -> Balance:
        """From ``class_counts(..., ignored=True)`` of the training split and ``--oversample``."""
        c = np.asarray(counts_with_ignored, dtype=np.int64)
        counts = c[:-1]
        return cls(
            tuple(int(n) for n in counts),
            int(c[-1]),
            int(np.argmin(counts)),
            oversample_repeat(counts, share),
            float(share),
        )

    @property
    def active(self) -> bool:
        """Whether an epoch differs from every training window once."""
        return self.repeat > 1 or self.ignored > 0

    def epoch_counts(self) -> tuple[int, ...]:
        """Windows of each class index one epoch trains."""
        return tuple(n * (self.repeat if i == self.rare else 1) for i, n in enumerate(self.counts))

    def epoch_windows(self) -> int:
        return sum(self.epoch_counts())

    def to_dict(self, classes: list[int]) -> dict[str, Any]:
        return {
            "oversample": self.share,
            "class": classes[self.rare],
            "repeat": self.repeat,
            "ignored_windows": self.ignored,
            "epoch_windows": self.epoch_windows(),
            "epoch_share": self.epoch_counts()[self.rare] / max(self.epoch_windows(), 1),
        }


def block_sizes(labeller: Labeller, blocks: list[Block], balance: Balance) -> list[int]:
    """Windows each block trains per epoch under ``balance`` (its ``n_windows`` when inactive).

    Labels every window of the blocks once (chunkfit.core.blocks.read_group labels them again as
    it reads them, from the same store, so both agree).
    """
    if not balance.active:
        return [b.n_windows for b in blocks]
    out = []
    for b in blocks:
        offsets = np.arange(b.n_windows, dtype=np.int64) * b.stride
        labels = labeller.labels(b.start, b.stop, offsets, b.window)
        out.append(int(epoch_indices(labels, balance.repeat, balance.rare).size))
    return out
