"""Blocks: runs of consecutive training windows read with one contiguous store read.

A block of n windows with stride S and window W starting at sample s covers samples
[s, s + (n - 1)*S + W): with stride 1 that is chunk + W - 1 samples. Blocks never cross a segment.
Each epoch visits the blocks in ``block_order(seed, epoch)``; consecutive runs of ``mix`` blocks in
that order form a group, trained together with their windows shuffled jointly. Both orders are pure
functions of (seed, epoch[, group]), so a run can continue from a cursor {seed, epoch, position}
(chunkfit.train.cursor).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

import numpy as np

from ..store import Store
from .labels import IGNORED, Labeller
from .windows import count_windows

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Block:
    """``n_windows`` windows whose first one starts at sample ``start``."""

    index: int
    start: int
    n_windows: int
    window: int
    stride: int

    @property
    def stop(self) -> int:
        """One past the last sample any window of the block touches."""
        return self.start + (self.n_windows - 1) * self.stride + self.window


def plan_blocks(ranges: np.ndarray, window: int, stride: int, chunk: int) -> list[Block]:
    """Cut the windows of every range into blocks of at most ``chunk`` consecutive windows.

    Example: one range [0, 12), window 4, stride 1, chunk 4 -> 9 windows -> blocks starting at
    0 (4 windows, samples [0, 7)), 4 (4 windows, [4, 11)) and 8 (1 window, [8, 12)).
    """
    blocks: list[Block] = []
    for a, b in np.asarray(ranges, dtype=np.int64).reshape(-1, 2):
        n = count_windows(int(b - a), window, stride)
        for first in range(0, n, chunk):
            blocks.append(
                Block(len(blocks), int(a) + first * stride, min(chunk, n - first), window, stride)
            )
    return blocks


def block_order(n_blocks: int, seed: int, epoch: int, shuffle: bool = True) -> np.ndarray:
    """Order in which epoch ``epoch`` visits the blocks: a pure function of (seed, epoch)."""
    if not shuffle:
        return np.arange(n_blocks, dtype=np.int64)
    return np.random.default_rng([seed, epoch, 0]).permutation(n_blocks)


def window_order(
    n_windows: int, seed: int, epoch: int, group: int, shuffle: bool = True
) -> np.ndarray:
    """Order of the windows of group (or block) ``group`` in epoch ``epoch`` (indices 0 .. n
    - 1)."""
    if not shuffle:
        return np.arange(n_windows, dtype=np.int64)
    return np.random.default_rng([seed, epoch, 1, group]).permutation(n_windows)


def epoch_indices(labels: np.ndarray, repeat: int, rare: int) -> np.ndarray:
    """Indices of the windows a group trains in one epoch, before shuffling: every window not
    ``IGNORED`` once, in order, then those of class ``rare`` again, ``repeat - 1`` more times.

    Example: labels [0, 1, -1, 0, 1], repeat 3, rare 1 -> [0, 1, 3, 4, 1, 4, 1, 4].
    """
    lab = np.asarray(labels)
    kept = np.flatnonzero(lab != IGNORED)
    if repeat <= 1:
        return kept
    again = np.flatnonzero(lab == rare)
    return np.concatenate([kept, np.tile(again, repeat - 1)])


def groups(order: np.ndarray, mix: int) -> list[np.ndarray]:
    """Consecutive runs of ``mix`` block indices of ``order``; the last run may be shorter.

    Example: order [4, 0, 3, 1, 2], mix 2 -> [4, 0], [3, 1], [2].
    """
    return [order[i : i + mix] for i in range(0, len(order), mix)]


@dataclasses.dataclass(frozen=True)
class BlockData:
    """What training one block (or a group of blocks) needs, in host memory.

    ``samples`` is float32 [samples, channels]: the blocks' samples one after the other. Window i
    is ``samples[offsets[i] : offsets[i] + window]`` and has class ``labels[i]``.
    """

    blocks: tuple[Block, ...]
    samples: np.ndarray
    offsets: np.ndarray
    labels: np.ndarray


def read_block(
    store: Store, labeller: Labeller, block: Block, order: np.ndarray | None
) -> BlockData:
    """Read one block with one contiguous read and label its windows in ``order``."""
    samples = store.read(block.start, block.stop)
    k = np.arange(block.n_windows, dtype=np.int64) if order is None else order
    offsets = k * block.stride
    labels = labeller.labels(block.start, block.stop, offsets, block.window)
    return BlockData((block,), samples, offsets.astype(np.int32), labels)


def read_group(
    store: Store,
    labeller: Labeller,
    blocks: Sequence[Block],
    order: np.ndarray | None,
    repeat: int = 1,
    rare: int = 1,
) -> BlockData:
    """Read ``blocks`` (one contiguous read each) as one unit whose windows come in ``order``.

    Example: blocks of 3 and 2 windows (window 4, stride 1) hold 6 and 5 samples; the group's
    samples are those 11 one after the other and its offsets [0, 1, 2, 6, 7] before ``order``.

    Windows labelled ``IGNORED`` are left out, and those of class ``rare`` come ``repeat`` times
    (``epoch_indices``), before ``order``, which then permutes that many.

    On object storage the blocks are read at once, a thread each (up to 8), so a group waits for
    about one round trip rather than one per block (each block's chunks are fetched together
    already).
    """
    if store.remote is not None and len(blocks) > 1:
        with ThreadPoolExecutor(
            max_workers=min(len(blocks), 8), thread_name_prefix="chunkfit-read"
        ) as pool:
            parts = list(pool.map(lambda b: read_block(store, labeller, b, None), blocks))
    else:
        parts = [read_block(store, labeller, b, None) for b in blocks]
    if len(parts) == 1:
        part = parts[0]
        samples, offsets, labels = part.samples, part.offsets.astype(np.int64), part.labels
    else:
        bases = np.cumsum([0] + [p.samples.shape[0] for p in parts[:-1]])
        samples = np.concatenate([p.samples for p in parts])
        offsets = np.concatenate(
            [p.offsets.astype(np.int64) + base for p, base in zip(parts, bases, strict=True)]
        )
        labels = np.concatenate([p.labels for p in parts])
    if repeat > 1 or (labels == IGNORED).any():
        take = epoch_indices(labels, repeat, rare)
        offsets, labels = offsets[take], labels[take]
    if order is not None:
        offsets, labels = offsets[order], labels[order]
    return BlockData(tuple(blocks), samples, offsets.astype(np.int32), labels)


def prefetched(jobs: Sequence[Callable[[], T]], ahead: bool = True) -> Generator[T, None, None]:
    """Run ``jobs`` in order, each in a background thread while the caller uses the previous
    result."""
    if not ahead:
        for job in jobs:
            yield job()
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="chunkfit-prefetch") as pool:
        pending: Future[T] | None = pool.submit(jobs[0]) if jobs else None
        for i in range(len(jobs)):
            assert pending is not None
            result = pending.result()
            pending = pool.submit(jobs[i + 1]) if i + 1 < len(jobs) else None
            yield result
