"""``chunkfit.fit``: Keras ``model.fit`` once per shuffled block, with real epochs owned here.

Per epoch: the training blocks are visited in ``block_order(seed, epoch)``, ``mix`` at a time. A
group of blocks is read (one contiguous store read per block) in a background thread while the
previous group trains, handed to TensorFlow as raw samples plus jointly shuffled window offsets,
and trained by one ``model.fit`` call. Then the validation blocks are evaluated and the run's
callbacks get the epoch's logs.

With a run folder, a checkpoint (chunkfit.checkpoint, chunkfit.resume) is written every
``checkpoint_every`` blocks (default: about every ``CHECKPOINT_SECONDS`` of training) and at the end
of every epoch; a run started again on that folder continues from it, at the next unfinished group
of blocks, with the same block and window orders, so every training window is still visited once
per epoch (and, with ``deterministic``, the weights end bit for bit as without the interruption).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import math
import os
import shutil
import time
from collections.abc import Callable, Generator, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

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
from .checkpoint import Checkpoint
from .config import BlockSpec, FitOptions, SplitSpec, WindowSpec
from .errors import (
    ChunkfitError,
    DiskFullError,
    RunError,
    StoreChangedError,
    UsageError,
    WindowError,
)
from .models import DEFAULT_MODEL, build_model, check_model, compile_model
from .pipeline import batch_bytes, element_steps
from .run import HISTORY_FILE, RunFolder, peak_rss_bytes
from .store import Store, open_store
from .threads import start_tensorflow
from .windows import Split, plan_split

if TYPE_CHECKING:
    import keras

    from .pipeline import BlockTensors

# TensorFlow's compiled train/test steps and their first traces, on top of what is resident
# once the model is built; measured on the built-in models (see benchmarks/train.py).
_TRACE_ALLOWANCE = 200 << 20

# Without --checkpoint-every, a checkpoint after the first group of blocks trained this long after the last.
CHECKPOINT_SECONDS = 180.0
_DISK_FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)
_WRITE_ERRORS = (*_DISK_FULL, errno.EACCES, errno.EPERM, errno.EROFS)


@dataclasses.dataclass(frozen=True)
class TrainProgress:
    """Where training is, for progress bars. ``epoch`` is 0-based, ``block`` 1-based.

    ``phase`` is "train" or "validate" during an epoch (``windows`` of ``total`` done in that
    phase) and "epoch" once per finished epoch, with the epoch's ``logs``. ``done`` is the share
    of the whole run finished, for ETAs. A resumed run first reports phase "resume": ``epoch`` epochs
    and ``block`` of the ``blocks`` blocks of the next one were trained before the interruption.
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
    steps_per_execution: int | None = FitOptions.steps_per_execution,
    compute_threads: int | None = None,
    optimizer: str | None = None,
    lr: float | None = None,
    loss: str | None = None,
    out: str | os.PathLike[str] | None = None,
    progress: Callable[[TrainProgress], None] | None = None,
    options: FitOptions | None = None,
    checkpoint_every: int | None = None,
    resume: str = "auto",
) -> keras.callbacks.History:
    """Train ``model`` on every window of ``store``, block by block; returns the Keras History.

    ``model`` is a Keras model or what ``chunkfit train --model`` takes (a built-in name, a
    ``.keras`` file, ``module:function``). ``options``, when given, replaces the keyword settings.
    With ``out`` the run folder gets model.keras, history.csv, run.json and curves.png, and while
    training a checkpoint every ``checkpoint_every`` blocks (default: about every 3 minutes of
    training) and at the end of every epoch. On a folder holding an unfinished run, ``resume``
    "auto" continues it from its checkpoint (a folder without one starts a new run), "resume" does
    the same but refuses a folder with nothing to resume, and "restart" deletes the run and starts over.
    A finished run is refused unless "restart".
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
        compute_threads=compute_threads,
        optimizer=optimizer,
        lr=lr,
        loss=loss,
    )
    with contextlib.ExitStack() as stack:
        if not isinstance(store, Store):
            store = stack.enter_context(open_store(store))
        return _Run(model, store, opts, list(callbacks or []), out, progress, checkpoint_every, resume).train()


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
        checkpoint_every: int | None = None,
        resume: str = "auto",
    ) -> None:
        self.store, self.opts, self.user_callbacks, self.progress = store, opts, callbacks, progress
        if checkpoint_every is not None and (isinstance(checkpoint_every, bool) or not isinstance(checkpoint_every, int)
                                             or checkpoint_every < 1):
            raise UsageError(f"--checkpoint-every must be a positive number of blocks (received {checkpoint_every!r})")
        if out is None and resume != "auto":
            raise UsageError(f"resume={resume!r} needs a run folder: pass out=RUN")
        self.checkpoint_every = checkpoint_every
        w = opts.windows
        self.labeller = Labeller(store, w.label)
        self.split: Split = plan_split(store.segments, w, opts.split, where=str(store.path))
        self.model_spec = model if isinstance(model, str) else model.name
        self.folder = RunFolder(out, resume) if out is not None else None
        self.resumed: Checkpoint | None = self.folder.checkpoint if self.folder is not None else None
        if self.folder is not None:
            self.folder.check_matches(self._identity())  # before TensorFlow loads

        self.threads = start_tensorflow(opts.compute_threads, model)
        import keras

        keras.utils.set_random_seed(opts.blocks.seed)
        if opts.deterministic:
            import tensorflow as tf

            tf.config.experimental.enable_op_determinism()
        n_classes = self.labeller.n_classes
        self.model = build_model(model, w.window, store.n_channels, n_classes) if isinstance(model, str) else model
        check_model(self.model, w.window, store.n_channels, n_classes)
        self.steps = opts.steps_per_execution or element_steps(opts.batch_size, w.window, store.n_channels)
        compile_model(self.model, optimizer=opts.optimizer, lr=opts.lr, loss=opts.loss, steps_per_execution=self.steps)

        # A resumed run keeps its blocks even when --memory-budget would pick another chunk now.
        self.chunk = int(self.resumed.state["chunk"]) if self.resumed is not None else self._chunk()
        self.train_blocks = plan_blocks(self.split.train, w.window, w.stride, self.chunk)
        self.val_blocks = plan_blocks(self.split.validation, w.window, w.stride, self.chunk)
        if self.folder is not None:
            self.folder.create()
            # create() gives the checkpoint its final name: one that a kill left as
            # checkpoint.tmp/ (complete, not yet renamed) is read from checkpoint/ from here on.
            self.resumed = self.folder.checkpoint
        self.epoch_records: list[dict[str, Any]] = []
        self.started = time.perf_counter()
        self.sequence = 0  # of the last checkpoint written
        self.last_checkpoint: Cursor | None = None
        self.last_checkpoint_time = time.monotonic()
        self.blocks_since_checkpoint = 0
        self.blocks_done: list[int] = []  # train blocks of the current epoch, in the order trained
        self.resumes: list[dict[str, int]] = []

    def _identity(self) -> dict[str, Any]:
        """What a checkpoint must share with the run resuming it."""
        config = self.opts.to_dict()
        for speed in ("compute_threads", "steps_per_execution"):  # how fast, not what, is trained
            config.pop(speed)
        return {"config": config, "model": self.model_spec, "store": self.store.identity}

    def _chunk(self) -> int:
        opts = self.opts
        if opts.memory_budget is None:
            return opts.blocks.chunk
        import psutil

        # Training elements of gathered windows: two prefetched and one training (see chunkfit.pipeline).
        elements = 3 * self.steps * batch_bytes(opts.batch_size, opts.windows.window, self.store.n_channels,
                                                self.labeller.n_classes)
        in_use = psutil.Process().memory_info().rss + _TRACE_ALLOWANCE + elements
        chunk = chunk_for_budget(opts.memory_budget, in_use, opts.windows, self.store.n_channels, opts.blocks.mix)
        if chunk < opts.batch_size:
            raise WindowError(
                f"memory budget {opts.memory_budget / 2**20:.0f} MB leaves room for blocks of {chunk} "
                f"windows, fewer than the batch size {opts.batch_size}; raise --memory-budget"
            )
        return chunk

    # -- the loop ---------------------------------------------------------------------------------
    def train(self) -> keras.callbacks.History:
        try:
            try:
                return self._train()
            except OSError as err:
                if isinstance(err, ChunkfitError) or self.folder is None or err.errno not in _WRITE_ERRORS:
                    raise
                raise self._write_error(err, Path(err.filename).name if err.filename else "a file of the run") from None
        except BaseException:
            # A new run that failed before it saved anything leaves nothing behind.
            if self.folder is not None and self.resumed is None and not self.epoch_records and self.last_checkpoint is None:
                self.folder.discard()
            raise

    def _train(self) -> keras.callbacks.History:
        import keras

        from .callbacks import BlockBridge
        from .stepper import Stepper

        model, opts, folder = self.model, self.opts, self.folder
        self.history = history = keras.callbacks.History()
        extra: list[keras.callbacks.Callback] = []
        if folder is not None:
            if self.resumed is not None:
                # The rows of the epochs after the checkpoint go: they are trained again.
                _restore_copy(self.resumed.history_csv(), folder.file(HISTORY_FILE))
            extra.append(keras.callbacks.CSVLogger(str(folder.file(HISTORY_FILE)), append=self.resumed is not None))
        steps = sum(math.ceil(b.n_windows / opts.batch_size) for b in self.train_blocks)
        run_callbacks = keras.callbacks.CallbackList(
            [*self.user_callbacks, *extra, history], model=model, epochs=opts.epochs, steps=steps, verbose=0
        )
        self.stepper = Stepper(model)
        self.bridge = BlockBridge(run_callbacks, on_batch=self._on_batch if self.progress else None,
                                  fitting=self.stepper)
        self.inner = keras.callbacks.CallbackList([self.bridge], model=model)
        model.stop_training = False
        run_callbacks.on_train_begin()
        start = self._restore(self.resumed) if self.resumed is not None else _Start()
        logs = {k: v[-1] for k, v in history.history.items() if v}
        for epoch in range(start.epoch, opts.epochs):
            if model.stop_training:  # a checkpoint taken after a callback stopped the run
                break
            run_callbacks.on_epoch_begin(epoch)
            logs, record = self._epoch(epoch, run_callbacks, start if epoch == start.epoch else _Start(epoch))
            run_callbacks.on_epoch_end(epoch, logs)
            self.epoch_records.append(record)
            if self.progress is not None:
                self.progress(TrainProgress("epoch", epoch, opts.epochs, 0, 0, record["train_windows"],
                                            record["train_windows"], record["windows_per_s"] or 0.0,
                                            logs.get("loss"), (epoch + 1) / opts.epochs, dict(logs)))
            self._checkpoint(Cursor(opts.blocks.seed, epoch + 1, 0), None, 0.0)
            self._write_record(done=False)
            if model.stop_training:
                break
        run_callbacks.on_train_end(logs)
        if folder is not None:
            folder.save_model(model)
            folder.plot(history.history)
            self._write_record(done=True)
            folder.remove_checkpoint()
        return history

    def _epoch(self, epoch: int, run_callbacks: keras.callbacks.CallbackList,
               start: _Start) -> tuple[dict[str, float], dict[str, Any]]:
        opts, model, spec = self.opts, self.model, self.opts.blocks
        order = block_order(len(self.train_blocks), spec.seed, epoch, spec.shuffle_blocks)
        train_groups = [[self.train_blocks[i] for i in g] for g in groups(order, spec.mix)]
        first = -(-start.position // spec.mix)  # groups trained before a checkpoint (only whole ones)
        val_groups = [self.val_blocks[i : i + spec.mix] for i in range(0, len(self.val_blocks), spec.mix)]
        train_jobs = [partial(self._load, g, epoch, k) for k, g in enumerate(train_groups)][first:]
        val_jobs = [partial(self._load, g, None, k) for k, g in enumerate(val_groups)]
        self.blocks_done = list(start.blocks)
        self._clock = (time.perf_counter(), start.train_seconds)
        with contextlib.ExitStack() as stack:
            stream = stack.enter_context(contextlib.closing(prefetched(train_jobs + val_jobs, ahead=opts.prefetch)))
            trained = self._phase("train", epoch, stream, train_groups[first:], self.train_blocks, start)
            train_seconds = self._train_seconds()
            logs = _pythonify(model.get_metrics_result())
            if trained < len(train_jobs):  # a callback stopped training inside the epoch
                stream.close()
                stream = stack.enter_context(contextlib.closing(prefetched(val_jobs, ahead=opts.prefetch)))
            t1 = time.perf_counter()
            if val_jobs:
                run_callbacks.on_test_begin()
                self._phase("validate", epoch, stream, val_groups, self.val_blocks, None)
                val_logs = _pythonify(model.get_metrics_result())
                run_callbacks.on_test_end(val_logs)
                logs.update({f"val_{k}": v for k, v in val_logs.items()})
        windows = sum(self.train_blocks[i].n_windows for i in self.blocks_done)
        record = {
            "epoch": epoch,
            **logs,
            "train_windows": windows,
            "train_seconds": round(train_seconds, 3),
            "validation_seconds": round(time.perf_counter() - t1, 3),
            "windows_per_s": round(windows / train_seconds, 1) if train_seconds > 0 else None,
            "blocks": list(self.blocks_done),
        }
        return logs, record

    def _phase(self, phase: str, epoch: int, stream: Generator[BlockTensors, None, None], todo: list[list[Block]],
               blocks: list[Block], start: _Start | None) -> int:
        """Train (or evaluate) the groups ``todo`` from ``stream``; returns how many ran.

        ``start`` (training only) is where the epoch resumes: its metric totals and batch count.
        """
        from .pipeline import step_batches, train_element_spec

        model, opts = self.model, self.opts
        self.bridge.start_phase()
        carried = None
        total = sum(b.n_windows for b in blocks)
        self._tick = _Tick(phase, epoch, opts.epochs, len(blocks), total, opts.batch_size, self._share(phase))
        if start is not None and start.position:
            carried, self.bridge.offset = start.metrics, start.batches
            self._tick.skip(start.position, sum(self.train_blocks[i].n_windows for i in start.blocks))
        if phase == "train" and todo:  # compiles the train step while the first group loads
            self.stepper.prepare(train_element_spec(opts.windows.window, self.store.n_channels, opts.batch_size,
                                                    self.labeller.n_classes))
        for k, group in enumerate(todo):
            try:
                tensors = next(stream)
            except StoreChangedError as err:
                kept = self._kept()
                hint = "; resume on the store as it was, or pass --restart to train on it as it is now" if kept else ""
                raise StoreChangedError(f"{self.store.path}: the store changed while training ({err}); training "
                                        f"stopped{kept}{hint}") from None
            self._tick.begin_group(tensors.n_blocks, tensors.n_windows, self.bridge.offset)
            ds = tensors.dataset
            if phase == "train":
                self.bridge.start_block(carried, step_batches(tensors.n_windows, opts.batch_size, self.steps))
                self.stepper.fit(ds, epochs=1, verbose=0, callbacks=self.inner, shuffle=False)
            else:
                self.bridge.start_block(carried)
                model.evaluate(ds, verbose=0, callbacks=self.inner)
            carried = self.bridge.end_block(math.ceil(tensors.n_windows / opts.batch_size))
            if phase == "train":
                self.blocks_done += [b.index for b in group]
                if model.stop_training:
                    return k + 1
                if k + 1 < len(todo):  # the epoch's last group is followed by the epoch's checkpoint
                    self._maybe_checkpoint(epoch, carried, len(group))
        return len(todo)

    def _load(self, group: list[Block], epoch: int | None, k: int) -> BlockTensors:
        """Group ``k`` of an epoch, its windows shuffled for training (``epoch``) or in order, with
        the dataset Keras will be handed (built here, in the loader thread).

        The store is checked for changes before and after the read (a few ``stat`` calls).
        """
        from .pipeline import block_dataset, to_tensors

        spec = self.opts.blocks
        order = None
        if epoch is not None:
            order = window_order(sum(b.n_windows for b in group), spec.seed, epoch, k, spec.shuffle_windows)
        self._check_store()
        data = read_group(self.store, self.labeller, group, order)
        self._check_store()
        tensors = to_tensors(data)
        opts = self.opts
        return dataclasses.replace(tensors, dataset=block_dataset(
            tensors, window=opts.windows.window, batch_size=opts.batch_size, n_classes=self.labeller.n_classes,
            steps=None if epoch is None else self.steps))

    def _check_store(self) -> None:
        changed = self.store.changed()
        if changed is not None:
            raise StoreChangedError(changed)

    # -- checkpoints ------------------------------------------------------------------------------
    def _maybe_checkpoint(self, epoch: int, carried: list[np.ndarray], n_blocks: int) -> None:
        if self.folder is None:
            return
        self.blocks_since_checkpoint += n_blocks
        if self.checkpoint_every is not None:
            due = self.blocks_since_checkpoint >= self.checkpoint_every
        else:
            due = time.monotonic() - self.last_checkpoint_time >= CHECKPOINT_SECONDS
        if due:
            self._checkpoint(Cursor(self.opts.blocks.seed, epoch, len(self.blocks_done)), carried,
                             self._train_seconds())

    def _checkpoint(self, cursor: Cursor, carried: list[np.ndarray] | None, train_seconds: float) -> None:
        """Write a checkpoint from which the run continues at ``cursor``; see chunkfit.checkpoint."""
        if self.folder is None:
            return
        from . import resume

        arrays = resume.model_arrays(self.model)
        arrays.update(resume.metric_arrays(carried))
        callbacks, callback_arrays = resume.callback_state(self.user_callbacks)
        rng, rng_arrays = resume.rng_state()
        arrays.update(callback_arrays)
        arrays.update(rng_arrays)
        mid_epoch = cursor.position > 0
        state = {
            "sequence": self.sequence + 1,
            "run": self._identity(),
            "chunk": self.chunk,
            "cursor": cursor.to_dict(),
            "blocks_done": list(self.blocks_done) if mid_epoch else [],
            "batch_offset": self.bridge.offset if mid_epoch else 0,
            "train_seconds": train_seconds,
            "stopped": bool(self.model.stop_training),
            "history": self.history.history,
            "history_epochs": self.history.epoch,
            "epoch_records": self.epoch_records,
            "callbacks": callbacks,
            "rng": rng,
            "resumes": self.resumes,
            "wall_seconds": time.perf_counter() - self.started,
        }
        try:
            self.folder.write_checkpoint(state, arrays)
        except OSError as err:
            raise self._write_error(err, "a checkpoint") from None
        self.sequence += 1
        self.last_checkpoint = cursor
        self.last_checkpoint_time = time.monotonic()
        self.blocks_since_checkpoint = 0

    def _restore(self, resumed: Checkpoint) -> _Start:
        """Put the run back as it was when ``resumed`` was written; returns where training continues."""
        from . import resume

        assert self.folder is not None
        where = str(self.folder.path)
        state, arrays = resumed.state, resumed.arrays()
        resume.build(self.model, self.opts.windows.window, self.store.n_channels, self.labeller.n_classes)
        resume.set_model_arrays(self.model, arrays, where)
        resume.set_callback_state(self.user_callbacks, state["callbacks"], arrays, where)
        resume.set_rng_state(state["rng"], arrays)
        self.history.history = {k: list(v) for k, v in state["history"].items()}
        self.history.epoch = list(state["history_epochs"])
        self.epoch_records = list(state["epoch_records"])
        self.model.stop_training = bool(state["stopped"])
        self.sequence = resumed.sequence
        self.last_checkpoint = cursor = Cursor.from_dict(state["cursor"])
        self.resumes = [*state["resumes"], cursor.to_dict()]
        self.started = time.perf_counter() - float(state["wall_seconds"])
        if self.progress is not None:
            share = (cursor.epoch + cursor.position / max(len(self.train_blocks), 1)) / max(self.opts.epochs, 1)
            self.progress(TrainProgress("resume", cursor.epoch, self.opts.epochs, cursor.position,
                                        len(self.train_blocks), 0, 0, 0.0, None, min(share, 1.0)))
        return _Start(cursor.epoch, cursor.position, resume.metrics_from(arrays), int(state["batch_offset"]),
                      [int(i) for i in state["blocks_done"]], float(state["train_seconds"]))

    def _train_seconds(self) -> float:
        t0, before = self._clock
        return before + time.perf_counter() - t0

    def _kept(self) -> str:
        """"; the checkpoint made ... is intact in RUN" when the run has one, for error messages."""
        c = self.last_checkpoint
        if self.folder is None or c is None:
            return ""
        where = (f"after epoch {c.epoch}" if c.position == 0 else
                 f"in epoch {c.epoch + 1}/{self.opts.epochs} after {c.position} of {len(self.train_blocks)} blocks")
        return f"; the checkpoint made {where} is intact in {self.folder.path}"

    def _write_error(self, err: OSError, what: str) -> ChunkfitError:
        assert self.folder is not None
        reason = err.strerror or str(err)
        kept = self._kept()
        again = "run the same command to resume" if kept else "run the same command to start again"
        if err.errno in _DISK_FULL:
            return DiskFullError(f"{self.folder.path}: {what} cannot be written ({reason}: the disk is full or a "
                                 f"file-size limit was hit){kept}; free some space and {again}")
        return RunError(f"{self.folder.path}: {what} cannot be written ({reason}){kept}; fix that and {again}")

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
            "config": {**self.opts.to_dict(), "chunk_used": self.chunk, "steps_per_execution_used": self.steps},
            "classes": self.labeller.classes,
            "store": {"path": str(self.store.path.resolve()), "identity": self.store.identity},
            "split": self.split.to_dict(),
            "blocks": {"train": len(self.train_blocks), "validation": len(self.val_blocks), "mix": self.opts.blocks.mix},
            "epochs": self.epoch_records,
            "stopped_early": bool(self.model.stop_training),
            "cursor": Cursor(self.opts.blocks.seed, last + 1, 0).to_dict(),
            "resumes": self.resumes,
            "windows_per_s": round(trained / train_s, 1) if train_s > 0 else None,
            "threads": self.threads,
            "wall_seconds": round(wall, 3),
            "peak_rss_bytes": peak_rss_bytes(),
        })


@dataclasses.dataclass(frozen=True)
class _Start:
    """Where an epoch's training starts: at its beginning, or where a checkpoint left it.

    ``position`` blocks of the epoch's order (``blocks``, in the order trained) were trained, in
    ``batches`` batches and ``train_seconds``; ``metrics`` are the metric totals after them.
    """

    epoch: int = 0
    position: int = 0
    metrics: list[np.ndarray] | None = None
    batches: int = 0
    blocks: list[int] = dataclasses.field(default_factory=list)
    train_seconds: float = 0.0


def _restore_copy(source: Path | None, target: Path) -> None:
    """Put ``source`` back at ``target`` atomically (or remove ``target`` when there is no source)."""
    if source is None:
        target.unlink(missing_ok=True)
        return
    tmp = target.with_name(target.name + ".tmp")
    shutil.copyfile(source, tmp)
    os.replace(tmp, target)


class _Tick:
    """Turns batch counts into TrainProgress for one phase of one epoch."""

    def __init__(self, phase: str, epoch: int, epochs: int, blocks: int, total: int, batch: int,
                 share: tuple[float, float]) -> None:
        self.phase, self.epoch, self.epochs, self.blocks, self.total, self.batch = phase, epoch, epochs, blocks, total, batch
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
        return TrainProgress(self.phase, self.epoch, self.epochs, self.block, self.blocks, done, self.total,
                             done / seconds if seconds > 0 else 0.0, None if loss is None else float(loss),
                             self.share[0] + self.share[1] * done / max(self.total, 1))


def _pythonify(logs: dict[str, Any]) -> dict[str, float]:
    return {k: float(np.asarray(v)) for k, v in logs.items()}


def _version() -> str:
    from . import __version__

    return __version__
