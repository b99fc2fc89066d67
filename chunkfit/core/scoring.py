"""Every window of a store scored block by block, in start order, in bounded memory.

Blocks hold a whole number of batches and start at a segment's first window, so batch k of a
segment always holds its windows [k*B, (k+1)*B): each window is scored in the same batch, padded the
same way, whatever ``chunk`` is, and the scores are bit-identical across block sizes (they may
differ in the last float32 bits across ``batch_size``, where the batches differ).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from functools import partial
from typing import Protocol

import numpy as np

from ..config import WindowSpec
from ..store import Store
from .blocks import Block, plan_blocks, prefetched, read_block
from .labels import Labeller


class Predictor(Protocol):
    """A model's compiled scoring function: outputs for windows gathered from raw samples, in
    batches of exactly ``batch_size`` windows, so a window's score depends only on its batch. Each
    engine makes one (chunkfit.train.engines)."""

    batch_size: int

    def __call__(self, samples: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """float32 [len(offsets), outputs]: the outputs for the windows
        ``samples[o : o + window]``."""
        ...


@dataclasses.dataclass(frozen=True)
class ScoredBlock:
    block: Block
    segment: int
    starts: np.ndarray  # absolute window starts, int64
    probs: np.ndarray  # float32 [windows, classes]
    labels: np.ndarray | None  # class index per window, when labelled
    samples: np.ndarray  # the block's raw samples (for plots)


def scoring_chunk(chunk: int, batch_size: int) -> int:
    """``chunk`` rounded down to whole batches (at least one), so blocks keep batch boundaries in
    place.

    Example: chunk 2,000, batch 1,024 -> 1,024; chunk 24,000 -> 23,552.
    """
    return max(batch_size, chunk // batch_size * batch_size)


def range_blocks(
    ranges: np.ndarray, window: int, stride: int, chunk: int
) -> list[tuple[int, Block]]:
    """(range index, block) of every block of every range (a segment, or part of one), blocks of
    ``chunk`` windows from the range's start."""
    out: list[tuple[int, Block]] = []
    for s, (a, b) in enumerate(np.asarray(ranges, dtype=np.int64).reshape(-1, 2).tolist()):
        for blk in plan_blocks(np.asarray([[a, b]]), window, stride, chunk):
            out.append((s, blk))
    return out


def score_store(
    predictor: Predictor,
    store: Store,
    windows: WindowSpec,
    *,
    chunk: int = 200_000,
    labeller: Labeller | None = None,
    ranges: np.ndarray | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Iterator[ScoredBlock]:
    """Probabilities for every window of the store (or of ``ranges``, each inside one segment),
    block by block, in start order; ``ScoredBlock.segment`` is the index of the segment (or range).

    ``predictor`` scores ``predictor.batch_size`` windows at a time; a caller scoring the same model
    again (the training loop, every epoch) passes the same one and compiles it once. The next block
    is read in a background thread while one is scored. ``progress(done, total)`` hears the windows
    scored so far after each block.
    """
    w = windows
    spans = store.segments if ranges is None else ranges
    plan = range_blocks(spans, w.window, w.stride, scoring_chunk(chunk, predictor.batch_size))

    def load(seg: int, blk: Block) -> tuple[int, Block, np.ndarray, np.ndarray | None]:
        if labeller is not None:
            data = read_block(store, labeller, blk, None)
            return seg, blk, data.samples, data.labels
        return seg, blk, store.read(blk.start, blk.stop), None

    jobs = [partial(load, seg, blk) for seg, blk in plan]
    total, done = sum(blk.n_windows for _, blk in plan), 0
    for seg, blk, samples, labels in prefetched(jobs):
        offsets = (np.arange(blk.n_windows, dtype=np.int32) * blk.stride).astype(np.int32)
        probs = predictor(samples, offsets)
        starts = blk.start + offsets.astype(np.int64)
        yield ScoredBlock(blk, seg, starts, probs, labels, samples)
        done += blk.n_windows
        if progress is not None:
            progress(done, total)
