"""What a run trains: the store's split into training and validation ranges, their blocks, and each
epoch's groups of blocks. Pure arithmetic over the store's segments; no TensorFlow."""

from __future__ import annotations

import dataclasses

from ..config import FitOptions
from ..store import Store
from .blocks import Block, Labeller, block_order, groups, plan_blocks
from .windows import Split, plan_split


@dataclasses.dataclass(frozen=True)
class SplitPlan:
    """The labels and the split of a store, checked before anything heavy loads."""

    labeller: Labeller
    split: Split

    @classmethod
    def of(cls, store: Store, opts: FitOptions) -> SplitPlan:
        w = opts.windows
        return cls(Labeller(store, w.label), plan_split(store.segments, w, opts.split, where=str(store.path)))

    def blocks(self, opts: FitOptions, chunk: int) -> TrainPlan:
        w = opts.windows
        return TrainPlan(self.labeller, self.split, chunk, opts.blocks.mix, opts.blocks.seed, opts.blocks.shuffle_blocks,
                         plan_blocks(self.split.train, w.window, w.stride, chunk),
                         plan_blocks(self.split.validation, w.window, w.stride, chunk))


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

    def val_groups(self) -> list[list[Block]]:
        """The validation blocks in store order, ``mix`` at a time."""
        return [self.val_blocks[i : i + self.mix] for i in range(0, len(self.val_blocks), self.mix)]

    def windows_of(self, indices: list[int]) -> int:
        """Training windows in the training blocks ``indices``."""
        return sum(self.train_blocks[i].n_windows for i in indices)

    def share(self, epoch: int, epochs: int, phase: str) -> tuple[float, float]:
        """(start, width) of this phase of epoch ``epoch`` as a share of the run, by windows."""
        train = self.split.train_windows()
        val = self.split.validation_windows() if self.val_blocks else 0
        run_total = max((train + val) * epochs, 1)
        epoch_start = epoch * (train + val)
        if phase == "train":
            return epoch_start / run_total, train / run_total
        return (epoch_start + train) / run_total, val / run_total
