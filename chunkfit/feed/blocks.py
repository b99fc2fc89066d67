"""``chunkfit.blocks``: the blocks of an epoch in chunkfit's shuffled order, as numpy arrays, with a
state a loop can save and resume from.

Epoch e visits the groups of blocks in ``block_order(seed, e)`` and each group's windows in
``window_order(seed, e, k)`` (chunkfit.core.blocks), exactly as ``chunkfit train`` does, so the
state is three numbers: seed, epoch and how many groups of the epoch were yielded (with the
settings that decide the order, to check a resume against). The next group is
read in a background thread while the caller trains on the current one: at most two groups of
arrays are held at once.
"""

from __future__ import annotations

import hashlib
import json
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from ..core.blocks import Block
from ..errors import UsageError
from .source import Feed

Arrays = tuple[np.ndarray, np.ndarray, "np.ndarray | None"]

# what a state must share with the iterator it resumes
SETTINGS = ("seed", "split", "blocks", "chunk", "mix", "shuffle", "layout")


def layout(blocks: list[Block]) -> str:
    """A short hash of the blocks' (start, windows): another store, window, stride or split of the
    same size changes it.

    Example: blocks at 0 and 100 of 100 windows each hash ``[[0, 100], [100, 100]]``.
    """
    text = json.dumps([[b.start, b.n_windows] for b in blocks])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


class Blocks:
    """An iterator over ``(x, y, sample_weight)``, a group of blocks at a time, over ``epochs``
    epochs from ``epoch``; see the module docstring. ``len()`` is how many groups it yields in
    all."""

    def __init__(self, feed: Feed, *, epoch: int = 0, epochs: int = 1, prefetch: bool = True):
        if epoch < 0 or epochs < 1:
            raise UsageError(
                f"epoch must be >= 0 and epochs >= 1 (received epoch={epoch}, epochs={epochs})"
            )
        self.feed = feed
        self._first, self._stop = epoch, epoch + epochs
        self._epoch, self._position = epoch, 0
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="chunkfit-feed") if prefetch else None
        self._pending: tuple[tuple[int, int], Future[Arrays]] | None = None

    # -- what the loop sees -----------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        """The epoch the next group belongs to."""
        return self._epoch

    @property
    def classes(self) -> list[int]:
        """The class values, in the order of the class indices of ``y``."""
        return self.feed.classes

    @property
    def class_weight(self) -> dict[int, float] | None:
        """Class index -> weight, as Keras's ``class_weight`` (None: unweighted)."""
        return self.feed.class_weight

    @property
    def normalization(self) -> dict[str, Any]:
        """What the windows were standardised by (run.json's ``normalization``)."""
        return self.feed.normalizer.to_dict()

    def epoch_windows(self) -> int:
        """Windows one epoch yields."""
        return self.feed.epoch_windows()

    def __len__(self) -> int:
        return len(self.feed.groups(self._first)) * (self._stop - self._first)

    def __iter__(self) -> Blocks:
        return self

    def __next__(self) -> Arrays:
        while self._epoch < self._stop:
            groups = self.feed.groups(self._epoch)
            if self._position < len(groups):
                here = (self._epoch, self._position)
                out = self._take(here)
                self._position += 1
                self._ahead()
                return out
            self._epoch, self._position = self._epoch + 1, 0
        self.close()
        raise StopIteration

    # -- state ------------------------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        """Where the iterator is, as a small JSON-able dict: the groups yielded so far are done
        (after an epoch's last group: the next epoch, at position 0). The settings that decide the
        order ride along, ``layout`` a short hash of the training blocks, so that ``set_state``
        can tell a state of other settings or another store."""
        epoch, position = self._epoch, self._position
        if position >= len(self.feed.groups(epoch)):
            epoch, position = epoch + 1, 0
        plan = self.feed.plan
        return {
            "seed": self.feed.opts.blocks.seed,
            "epoch": epoch,
            "position": position,
            "split": self.feed.split_name,
            "blocks": len(plan.train_blocks),
            "chunk": plan.chunk,
            "mix": plan.mix,
            "shuffle": plan.shuffle and self.feed.opts.blocks.shuffle_windows,
            "layout": layout(plan.train_blocks),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` (a ``get_state()`` of an iterator over the same store and
        options): the next group is the first one not yet yielded then."""
        mine = self.get_state()
        differ = [k for k in SETTINGS if state.get(k) != mine[k]]
        if differ:
            raise UsageError(
                f"this state was saved by an iterator with other settings or another store "
                f"({', '.join(differ)}: {[state.get(k) for k in differ]}, here "
                f"{[mine[k] for k in differ]}); resume with the store and the seed, split, chunk, "
                "mix and shuffle it was saved with"
            )
        epoch, position = int(state["epoch"]), int(state["position"])
        if not self._first <= epoch <= self._stop:
            raise UsageError(
                f"this state is at epoch {epoch}, outside this iterator's epochs "
                f"{self._first}..{self._stop - 1}"
            )
        n_groups = len(self.feed.groups(epoch))
        if not 0 <= position <= n_groups:
            raise UsageError(
                f"this state is at group {position} of epoch {epoch}, which has {n_groups} "
                "groups; pass a state get_state() returned"
            )
        self._epoch, self._position = epoch, position
        self._pending = None

    # -- reading ----------------------------------------------------------------------------------
    def _read(self, at: tuple[int, int]) -> Arrays:
        epoch, k = at
        group = self.feed.groups(epoch)[k]
        return self.feed.arrays(self.feed.read(epoch, k, group))

    def _take(self, at: tuple[int, int]) -> Arrays:
        pending, self._pending = self._pending, None
        if pending is not None and pending[0] == at:
            return pending[1].result()
        return self._read(at)

    def _ahead(self) -> None:
        """Start reading the next group of this epoch (or the next one's first)."""
        if self._pool is None:
            return
        epoch, position = self._epoch, self._position
        if position >= len(self.feed.groups(epoch)):
            epoch, position = epoch + 1, 0
        if epoch < self._stop and position < len(self.feed.groups(epoch)):
            self._pending = ((epoch, position), self._pool.submit(self._read, (epoch, position)))

    def close(self) -> None:
        """Stop the reading thread and close the store if it was opened by its location (the
        iterator's end does both)."""
        self._pending = None
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self.feed.close()

    def __enter__(self) -> Blocks:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
