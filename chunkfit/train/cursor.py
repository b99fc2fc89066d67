"""``Cursor``: where a run is, the one type a checkpoint, run.json and the epoch loop share.

The next block to train is ``block_order(seed, epoch)[position]`` (chunkfit.core.blocks): block and
window orders are pure functions of (seed, epoch), so {seed, epoch, position} is all a run needs to
continue with the same orders. Mid-epoch, the cursor also carries what the blocks trained so far
left behind: the epoch's metric totals, its batch count, the blocks in the order trained and the
seconds they took.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np


@dataclasses.dataclass(frozen=True)
class Cursor:
    """Epoch ``epoch``, ``position`` blocks into its order (0: at its beginning).

    Those blocks (``blocks``, in the order trained) took ``batches`` batches and ``train_seconds``;
    ``metrics`` are the metric totals after them. ``to_dict`` is the JSON cursor of run.json and of
    a checkpoint: seed, epoch and position.
    """

    seed: int
    epoch: int = 0
    position: int = 0
    metrics: list[np.ndarray] | None = None
    batches: int = 0
    blocks: list[int] = dataclasses.field(default_factory=list)
    train_seconds: float = 0.0

    def to_dict(self) -> dict[str, int]:
        return {"seed": self.seed, "epoch": self.epoch, "position": self.position}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Cursor:
        return cls(int(data["seed"]), int(data["epoch"]), int(data["position"]))
