"""``chunkfit.dataset(kind="torch")``: a PyTorch ``IterableDataset`` of batches.

An epoch's groups of blocks are dealt out round robin between every loader worker of every rank:
shard s of S (S = world_size x workers, s = rank x workers + worker id) takes groups s, s + S, ...
of the epoch's order, so the shards together yield each training window once per epoch and no two
overlap. A worker reads its groups itself (the store opened again in the worker's process) and
yields them as ready batches, so the loader takes ``batch_size=None``. ``set_epoch(e)`` chooses the
epoch, as with PyTorch's ``DistributedSampler``; a loader's workers copy the dataset when they
start, so with ``persistent_workers=True`` they keep the first epoch's and never see a later
``set_epoch`` (leave it off, or make a loader per epoch).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import torch
from torch.utils.data import IterableDataset, get_worker_info

from .source import Feed


class WindowDataset(IterableDataset):  # type: ignore[type-arg]
    """Batches ``(x, y, sample_weight)`` of the feed's windows; see the module docstring.
    ``sample_weight`` is None where the feed has none."""

    def __init__(
        self,
        feed: Feed,
        *,
        batch_size: int,
        epoch: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        super().__init__()
        if rank is None or world_size is None:
            dist = torch.distributed
            ready = dist.is_available() and dist.is_initialized()
            rank = rank if rank is not None else (dist.get_rank() if ready else 0)
            world_size = (
                world_size if world_size is not None else (dist.get_world_size() if ready else 1)
            )
        if not 0 <= rank < world_size:
            from ..errors import UsageError

            raise UsageError(
                f"rank must be in 0..world_size - 1 (received rank={rank}, world_size={world_size})"
            )
        self.feed, self.batch_size, self.epoch = feed, batch_size, epoch
        self.rank, self.world_size = rank, world_size
        self._pid = os.getpid()

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next pass yields (its block and window order); not seen by a loader's
        persistent workers, which keep the copy they started with."""
        self.epoch = epoch

    def shard(self) -> tuple[int, int]:
        """(this reader's shard, how many shards): see the module docstring."""
        info = get_worker_info()
        workers, worker = (1, 0) if info is None else (info.num_workers, info.id)
        return self.rank * workers + worker, self.world_size * workers

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]]:
        if os.getpid() != self._pid:  # a forked worker: its own store handles
            state, self.feed = self.feed.__getstate__(), Feed.__new__(Feed)
            self.feed.__setstate__(state)
            self._pid = os.getpid()
        shard, shards = self.shard()
        epoch, b = self.epoch, self.batch_size
        groups = self.feed.groups(epoch)
        for k in range(shard, len(groups), shards):
            x, y, w = self.feed.arrays(self.feed.read(epoch, k, groups[k]))
            xt, yt = torch.from_numpy(x), torch.from_numpy(y)
            wt = None if w is None else torch.from_numpy(w)
            for lo in range(0, x.shape[0], b):
                yield xt[lo : lo + b], yt[lo : lo + b], None if wt is None else wt[lo : lo + b]

    def __setstate__(self, state: dict[str, object]) -> None:
        # unpickled in a spawned worker: the feed opened its store there already
        self.__dict__.update(state)
        self._pid = os.getpid()
