"""``chunkfit.fit``: Keras ``model.fit`` once per shuffled block, with real epochs owned here.

Per epoch: the training blocks are visited in ``block_order(seed, epoch)``, ``mix`` at a time. A
group of blocks is read (one contiguous store read per block) in a background thread while the
previous group trains, handed to TensorFlow as raw samples plus jointly shuffled window offsets,
and trained by one ``model.fit`` call. Then the validation blocks are evaluated and the run's
callbacks get the epoch's logs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time
from collections.abc import Callable, Generator, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from ._quiet import import_tensorflow_quietly
from .blocks import (
    Block,
    Cursor,
    Labeller,
    block_order,
    chunk_for_budget,
    groups,
    plan_blocks,
    prefetched,
    read_group,
    window_order,
)
from .config import BlockSpec, FitOptions, SplitSpec, WindowSpec
from .errors import WindowError
from .models import DEFAULT_MODEL, build_model, check_model, compile_model
from .run import HISTORY_FILE, RunFolder, peak_rss_bytes
from .store import Store, open_store
from .windows import Split, plan_split

if TYPE_CHECKING:
    import keras

    from .pipeline import BlockTensors

# TensorFlow's compiled train/test steps and their first traces, on top of what is resident
# once the model is built; measured on the built-in models (see benchmarks/train.py).
_TRACE_ALLOWANCE = 200 << 20


@dataclasses.dataclass(frozen=True)
class TrainProgress:
    """Where training is, for progress bars. ``epoch`` is 0-based, ``block`` 1-based.

    ``phase`` is "train" or "validate" during an epoch (``windows`` of ``total`` done in that
    phase) and "epoch" once per finished epoch, with the epoch's ``logs``. ``done`` is the share
    of the whole run finished, for ETAs.
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


def fit(
    model: keras.Model | str = DEFAULT_MODEL,
    store: Store | str | os.PathLike[str] = "sensor.zarr",
    *,
    window: int = 104,
    chunk: int = BlockSpec.chunk,
    mix: int = BlockSpec.mix,
    batch_size: int = 128,
    epochs: int = 1,
    stride: int = 1,
    validation: float = 0.1,
    callbacks: Sequence[keras.callbacks.Callback] | None = None,
    seed: int = 0,
    label: str = "any-event",
    deterministic: bool = False,
    memory_budget: int | None = None,
    steps_per_execution: int = FitOptions.steps_per_execution,
    optimizer: str | None = None,
    lr: float | None = None,
    loss: str | None = None,
    out: str | os.PathLike[str] | None = None,
    progress: Callable[[TrainProgress], None] | None = None,
    options: FitOptions | None = None,
) -> keras.callbacks.History:
    """Train ``model`` on every window of ``store``, block by block; returns the Keras History.

    ``model`` is a Keras model or what ``chunkfit train --model`` takes (a built-in name, a
    ``.keras`` file, ``module:function``). ``options``, when given, replaces the keyword settings.
    With ``out`` the run folder gets model.keras, history.csv, run.json and curves.png.
    """
    opts = options or FitOptions(
        windows=WindowSpec(window=window, stride=stride, label=label),
        split=SplitSpec(validation=validation),
        blocks=BlockSpec(chunk=chunk, seed=seed, mix=mix),
        batch_size=batch_size,
        epochs=epochs,
        deterministic=deterministic,
        memory_budget=memory_budget,
        steps_per_execution=steps_per_execution,
        optimizer=optimizer,
        lr=lr,
        loss=loss,
    )
    with contextlib.ExitStack() as stack:
        if not isinstance(store, Store):
            store = stack.enter_context(open_store(store))
        return _Run(model, store, opts, list(callbacks or []), out, progress).train()


