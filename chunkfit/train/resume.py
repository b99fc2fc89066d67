"""A run's checkpoints: when one is due, what it holds, and a run put back from one.

The run folder (chunkfit.train.runfolder) stores checkpoints atomically (chunkfit.train.checkpoint);
what Keras keeps in a model, its optimizer, metrics and callbacks is captured by
chunkfit.train.keras_state. This module decides the rest: a checkpoint every ``every`` blocks (by
default about every ``CHECKPOINT_SECONDS`` of training) and at the end of every epoch, holding where
the epoch is (chunkfit.train.cursor), the history, the run log and the random states.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any

from ..errors import IncompatibleError
from .checkpoint import Checkpoint
from .cursor import Cursor
from .record import RunLog
from .runfolder import PeerFolder, RunFolder

if TYPE_CHECKING:
    import keras

# Without --checkpoint-every, a checkpoint after the first group of blocks trained this long after
# the last.
CHECKPOINT_SECONDS = 180.0


class Checkpointer:
    """Writes the checkpoints of one run into its folder and puts a run back from one.

    ``identity`` is what a run resuming a checkpoint must share with it (settings, model, store);
    ``chunk`` is kept too, so a resumed run keeps its blocks whatever ``--memory-budget`` says now.
    ``shape`` is (epochs, blocks per epoch) of the run, for messages. A worker other than the chief
    has a ``PeerFolder``: it restores, and writes nothing.
    """

    def __init__(
        self,
        folder: RunFolder | PeerFolder,
        identity: dict[str, Any],
        chunk: int,
        every: int | None,
        shape: tuple[int, int],
    ) -> None:
        self.folder, self.identity, self.chunk, self.every, self.shape = (
            folder,
            identity,
            chunk,
            every,
            shape,
        )
        self.sequence = 0  # of the last checkpoint written or resumed from
        self.last: Cursor | None = None
        self.last_time = time.monotonic()
        self.since = 0  # blocks trained since the last checkpoint

    def due(self, n_blocks: int) -> bool:
        """Whether a checkpoint is due now that ``n_blocks`` more blocks trained."""
        self.since += n_blocks
        if self.every is not None:
            return self.since >= self.every
        return time.monotonic() - self.last_time >= CHECKPOINT_SECONDS

    def save(
        self,
        at: Cursor,
        *,
        model: keras.Model,
        callbacks: list[keras.callbacks.Callback],
        history: keras.callbacks.History,
        log: RunLog,
    ) -> None:
        """A checkpoint from which the run continues at ``at``: mid-epoch, or at the start of
        ``at.epoch``."""
        from . import keras_state

        arrays = keras_state.model_arrays(model)
        arrays.update(keras_state.metric_arrays(at.metrics))
        callback_states, callback_arrays = keras_state.callback_state(callbacks)
        rng, rng_arrays = keras_state.rng_state()
        arrays.update(callback_arrays)
        arrays.update(rng_arrays)
        state = {
            "sequence": self.sequence + 1,
            "run": self.identity,
            "chunk": self.chunk,
            "cursor": at.to_dict(),
            "blocks_done": list(at.blocks),
            "batch_offset": at.batches,
            "train_seconds": at.train_seconds,
            "stopped": bool(model.stop_training),
            "history": history.history,
            "history_epochs": history.epoch,
            "epoch_records": log.epochs,
            "callbacks": callback_states,
            "rng": rng,
            "resumes": log.resumes,
            "wall_seconds": log.wall_seconds(),
        }
        folder = self.folder
        assert isinstance(folder, RunFolder), "only the chief writes checkpoints"
        try:
            folder.write_checkpoint(state, arrays)
        except OSError as err:
            raise folder.write_error(err, "a checkpoint", self.kept()) from None
        self.sequence += 1
        self.last = at
        self.last_time = time.monotonic()
        self.since = 0

    def restore(
        self,
        resumed: Checkpoint,
        *,
        model: keras.Model,
        callbacks: list[keras.callbacks.Callback],
        history: keras.callbacks.History,
        log: RunLog,
        shapes: tuple[int, int, int],
    ) -> Cursor:
        """Put the run back as it was when ``resumed`` was written; returns where training
        continues.

        ``shapes`` is (window, channels, classes), for building the model's metrics and optimizer.
        """
        from . import keras_state

        where = self.folder.shown
        state, arrays = resumed.state, resumed.arrays()
        keras_state.build(model, *shapes)
        keras_state.set_model_arrays(model, arrays, where)
        keras_state.set_callback_state(callbacks, state["callbacks"], arrays, where)
        keras_state.set_rng_state(state["rng"], arrays)
        history.history = {k: list(v) for k, v in state["history"].items()}
        history.epoch = list(state["history_epochs"])
        model.stop_training = bool(state["stopped"])
        self.sequence = resumed.sequence
        self.last = cursor = Cursor.from_dict(state["cursor"])
        log.restore(
            state["epoch_records"],
            [*state["resumes"], cursor.to_dict()],
            float(state["wall_seconds"]),
        )
        metrics = keras_state.metrics_from(arrays)
        if metrics is not None and len(metrics) != len(model.metrics_variables):
            raise IncompatibleError(
                f"{where}: the checkpoint was made mid-epoch by a chunkfit that logged other epoch "
                "metrics "
                f"({len(metrics)} metric variables saved, {len(model.metrics_variables)} now); "
                "finish the run with that version, or pass --restart"
            )
        return dataclasses.replace(
            cursor,
            metrics=metrics,
            batches=int(state["batch_offset"]),
            blocks=[int(i) for i in state["blocks_done"]],
            train_seconds=float(state["train_seconds"]),
        )

    def kept(self) -> str:
        """ "; the checkpoint made ... is intact in RUN" when the run has one, for error
        messages."""
        c = self.last
        if c is None:
            return ""
        epochs, blocks = self.shape
        where = (
            f"after epoch {c.epoch}"
            if c.position == 0
            else f"in epoch {c.epoch + 1}/{epochs} after {c.position} of {blocks} blocks"
        )
        return f"; the checkpoint made {where} is intact in {self.folder.shown}"
