"""What a run trains: the store's split into training and validation ranges, their blocks, and each
epoch's groups of blocks, with how many windows each block trains per epoch (chunkfit.core.balance).
Arithmetic over the store's segments and labels; no TensorFlow."""

from __future__ import annotations

import dataclasses
from functools import cached_property

from ..config import FitOptions, is_event_rule
from ..errors import WindowError
from ..store import Store
from .balance import Balance, block_sizes
from .blocks import Block, BlockData, block_order, groups, plan_blocks, read_group, window_order
from .labels import Labeller, class_counts
from .windows import Split, plan_split


@dataclasses.dataclass(frozen=True)
class SplitPlan:
    """The labels and the split of a store, checked before anything heavy loads."""

    labeller: Labeller
    split: Split
    balance: Balance

    @classmethod
    def of(cls, store: Store, opts: FitOptions) -> SplitPlan:
        w = opts.windows
        labeller = Labeller(store, w.label, w.margin)
        split = plan_split(
            store.segments, w, opts.split, where=str(store.path), seed=opts.blocks.seed
        )
        _check_validation_classes(store, labeller, split, opts)
        counts = class_counts(labeller, split.train, w.window, w.stride, ignored=True)
        return cls(labeller, split, Balance.of(counts, opts.oversample))

    def blocks(self, opts: FitOptions, chunk: int) -> TrainPlan:
        w = opts.windows
        return TrainPlan(
            self.labeller,
            self.split,
            self.balance,
            chunk,
            opts.blocks.mix,
            opts.blocks.seed,
            opts.blocks.shuffle_blocks,
            plan_blocks(self.split.train, w.window, w.stride, chunk),
            plan_blocks(self.split.validation, w.window, w.stride, chunk),
        )


def _check_validation_classes(
    store: Store, labeller: Labeller, split: Split, opts: FitOptions
) -> None:
    """Refuse a validation split that cannot measure a detector: one missing a class (an event-less
    one, for event labels)."""
    if split.validation_windows() == 0:
        return
    w = opts.windows
    counts = class_counts(labeller, split.validation, w.window, w.stride)
    missing = [c for c, n in zip(labeller.classes, counts.tolist(), strict=True) if n == 0]
    if not missing:
        return
    what = (
        "no window with an event"
        if is_event_rule(labeller.rule)
        else f"no window of class(es) {missing}"
    )
    how = (
        "hold out other recordings (--validation-segments, another --seed)"
        if opts.split.segments is not None
        else "raise --validation, or hold out whole recordings with --validation-segments"
    )
    raise WindowError(
        f"{store.path}: the validation split ({split.validation_windows():,} windows) holds "
        f"{what}, so it cannot "
        f"measure a detector; {how}, or pass --validation 0 to train without validation"
    )


@dataclasses.dataclass(frozen=True)
class TrainPlan(SplitPlan):
    """The split cut into blocks of ``chunk`` windows, trained ``mix`` at a time."""

    chunk: int
    mix: int
    seed: int
    shuffle: bool
    train_blocks: list[Block]
    val_blocks: list[Block]

    def train_groups(self, epoch: int) -> list[list[Block]]:
        """Epoch ``epoch``'s groups of training blocks, in the order they train."""
        order = block_order(len(self.train_blocks), self.seed, epoch, self.shuffle)
        return [[self.train_blocks[i] for i in g] for g in groups(order, self.mix)]

    def read(
        self, store: Store, group: list[Block], epoch: int | None, k: int, shuffle: bool = True
    ) -> BlockData:
        """Group ``k`` of epoch ``epoch`` read from ``store``: its windows this epoch (the label
        margin's left out, the rarest class's repeats in: chunkfit.core.balance) in
        ``window_order(seed, epoch, k)``; with ``epoch`` None (validation), each window once, in
        order. What ``chunkfit train`` trains and what ``chunkfit.blocks`` yields, alike."""
        order, repeat = None, 1
        if epoch is not None:
            order = window_order(self.group_windows(group), self.seed, epoch, k, shuffle)
            repeat = self.balance.repeat
        return read_group(store, self.labeller, group, order, repeat=repeat, rare=self.balance.rare)

    def val_groups(self) -> list[list[Block]]:
        """The validation blocks in store order, ``mix`` at a time."""
        return [self.val_blocks[i : i + self.mix] for i in range(0, len(self.val_blocks), self.mix)]

    def group_samples(self) -> int:
        """The most samples any group of training blocks can hold: its ``mix`` longest blocks.

        Example: blocks spanning 110, 110 and 40 samples, mix 2 -> 220, whatever the epoch's order.
        """
        spans = sorted((b.stop - b.start for b in self.train_blocks), reverse=True)
        return sum(spans[: self.mix])

    @cached_property
    def train_sizes(self) -> list[int]:
        """Windows each training block trains per epoch: its windows, less those the label margin
        leaves out, plus the rarest class's repeats (chunkfit.core.balance)."""
        return block_sizes(self.labeller, self.train_blocks, self.balance)

    @cached_property
    def val_sizes(self) -> list[int]:
        """Windows each validation block is judged on (those the label margin leaves out are
        not)."""
        if not self.balance.ignored:
            return [b.n_windows for b in self.val_blocks]
        judged = dataclasses.replace(self.balance, repeat=1)
        return block_sizes(self.labeller, self.val_blocks, judged)

    def epoch_windows(self) -> int:
        """Windows one epoch trains."""
        return sum(self.train_sizes)

    def train_batches(self, batch_size: int) -> int:
        """Batches one epoch trains, counted block by block."""
        return sum(-(-n // batch_size) for n in self.train_sizes)

    def group_windows(self, group: list[Block]) -> int:
        """Windows a group of training blocks trains per epoch."""
        return sum(self.train_sizes[b.index] for b in group)

    def windows_of(self, indices: list[int]) -> int:
        """Training windows per epoch in the training blocks ``indices``."""
        return sum(self.train_sizes[i] for i in indices)

    def share(self, epoch: int, epochs: int, phase: str) -> tuple[float, float]:
        """(start, width) of this phase of epoch ``epoch`` as a share of the run, by windows."""
        train = self.epoch_windows()
        val = sum(self.val_sizes) if self.val_blocks else 0
        run_total = max((train + val) * epochs, 1)
        epoch_start = epoch * (train + val)
        if phase == "train":
            return epoch_start / run_total, train / run_total
        return (epoch_start + train) / run_total, val / run_total
