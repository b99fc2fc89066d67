"""The bridge between one block's ``model.fit`` and the callbacks of the whole run.

Keras resets its metrics and its callbacks at every ``fit``/``evaluate`` call. chunkfit calls
``fit`` once per block, so the bridge (the only callback those calls see) undoes both:

- metric state: the running totals of every metric are saved after a block and put back before
  the first step of the next one, so the logs are those of the epoch so far, exactly as one fit
  call over the whole epoch would report them (no averaging of per-block results);
- batch events: forwarded to the run's ``CallbackList`` with batch numbers counted from the start
  of the epoch, so TensorBoard, history.csv and user callbacks see one continuous epoch. A training
  step of ``Stepper`` runs several batches; its events carry the numbers of its first and last.

A callback that stops training (``model.stop_training``) stops the block's fit call too.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path
from typing import Any

import keras
import numpy as np

from .metrics import ordered


def metric_state(model: keras.Model) -> list[np.ndarray]:
    """Copy of every metric variable (loss tracker included)."""
    return [np.array(v.numpy()) for v in model.metrics_variables]


def set_metric_state(model: keras.Model, state: list[np.ndarray]) -> None:
    for var, value in zip(model.metrics_variables, state, strict=True):
        var.assign(value)


BatchHook = Callable[[int, dict[str, Any]], None]


class BlockBridge(keras.callbacks.Callback):
    """The one callback each block's fit/evaluate call gets; see the module docstring."""

    def __init__(
        self,
        run_callbacks: keras.callbacks.CallbackList,
        on_batch: BatchHook | None = None,
        fitting: keras.Model | None = None,
    ) -> None:
        super().__init__()
        self.run_callbacks = run_callbacks
        self.on_batch = on_batch
        self.fitting = fitting  # the model whose fit runs the blocks, when it wraps self.model
        self.offset = 0
        self._carry: list[np.ndarray] | None = None
        self._ends: np.ndarray | None = None

    def start_phase(self) -> None:
        """Begin an epoch's training or validation: batch numbers and metrics start from zero."""
        self.offset = 0
        self._carry = None

    def start_block(
        self, carried: list[np.ndarray] | None, step_batches: list[int] | None = None
    ) -> None:
        """Before a block's fit/evaluate call: restore ``carried`` metric state at its first step.

        ``step_batches`` is how many batches each step of the call runs (None: one each).
        """
        self._carry = carried
        self._ends = np.cumsum(step_batches) if step_batches is not None else None

    def _first(self, step: int) -> int:
        return self.offset + (
            step if self._ends is None else int(self._ends[step - 1]) if step else 0
        )

    def _last(self, step: int) -> int:
        return self.offset + (step if self._ends is None else int(self._ends[step]) - 1)

    def end_block(self, batches: int) -> list[np.ndarray]:
        """After a block's call: count its batches and return the metric state to carry on."""
        self.offset += batches
        return metric_state(self.model)

    def _restore(self) -> None:
        if self._carry is not None:
            set_metric_state(self.model, self._carry)
            self._carry = None

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self._restore()
        self.run_callbacks.on_train_batch_begin(self._first(batch), logs)

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        last = self._last(batch)
        self.run_callbacks.on_train_batch_end(last, logs)
        if self.on_batch is not None:
            self.on_batch(last + 1, logs or {})
        if self.fitting is not None and self.model.stop_training:
            self.fitting.stop_training = True

    def on_test_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self._restore()
        self.run_callbacks.on_test_batch_begin(self.offset + batch, logs)

    def on_test_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self.run_callbacks.on_test_batch_end(self.offset + batch, logs)
        if self.on_batch is not None:
            self.on_batch(self.offset + batch + 1, logs or {})


class HistoryCsv(keras.callbacks.Callback):
    """history.csv: one row per epoch, columns in the order of the epoch's logs (the event class's
    figures first, chunkfit.train.metrics), not by name as Keras's ``CSVLogger`` sorts them.
    ``append`` keeps the rows already there (a resumed run) and writes no second header."""

    def __init__(self, path: Path, append: bool) -> None:
        super().__init__()
        self.path, self.append = path, append
        self.keys: list[str] | None = None

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        """The file exists from the start, as with ``CSVLogger`` (empty until the first epoch
        ends)."""
        if self.append:
            self.path.touch()
        else:
            self.path.write_text("")

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        logs = dict(logs or {})
        if self.keys is None:
            header = (
                self.path.read_text().partition("\n")[0]
                if self.append and self.path.exists()
                else ""
            )
            self.keys = header.split(",")[1:] if header else list(ordered(logs))
            if not header:
                self.path.write_text(",".join(["epoch", *self.keys]) + "\n")
        with self.path.open("a", newline="") as f:
            csv.writer(f, lineterminator="\n").writerow(
                [epoch, *(logs.get(k, "NA") for k in self.keys)]
            )
