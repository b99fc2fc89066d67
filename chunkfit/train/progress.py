"""Progress reports for bars and logs: ``TrainProgress``, and the tick that makes them from batch counts."""

from __future__ import annotations

import dataclasses
import time
from typing import Any


@dataclasses.dataclass(frozen=True)
class TrainProgress:
    """Where training is, for progress bars. ``epoch`` is 0-based, ``block`` 1-based.

    ``phase`` is "train" or "validate" during an epoch (``windows`` of ``total`` done in that
    phase) and "epoch" once per finished epoch, with the epoch's ``logs``. ``done`` is the share
    of the whole run finished, for ETAs. A resumed run first reports phase "resume": ``epoch`` epochs
    and ``block`` of the ``blocks`` blocks of the next one were trained before the interruption.
    A run reports phase "notice" for a choice made for the user (``message``) before it trains.
    """

    phase: str
    epoch: int
    epochs: int
    block: int
    blocks: int
    windows: int
    total: int
    windows_per_s: float
    loss: float | None
    done: float
    logs: dict[str, float] | None = None
    message: str | None = None


class Tick:
    """Turns batch counts into TrainProgress for one phase of one epoch.

    ``share`` is (start, width) of this phase as a share of the whole run, for ``done``.
    """

    def __init__(
        self,
        phase: str,
        epoch: int,
        epochs: int,
        blocks: int,
        total: int,
        batch: int,
        share: tuple[float, float],
    ) -> None:
        self.phase, self.epoch, self.epochs, self.blocks, self.total, self.batch = (
            phase,
            epoch,
            epochs,
            blocks,
            total,
            batch,
        )
        self.share = share
        self.start = time.perf_counter()
        self.block, self.n, self.done_before, self.batches_before = 0, 0, 0, 0

    def skip(self, blocks: int, windows: int) -> None:
        """A resumed epoch: ``blocks`` blocks holding ``windows`` windows were trained before."""
        self.block, self.done_before = blocks, windows

    def begin_group(self, n_blocks: int, n_windows: int, batches_before: int) -> None:
        self.done_before += self.n
        self.block += n_blocks
        self.n, self.batches_before = n_windows, batches_before

    def at(self, batches: int, logs: dict[str, Any]) -> TrainProgress:
        done = self.done_before + min((batches - self.batches_before) * self.batch, self.n)
        seconds = time.perf_counter() - self.start
        loss = logs.get("loss")
        return TrainProgress(
            self.phase,
            self.epoch,
            self.epochs,
            self.block,
            self.blocks,
            done,
            self.total,
            done / seconds if seconds > 0 else 0.0,
            None if loss is None else float(loss),
            self.share[0] + self.share[1] * done / max(self.total, 1),
        )