class _Run:
    """One training run: every check happens in ``__init__``, before any training.

    The checks that need no TensorFlow come first, so most mistakes are reported in a blink.
    """

    def __init__(
        self,
        model: keras.Model | str,
        store: Store,
        opts: FitOptions,
        callbacks: list[keras.callbacks.Callback],
        out: str | os.PathLike[str] | None,
        progress: Callable[[TrainProgress], None] | None,
    ) -> None:
        self.store, self.opts, self.user_callbacks, self.progress = store, opts, callbacks, progress
        w = opts.windows
        self.labeller = Labeller(store, w.label)
        self.split: Split = plan_split(store.segments, w, opts.split)
        self.folder = RunFolder(out) if out is not None else None

        import_tensorflow_quietly()
        import keras

        keras.utils.set_random_seed(opts.blocks.seed)
        if opts.deterministic:
            import tensorflow as tf

            tf.config.experimental.enable_op_determinism()
        self.model_spec = model if isinstance(model, str) else model.name
        n_classes = self.labeller.n_classes
        self.model = build_model(model, w.window, store.n_channels, n_classes) if isinstance(model, str) else model
        check_model(self.model, w.window, store.n_channels, n_classes)
        compile_model(self.model, optimizer=opts.optimizer, lr=opts.lr, loss=opts.loss,
                      steps_per_execution=opts.steps_per_execution)

        self.chunk = self._chunk()
        self.train_blocks = plan_blocks(self.split.train, w.window, w.stride, self.chunk)
        self.val_blocks = plan_blocks(self.split.validation, w.window, w.stride, self.chunk)
        if self.folder is not None:
            self.folder.create()
        self.epoch_records: list[dict[str, Any]] = []
        self.started = time.perf_counter()

    def _chunk(self) -> int:
        opts = self.opts
        if opts.memory_budget is None:
            return opts.blocks.chunk
        import psutil

        in_use = psutil.Process().memory_info().rss + _TRACE_ALLOWANCE
        chunk = chunk_for_budget(opts.memory_budget, in_use, opts.windows, self.store.n_channels, opts.blocks.mix)
        if chunk < opts.batch_size:
            raise WindowError(
                f"memory budget {opts.memory_budget / 2**20:.0f} MB leaves room for blocks of {chunk} "
                f"windows, fewer than the batch size {opts.batch_size}; raise --memory-budget"
            )
        return chunk

    # -- the loop ---------------------------------------------------------------------------------
    def train(self) -> keras.callbacks.History:
        import keras

        from .callbacks import BlockBridge

        model, opts = self.model, self.opts
        history = keras.callbacks.History()
        extra: list[keras.callbacks.Callback] = []
        if self.folder is not None:
            extra.append(keras.callbacks.CSVLogger(str(self.folder.file(HISTORY_FILE))))
        steps = sum(math.ceil(b.n_windows / opts.batch_size) for b in self.train_blocks)
        run_callbacks = keras.callbacks.CallbackList(
            [*self.user_callbacks, *extra, history], model=model, epochs=opts.epochs, steps=steps, verbose=0
        )
        self.bridge = BlockBridge(run_callbacks, on_batch=self._on_batch if self.progress else None)
        self.inner = keras.callbacks.CallbackList([self.bridge], model=model)
        model.stop_training = False
        run_callbacks.on_train_begin()
        logs: dict[str, float] = {}
        for epoch in range(opts.epochs):
            run_callbacks.on_epoch_begin(epoch)
            logs, record = self._epoch(epoch, run_callbacks)
            run_callbacks.on_epoch_end(epoch, logs)
            self.epoch_records.append(record)
            if self.progress is not None:
                self.progress(TrainProgress("epoch", epoch, opts.epochs, 0, 0, record["train_windows"],
                                            record["train_windows"], record["windows_per_s"] or 0.0,
                                            logs.get("loss"), (epoch + 1) / opts.epochs, dict(logs)))
            self._write_record(done=False)
            if model.stop_training:
                break
        run_callbacks.on_train_end(logs)
        if self.folder is not None:
            self.folder.save_model(model)
            self.folder.plot(history.history)
            self._write_record(done=True)
        return history

    def _epoch(self, epoch: int, run_callbacks: keras.callbacks.CallbackList) -> tuple[dict[str, float], dict[str, Any]]:
        opts, model, spec = self.opts, self.model, self.opts.blocks
        order = block_order(len(self.train_blocks), spec.seed, epoch, spec.shuffle_blocks)
        train_groups = [[self.train_blocks[i] for i in g] for g in groups(order, spec.mix)]
        val_groups = [self.val_blocks[i : i + spec.mix] for i in range(0, len(self.val_blocks), spec.mix)]
        train_jobs = [partial(self._load, g, epoch, k) for k, g in enumerate(train_groups)]
        val_jobs = [partial(self._load, g, None, k) for k, g in enumerate(val_groups)]
        t0 = time.perf_counter()
        with contextlib.ExitStack() as stack:
            stream = stack.enter_context(contextlib.closing(prefetched(train_jobs + val_jobs, ahead=opts.prefetch)))
            trained = self._phase("train", epoch, stream, len(train_jobs), self.train_blocks)
            train_seconds = time.perf_counter() - t0
            logs = _pythonify(model.get_metrics_result())
            if trained < len(train_jobs):  # a callback stopped training inside the epoch
                stream.close()
                stream = stack.enter_context(contextlib.closing(prefetched(val_jobs, ahead=opts.prefetch)))
            t1 = time.perf_counter()
            if val_jobs:
                run_callbacks.on_test_begin()
                self._phase("validate", epoch, stream, len(val_jobs), self.val_blocks)
                val_logs = _pythonify(model.get_metrics_result())
                run_callbacks.on_test_end(val_logs)
                logs.update({f"val_{k}": v for k, v in val_logs.items()})
        windows = sum(b.n_windows for g in train_groups[:trained] for b in g)
        record = {
            "epoch": epoch,
            **logs,
            "train_windows": windows,
            "train_seconds": round(train_seconds, 3),
            "validation_seconds": round(time.perf_counter() - t1, 3),
            "windows_per_s": round(windows / train_seconds, 1) if train_seconds > 0 else None,
        }
        return logs, record

    def _phase(self, phase: str, epoch: int, stream: Generator[BlockTensors, None, None], n_groups: int,
               blocks: list[Block]) -> int:
        """Train (or evaluate) ``n_groups`` groups from ``stream``; returns how many ran."""
        from .pipeline import block_dataset

        model, opts = self.model, self.opts
        self.bridge.start_phase()
        carried = None
        total = sum(b.n_windows for b in blocks)
        self._tick = _Tick(phase, epoch, opts.epochs, len(blocks), total, opts.batch_size, self._share(phase))
        for k in range(n_groups):
            tensors = next(stream)
            self._tick.begin_group(tensors.n_blocks, tensors.n_windows, self.bridge.offset)
            ds = block_dataset(tensors, window=opts.windows.window, batch_size=opts.batch_size,
                               n_classes=self.labeller.n_classes)
            self.bridge.start_block(carried)
            if phase == "train":
                model.fit(ds, epochs=1, verbose=0, callbacks=self.inner, shuffle=False)
            else:
                model.evaluate(ds, verbose=0, callbacks=self.inner)
            carried = self.bridge.end_block(math.ceil(tensors.n_windows / opts.batch_size))
            if phase == "train" and model.stop_training:
                return k + 1
        return n_groups

    def _load(self, group: list[Block], epoch: int | None, k: int) -> BlockTensors:
        """Group ``k`` of an epoch, its windows shuffled for training (``epoch``) or in order."""
        from .pipeline import to_tensors

        spec = self.opts.blocks
        order = None
        if epoch is not None:
            order = window_order(sum(b.n_windows for b in group), spec.seed, epoch, k, spec.shuffle_windows)
        return to_tensors(read_group(self.store, self.labeller, group, order))

    def _share(self, phase: str) -> tuple[float, float]:
        """(start, width) of this phase of this epoch as a share of the run, by windows."""
        train = self.split.train_windows()
        val = self.split.validation_windows() if self.val_blocks else 0
        run_total = max((train + val) * self.opts.epochs, 1)
        epoch_start = len(self.epoch_records) * (train + val)
        if phase == "train":
            return epoch_start / run_total, train / run_total
        return (epoch_start + train) / run_total, val / run_total

    def _on_batch(self, batches: int, logs: dict[str, Any]) -> None:
        assert self.progress is not None
        self.progress(self._tick.at(batches, logs))

    # -- metadata ---------------------------------------------------------------------------------
    def _write_record(self, *, done: bool) -> None:
        if self.folder is None:
            return
        wall = time.perf_counter() - self.started
        trained = sum(r["train_windows"] for r in self.epoch_records)
        train_s = sum(r["train_seconds"] for r in self.epoch_records)
        last = self.epoch_records[-1]["epoch"] if self.epoch_records else -1
        self.folder.write_json({
            "chunkfit": _version(),
            "finished": done,
            "model": self.model_spec,
            "config": {**self.opts.to_dict(), "chunk_used": self.chunk},
            "classes": self.labeller.classes,
            "store": {"path": str(self.store.path.resolve()), "identity": self.store.identity},
            "split": self.split.to_dict(),
            "blocks": {"train": len(self.train_blocks), "validation": len(self.val_blocks), "mix": self.opts.blocks.mix},
            "epochs": self.epoch_records,
            "stopped_early": bool(self.model.stop_training),
            "cursor": Cursor(self.opts.blocks.seed, last + 1, 0).to_dict(),
            "windows_per_s": round(trained / train_s, 1) if train_s > 0 else None,
            "wall_seconds": round(wall, 3),
            "peak_rss_bytes": peak_rss_bytes(),
        })


