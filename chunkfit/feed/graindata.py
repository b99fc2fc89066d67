"""``chunkfit.dataset(kind="grain")``: a Grain ``MapDataset`` over the batches of chunkfit's epochs.

Element i of the source is batch i of the run: the epochs one after the other, each epoch's groups
of blocks in chunkfit's order, each group's windows shuffled (chunkfit.core.blocks) and cut into
batches of ``batch_size``. Random access is by group: Grain's reading threads ask for many batches
at once, across a few groups; the first thread to ask for a group reads it while the others that
ask wait for that read, and the group is let go once all its batches were taken, so reading the
elements in order reads each group once. The groups held are behind a lock: a thread never takes
another group's windows. Because the order is chunkfit's, the dataset
needs no ``shuffle``; Grain's iterator ``get_state``/``set_state`` (its next index) resume it.
"""

from __future__ import annotations

import bisect
import dataclasses
import threading
from concurrent.futures import Future
from typing import Any

import grain
import numpy as np

from ..core.blocks import BlockData
from .source import Feed

# groups held at most: Grain's threads ask for a few groups' batches at once
HELD = 4


class BatchSource:
    """Grain's random-access source of the batches of epochs ``epoch`` .. ``epoch + epochs -
    1``; see the module docstring. Picklable: a worker's copy opens the store again."""

    def __init__(self, feed: Feed, *, batch_size: int, epoch: int, epochs: int) -> None:
        self.feed, self.batch_size, self.epoch, self.epochs = feed, batch_size, epoch, epochs
        b = batch_size
        # batches of each group, epoch by epoch (with mix > 1 the groups differ by epoch)
        sizes = [
            [-(-feed.group_windows(g) // b) for g in feed.groups(epoch + e)] for e in range(epochs)
        ]
        self._starts = np.cumsum([0] + [n for epoch_sizes in sizes for n in epoch_sizes])
        self._per_epoch = len(sizes[0])
        self._held: dict[int, _Held] = {}
        self._lock = threading.Lock()

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
        """Group ``g`` of the run, read by the first thread to ask for it while the others that
        ask wait for that read; it is let go once all its batches were taken (or ``HELD`` newer
        groups came, under random access)."""
        with self._lock:
            held = self._held.get(g)
            first = held is None
            if held is None:
                held = self._held[g] = _Held(Future())
                while len(self._held) > HELD:  # the oldest read goes
                    del self._held[next(iter(self._held))]
        if first:
            try:
                epoch, k = self.epoch + g // self._per_epoch, g % self._per_epoch
                held.data.set_result(self.feed.read(epoch, k, self.feed.groups(epoch)[k]))
            except BaseException as err:
                held.data.set_exception(err)
                with self._lock:
                    self._held.pop(g, None)
                raise
        data = held.data.result()
        with self._lock:
            held.taken += 1
            if held.taken >= self._starts[g + 1] - self._starts[g]:
                self._held.pop(g, None)
        return data

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("_held", "_lock")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _held={}, _lock=threading.Lock())


@dataclasses.dataclass
class _Held:
    """A group being read or read, and how many of its batches were taken."""

    data: Future[BlockData]
    taken: int = 0


def grain_dataset(feed: Feed, *, batch_size: int, epoch: int, epochs: int) -> Any:
    """The ``grain.MapDataset`` of ``BatchSource``."""
    return grain.MapDataset.source(
        BatchSource(feed, batch_size=batch_size, epoch=epoch, epochs=epochs)
    )
