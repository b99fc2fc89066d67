"""Progress reports for bars and logs: ``TrainProgress``, and ``PhaseProgress``, which makes them
from the batch counts of one phase of one epoch."""

from __future__ import annotations

import dataclasses
import time
from typing import Any


@dataclasses.dataclass(frozen=True)
class TrainProgress:
    """Where training is, for progress bars. ``epoch`` is 0-based, ``block`` 1-based.

    ``phase`` is "train" or "validate" during an epoch (``windows`` of ``total`` done in that
    phase) and "epoch" once per finished epoch, with the epoch's ``logs``. ``done`` is the share
    of the whole run finished, for ETAs. A resumed run first reports phase "resume": ``epoch``
    epochs and ``block`` of the ``blocks`` blocks of the next one were trained before the
    interruption. A run reports phase "notice" for a choice made for the user (``message``) before
    it trains; ``detail``, when given, is the longer form of that line (``--verbose``).
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
    detail: str | None = None

    @classmethod
    def notice(
        cls,
        message: str,
        *,
        epochs: int,
        epoch: int = 0,
        done: float = 0.0,
        detail: str | None = None,
    ) -> TrainProgress:
        """A choice made for the user, or a result worth a line (``message``; ``detail``: all of
        it, for ``--verbose``)."""
        return cls(
            "notice", epoch, epochs, 0, 0, 0, 0, 0.0, None, done, message=message, detail=detail
        )

    @classmethod
    def resumed(
        cls, *, epoch: int, epochs: int, block: int, blocks: int, done: float
    ) -> TrainProgress:
        """A resumed run: ``epoch`` epochs and ``block`` of the ``blocks`` blocks of the next one
        were trained before the interruption."""
        return cls("resume", epoch, epochs, block, blocks, 0, 0, 0.0, None, done)

    @classmethod
    def epoch_end(
        cls,
        *,
        epoch: int,
        epochs: int,
        windows: int,
        windows_per_s: float,
        logs: dict[str, float],
    ) -> TrainProgress:
        """Epoch ``epoch`` finished, having trained ``windows`` windows; ``logs`` are its
        figures."""
        return cls(
            "epoch",
            epoch,
            epochs,
            0,
            0,
            windows,
            windows,
            windows_per_s,
            logs.get("loss"),
            (epoch + 1) / epochs,
            dict(logs),
        )


class PhaseProgress:
    """Turns batch counts into TrainProgress for one phase (train or validate) of one epoch.

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
            block=self.block,
            blocks=self.blocks,
            windows=done,
            total=self.total,
            windows_per_s=done / seconds if seconds > 0 else 0.0,
            loss=None if loss is None else float(loss),
            done=self.share[0] + self.share[1] * done / max(self.total, 1),
        )