class _Tick:
    """Turns batch counts into TrainProgress for one phase of one epoch."""

    def __init__(self, phase: str, epoch: int, epochs: int, blocks: int, total: int, batch: int,
                 share: tuple[float, float]) -> None:
        self.phase, self.epoch, self.epochs, self.blocks, self.total, self.batch = phase, epoch, epochs, blocks, total, batch
        self.share = share
        self.start = time.perf_counter()
        self.block, self.n, self.done_before, self.batches_before = 0, 0, 0, 0

    def begin_group(self, n_blocks: int, n_windows: int, batches_before: int) -> None:
        self.done_before += self.n
        self.block += n_blocks
        self.n, self.batches_before = n_windows, batches_before

    def at(self, batches: int, logs: dict[str, Any]) -> TrainProgress:
        done = self.done_before + min((batches - self.batches_before) * self.batch, self.n)
        seconds = time.perf_counter() - self.start
        loss = logs.get("loss")
        return TrainProgress(self.phase, self.epoch, self.epochs, self.block, self.blocks, done, self.total,
                             done / seconds if seconds > 0 else 0.0, None if loss is None else float(loss),
                             self.share[0] + self.share[1] * done / max(self.total, 1))


def _pythonify(logs: dict[str, Any]) -> dict[str, float]:
    return {k: float(np.asarray(v)) for k, v in logs.items()}


def _version() -> str:
    from . import __version__

    return __version__
