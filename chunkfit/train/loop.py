"""The epoch loop: Keras ``model.fit`` once per shuffled group of blocks, the epochs owned here.

Per epoch: the training blocks are visited in ``block_order(seed, epoch)``, ``mix`` at a time
(chunkfit.core.plan). A group of blocks is read (one contiguous store read per block) in a
background thread while the previous group trains, handed to the engine as raw samples plus
jointly shuffled window offsets, and trained by one ``model.fit`` call
(chunkfit.train.tensorflow.engine). Then the validation blocks are evaluated and the run's
callbacks get the epoch's logs (chunkfit.train.callbacks carries metrics and batch numbers across
the calls). At the end of each epoch the validation split is scored once more for the epoch's event
figures (chunkfit.train.thresholds).

With a run folder (chunkfit.train.runfolder, one process at a time), a checkpoint is written every
``checkpoint_every`` blocks and at the end of every epoch (chunkfit.train.resume); a run started
again on that folder continues from it, at the next unfinished group of blocks, with the same block
and window orders, so every training window is still visited once per epoch (and, with
``deterministic``, the weights end bit for bit as without the interruption).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Generator
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.blocks import Block, prefetched
from ..core.picks import with_targets
from ..errors import ChunkfitError, RemoteError, StoreChangedError, WorkerLostError
from .cursor import Cursor
from .metrics import ordered
from .precision import float32_model, set_policy
from .progress import PhaseProgress, TrainProgress
from .runfolder import HISTORY_FILE, WRITE_ERRORS
from .runsetup import RunSetup

if TYPE_CHECKING:
    import keras

    from .tensorflow.pipeline import BlockTensors


class Trainer(RunSetup):
    """One training run: the epoch loop over a plan, an engine, and (with a run folder) checkpoints
    (chunkfit.train.runsetup sets them up)."""

    # -- the loop ---------------------------------------------------------------------------------
    def train(self, tensorboard: str | os.PathLike[str] | None = None) -> keras.callbacks.History:
        try:
            with self.engine.lost_worker():  # a collective failed: one line
                return self._train(tensorboard)
        except RemoteError as err:
            raise RemoteError(f"{err}{self._kept()}") from None  # what of the run was kept
        except WorkerLostError as err:
            raise WorkerLostError(f"{err}{self._kept()}") from None
        except OSError as err:
            if (
                isinstance(err, ChunkfitError)
                or self.folder is None
                or err.errno not in WRITE_ERRORS
            ):
                raise
            what = Path(err.filename).name if err.filename else "a file of the run"
            raise self.folder.write_error(err, what, self._kept()) from None

    def _train(self, tensorboard: str | os.PathLike[str] | None) -> keras.callbacks.History:
        import keras

        from .callbacks import BlockBridge, HistoryCsv

        model, opts, folder = self.model, self.opts, self.folder
        resumed = folder.checkpoint if folder is not None else self.resumed
        self.history = history = keras.callbacks.History()
        extra: list[keras.callbacks.Callback] = []
        if folder is not None:
            if resumed is not None:
                # The rows of the epochs after the checkpoint go: they are trained again.
                _restore_copy(resumed.history_csv(), folder.file(HISTORY_FILE))
            extra.append(HistoryCsv(folder.file(HISTORY_FILE), append=resumed is not None))
        if tensorboard is not None:
            extra.append(keras.callbacks.TensorBoard(log_dir=str(tensorboard)))
        steps = self.plan.train_batches(opts.batch_size)
        run_callbacks = keras.callbacks.CallbackList(
            [*self.user_callbacks, *extra, history],
            model=model,
            epochs=opts.epochs,
            steps=steps,
            verbose=0,
        )
        self.bridge = BlockBridge(
            run_callbacks,
            on_batch=self._on_batch if self.progress else None,
            fitting=self.engine.fit_wrapper,
        )
        self.inner = keras.callbacks.CallbackList([self.bridge], model=model)
        model.stop_training = False
        run_callbacks.on_train_begin()
        start = self._restore(resumed) if resumed is not None else Cursor(opts.blocks.seed)
        logs = {k: v[-1] for k, v in history.history.items() if v}
        try:
            logs = self._epochs(run_callbacks, start, logs)
        finally:  # a run stopped after an epoch, or failed, had read the next epoch's first group
            if self._ahead is not None:
                self._ahead.close()
                self._ahead = None
        run_callbacks.on_train_end(logs)
        # The model that takes raw signal: the trained one behind the run's normalisation.
        exported = self.engine.exported()
        if self.choice is not None and self.choice.precision != "float32":
            exported = float32_model(exported)  # what scores the run is float32 (precision.py)
            set_policy("float32")  # Keras's default again, for what the process builds next
        history.set_model(exported)
        self.threshold = self.thresholds.final()
        if folder is not None:
            folder.save_model(exported)
            folder.plot(history.history)
            self._write_record(finished=True)
            folder.remove_checkpoint()
        self.engine.finish()
        return history

    def _epochs(
        self, run_callbacks: keras.callbacks.CallbackList, start: Cursor, logs: dict[str, Any]
    ) -> dict[str, Any]:
        """The epochs from ``start`` on; returns the last epoch's logs."""
        model, opts = self.model, self.opts
        for epoch in range(start.epoch, opts.epochs):
            if model.stop_training:  # a checkpoint taken after a callback stopped the run
                break
            run_callbacks.on_epoch_begin(epoch)
            logs, record = self._epoch(
                epoch, run_callbacks, start if epoch == start.epoch else Cursor(start.seed, epoch)
            )
            run_callbacks.on_epoch_end(epoch, logs)
            self.log.epochs.append(record)
            self._say_compile()
            if self.progress is not None:
                self.progress(
                    TrainProgress.epoch_end(
                        epoch=epoch,
                        epochs=opts.epochs,
                        windows=record["train_windows"],
                        windows_per_s=record["windows_per_s"] or 0.0,
                        logs=logs,
                    )
                )
            self._checkpoint(Cursor(start.seed, epoch + 1))
            self._write_record(finished=False)
            if model.stop_training:
                break
        return logs

    def _epoch(
        self, epoch: int, run_callbacks: keras.callbacks.CallbackList, start: Cursor
    ) -> tuple[dict[str, float], dict[str, Any]]:
        opts, plan = self.opts, self.plan
        train_groups = plan.train_groups(epoch)
        first = -(
            -start.position // plan.mix
        )  # groups trained before a checkpoint (only whole ones)
        val_groups = plan.val_groups()
        train_jobs = [partial(self._load, g, epoch, k) for k, g in enumerate(train_groups)][first:]
        val_jobs = [partial(self._load, g, None, k) for k, g in enumerate(val_groups)]
        ahead, self._ahead = self._ahead, None
        if (
            ahead is not None and train_jobs
        ):  # this epoch's first group, read while the previous one validated
            train_jobs[0] = partial(next, ahead)
        # The next epoch's first group is read after this epoch's last, while validation, the
        # epoch's callbacks and its checkpoint run (``_ahead``).
        following = (
            [partial(self._load, plan.train_groups(epoch + 1)[0], epoch + 1, 0)]
            if opts.prefetch and epoch + 1 < opts.epochs
            else []
        )
        self.blocks_done = list(start.blocks)
        self._clock = (time.perf_counter(), start.train_seconds)
        stream, kept = prefetched(train_jobs + val_jobs + following, ahead=opts.prefetch), False
        try:
            trained = self._phase("train", epoch, stream, train_groups[first:], start)
            train_seconds = self._train_seconds()
            logs = self.engine.metrics()
            if trained < len(train_jobs):  # a callback stopped training inside the epoch
                stream.close()
                stream, following = prefetched(val_jobs, ahead=opts.prefetch), []
            t1 = time.perf_counter()
            if val_jobs:
                run_callbacks.on_test_begin()
                self._phase("validate", epoch, stream, val_groups, None)
                val_logs = self.engine.metrics()
                run_callbacks.on_test_end(val_logs)
                logs.update({f"val_{k}": v for k, v in val_logs.items()})
                logs = ordered(logs | self.thresholds.event_logs())
            if following:
                self._ahead, kept = stream, True
        finally:
            if (
                not kept
            ):  # first: its thread may still be taking this epoch's first group from ``ahead``
                stream.close()
            if ahead is not None:
                ahead.close()
        windows = plan.windows_of(self.blocks_done)
        record: dict[str, Any] = {
            "epoch": epoch,
            **logs,
            "train_windows": windows,
            "train_seconds": round(train_seconds, 3),
            "validation_seconds": round(time.perf_counter() - t1, 3),
            "windows_per_s": round(windows / train_seconds, 1) if train_seconds > 0 else None,
            "blocks": list(self.blocks_done),
        }
        sizes = [plan.windows_of(g) for g in self._groups_done(epoch)]
        shares = self.engine.epoch_shares(sizes)
        if shares is not None:  # who trained which windows, with several replicas
            record["replica_windows"] = shares
        return logs, record

    def _groups_done(self, epoch: int) -> list[list[int]]:
        """The block indices of each group of ``epoch`` trained so far."""
        done, out = set(self.blocks_done), []
        for group in self.plan.train_groups(epoch):
            if all(b.index in done for b in group):
                out.append([b.index for b in group])
        return out

    def _phase(
        self,
        phase: str,
        epoch: int,
        stream: Generator[BlockTensors, None, None],
        todo: list[list[Block]],
        start: Cursor | None,
    ) -> int:
        """Train (or evaluate) the groups ``todo`` from ``stream``; returns how many ran.

        ``start`` (training only) is where the epoch resumes: its metric totals and batch count.
        """
        opts, plan, engine, training = self.opts, self.plan, self.engine, phase == "train"
        self.bridge.start_phase()
        carried = None
        blocks = plan.train_blocks if training else plan.val_blocks
        self._phase_progress = PhaseProgress(
            phase,
            epoch,
            opts.epochs,
            len(blocks),
            plan.epoch_windows() if training else sum(plan.val_sizes),
            opts.batch_size,
            plan.share(epoch, opts.epochs, phase),
        )
        if start is not None and start.position:
            carried, self.bridge.offset = start.metrics, start.batches
            self._phase_progress.skip(start.position, plan.windows_of(start.blocks))
        if training and todo:  # compiles the train step while the first group loads
            engine.prepare()
        for k, group in enumerate(todo):
            try:
                tensors = next(stream)
            except StoreChangedError as err:
                kept = self._kept()
                hint = (
                    "; resume on the store as it was, or pass --restart to train on it as it is now"
                    if kept
                    else ""
                )
                raise StoreChangedError(
                    f"{self.store.path}: the store changed while training ({err}); training "
                    f"stopped{kept}{hint}"
                ) from None
            self._phase_progress.begin_group(
                tensors.n_blocks, tensors.n_windows, self.bridge.offset
            )
            if training:
                self.bridge.start_block(carried, engine.step_batches(tensors.n_windows))
                engine.train(tensors, self.inner)
            else:
                self.bridge.start_block(carried)
                engine.evaluate(tensors, self.inner)
            carried = self.bridge.end_block(-(-tensors.n_windows // opts.batch_size))
            if training:
                self.blocks_done += [b.index for b in group]
                if self.model.stop_training:
                    return k + 1
                # The epoch's last group is followed by the epoch's checkpoint.
                if (
                    k + 1 < len(todo)
                    and self.checkpoints is not None
                    and self.checkpoints.due(len(group))
                ):
                    self._checkpoint(
                        Cursor(
                            opts.blocks.seed,
                            epoch,
                            len(self.blocks_done),
                            carried,
                            self.bridge.offset,
                            list(self.blocks_done),
                            self._train_seconds(),
                        )
                    )
        return len(todo)

    def _load(self, group: list[Block], epoch: int | None, k: int) -> BlockTensors:
        """Group ``k`` of an epoch, its windows shuffled for training (``epoch``) or in order, as
        the engine's tensors (made here, in the loader thread).

        The store is checked for changes before and after the read (a few ``stat`` calls).
        """
        self._check_store()
        # the group's windows this epoch (chunkfit.core.balance), shuffled
        data = self.plan.read(self.store, group, epoch, k, self.opts.blocks.shuffle_windows)
        if self.pick_width is not None:
            data = with_targets(data, self.store, self.pick_width)
        self._check_store()
        return self.engine.tensors(data, training=epoch is not None)

    def _check_store(self) -> None:
        changed = self.store.changed()
        if changed is not None:
            raise StoreChangedError(changed)

    # -- checkpoints ------------------------------------------------------------------------------
    def _checkpoint(self, at: Cursor) -> None:
        if self.checkpoints is not None and self.folder is not None:
            self.checkpoints.save(
                at,
                model=self.model,
                callbacks=self.user_callbacks,
                history=self.history,
                log=self.log,
            )

    def _restore(self, resumed: Any) -> Cursor:
        assert self.checkpoints is not None
        s = self.engine.shapes
        with self.engine.scope():
            at = self.checkpoints.restore(
                resumed,
                model=self.model,
                callbacks=self.user_callbacks,
                history=self.history,
                log=self.log,
                shapes=(s.window, s.channels, s.classes),
            )
        if self.progress is not None:
            blocks = max(len(self.plan.train_blocks), 1)
            share = (at.epoch + at.position / blocks) / max(self.opts.epochs, 1)
            self.progress(
                TrainProgress.resumed(
                    epoch=at.epoch,
                    epochs=self.opts.epochs,
                    block=at.position,
                    blocks=len(self.plan.train_blocks),
                    done=min(share, 1.0),
                )
            )
        return at

    def _train_seconds(self) -> float:
        t0, before = self._clock
        return before + time.perf_counter() - t0

    def _on_batch(self, batches: int, logs: dict[str, Any]) -> None:
        assert self.progress is not None
        self.progress(self._phase_progress.at(batches, logs))


def _restore_copy(source: Path | None, target: Path) -> None:
    """Put ``source`` back at ``target`` atomically (or remove ``target`` when there is no
    source)."""
    if source is None:
        target.unlink(missing_ok=True)
        return
    tmp = target.with_name(target.name + ".tmp")
    shutil.copyfile(source, tmp)
    os.replace(tmp, target)
