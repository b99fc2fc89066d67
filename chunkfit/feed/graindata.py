"""``chunkfit.dataset(kind="grain")``: a Grain ``MapDataset`` over the batches of chunkfit's epochs.

Element i of the source is batch i of the run: the epochs one after the other, each epoch's groups
of blocks in chunkfit's order, each group's windows shuffled (chunkfit.core.blocks) and cut into
batches of ``batch_size``. Random access is by block: the source keeps the last group it read, so
reading the elements in order reads each group once. Because the order is chunkfit's, the dataset
needs no ``shuffle``; Grain's iterator ``get_state``/``set_state`` (its next index) resume it.
"""

from __future__ import annotations

import bisect
from typing import Any

import grain
import numpy as np

from ..core.blocks import BlockData
from .source import Feed


class BatchSource:
    """Grain's random-access source of the batches of epochs ``epoch`` .. ``epoch + epochs -
    1``; see the module docstring. Picklable: a worker's copy opens the store again."""

    def __init__(self, feed: Feed, *, batch_size: int, epoch: int, epochs: int) -> None:
        self.feed, self.batch_size, self.epoch, self.epochs = feed, batch_size, epoch, epochs
        b = batch_size
        # batches of each group, in the order of groups; a group's size does not depend on epoch
        sizes = [
            [-(-feed.group_windows(g) // b) for g in feed.groups(epoch + e)] for e in range(epochs)
        ]
        self._starts = np.cumsum([0] + [n for epoch_sizes in sizes for n in epoch_sizes])
        self._per_epoch = len(sizes[0])
        self._cached: tuple[int, BlockData] | None = None

    def __len__(self) -> int:
        return int(self._starts[-1])

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        if not 0 <= index < len(self):
            raise IndexError(f"batch {index} of {len(self)}")
        g = bisect.bisect_right(self._starts, index) - 1
        data = self._group(g)
        lo = (index - int(self._starts[g])) * self.batch_size
        part = BlockData(
            data.blocks,
            data.samples,
            data.offsets[lo : lo + self.batch_size],
            data.labels[lo : lo + self.batch_size],
        )
        return self.feed.arrays(part)

    def _group(self, g: int) -> BlockData:
        if self._cached is not None and self._cached[0] == g:
            return self._cached[1]
        epoch, k = self.epoch + g // self._per_epoch, g % self._per_epoch
        data = self.feed.read(epoch, k, self.feed.groups(epoch)[k])
        self._cached = (g, data)
        return data

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_cached": None}


def grain_dataset(feed: Feed, *, batch_size: int, epoch: int, epochs: int) -> Any:
    """The ``grain.MapDataset`` of ``BatchSource``."""
    return grain.MapDataset.source(
        BatchSource(feed, batch_size=batch_size, epoch=epoch, epochs=epochs)
    )
