"""``chunkfit.fit``: Keras ``model.fit`` once per shuffled block, with real epochs owned here.

Per epoch: the training blocks are visited in ``block_order(seed, epoch)``, ``mix`` at a time
(chunkfit.train.plan). A group of blocks is read (one contiguous store read per block) in a
background thread while the previous group trains, handed to the engine as raw samples plus
jointly shuffled window offsets, and trained by one ``model.fit`` call
(chunkfit.train.tensorflow.engine). Then the validation blocks are evaluated and the run's
callbacks get the epoch's logs (chunkfit.train.callbacks carries metrics and batch numbers across
the calls).

With a run folder (chunkfit.train.runfolder, one process at a time), a checkpoint is written every
``checkpoint_every`` blocks and at the end of every epoch (chunkfit.train.resume); a run started
again on that folder continues from it, at the next unfinished group of blocks, with the same block
and window orders, so every training window is still visited once per epoch (and, with
``deterministic``, the weights end bit for bit as without the interruption).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable, Generator, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import BlockSpec, FitOptions, SplitSpec, WindowSpec
from ..errors import (
    ChunkfitError,
    RemoteError,
    StoreChangedError,
    UsageError,
    WorkerLostError,
)
from ..store import Store, open_store
from .blocks import Block, prefetched, read_group, window_order
from .budget import chunk_in_budget
from .engines import Engine, EngineEntry, Predictor, engine_for_backend
from .malloc import cap_arenas
from .metrics import ordered
from .models import DEFAULT_MODEL
from .normalize import normalizer_for
from .plan import SplitPlan, TrainPlan
from .progress import Tick, TrainProgress
from .record import RunLog
from .resume import Checkpointer, Position
from .runfolder import (
    HISTORY_FILE,
    WRITE_ERRORS,
    PeerFolder,
    RunFolder,
    open_peer_folder,
    open_run_folder,
)
from .steps import Shapes
from .weights import class_weights

if TYPE_CHECKING:
    import keras

    from .tensorflow.pipeline import BlockTensors

__all__ = ["TrainProgress", "fit"]

# Windows per batch of the per-epoch threshold scoring (chunkfit.score.scorer's default).
SCORING_BATCH = 1024


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
    validation_segments: float | None = None,
    callbacks: Sequence[keras.callbacks.Callback] | None = None,
    seed: int = 0,
    label: str = "any-event",
    deterministic: bool = False,
    memory_budget: int | None = None,
    normalize: str = "global",
    class_weight: str = "auto",
    threshold_for: str = "f1",
    steps_per_execution: int | None = FitOptions.steps_per_execution,
    compute_threads: int | None = None,
    jit: str = "auto",
    jax_loop: str = "auto",
    optimizer: str | None = None,
    lr: float | None = None,
    loss: str | None = None,
    out: str | os.PathLike[str] | None = None,
    progress: Callable[[TrainProgress], None] | None = None,
    options: FitOptions | None = None,
    checkpoint_every: int | None = None,
    resume: str = "auto",
    tensorboard: str | os.PathLike[str] | None = None,
    devices: str | None = None,
) -> keras.callbacks.History:
    """Train ``model`` on every window of ``store``, block by block; returns the Keras History.

    ``model`` is a Keras model or what ``chunkfit train --model`` takes (a built-in name, a
    ``.keras`` file, ``module:function``). ``options``, when given, replaces the keyword settings.
    With ``out`` the run folder gets model.keras, history.csv, run.json and curves.png, and while
    training a checkpoint every ``checkpoint_every`` blocks (default: about every 3 minutes of
    training) and at the end of every epoch. On a folder holding an unfinished run, ``resume``
    "auto" continues it from its checkpoint (a folder without one starts a new run), "resume" does
    the same but refuses a folder with nothing to resume, and "restart" deletes the run and starts over.
    A finished run is refused unless "restart". ``normalize`` ("global", "window" or "none") is how
    windows are standardised before ``model`` sees them (chunkfit.train.normalize): the returned
    History's ``model`` is the trained model behind that standardisation, the one that takes raw
    signal (and the one saved as model.keras). ``class_weight`` ("auto", "balanced", "none" or
    "0:1,1:40") weighs training windows by class (chunkfit.train.weights). At the end, the run picks
    its decision threshold on the validation split by ``threshold_for`` ("f1", "recall=0.9",
    "precision=0.8"; chunkfit.score.threshold) and records it in run.json. ``jit`` ("auto", "on",
    "off") is whether the train step runs under XLA; "auto" times both on this machine first
    (chunkfit.train.tensorflow.autotune; the choice goes to run.json). ``jax_loop`` ("auto",
    "dispatch", "scan") is how the JAX engine runs an element's batches (chunkfit.train.jax.loopchoice). ``tensorboard`` is a folder for Keras's TensorBoard
    callback: epoch summaries, and evaluation figures against the optimizer's step count, which runs
    on across blocks. ``devices`` ("all", or "cpu:N" logical CPU devices for trying it out) trains on
    several devices of this machine, and TF_CONFIG in the environment makes this process one worker of
    a synchronous multi-worker run (chunkfit.train.tensorflow.distributed); ``batch_size`` is then the
    global batch, and only the chief (rank 0) writes ``out``.
    """
    opts = options or FitOptions(
        windows=WindowSpec(window=window, stride=stride, label=label),
        split=SplitSpec(validation=validation, segments=validation_segments),
        blocks=BlockSpec(chunk=chunk, seed=seed, mix=mix),
        batch_size=batch_size,
        epochs=epochs,
        deterministic=deterministic,
        memory_budget=memory_budget,
        steps_per_execution=steps_per_execution,
        compute_threads=compute_threads,
        jit=jit,
        jax_loop=jax_loop,
        optimizer=optimizer,
        lr=lr,
        loss=loss,
        normalize=normalize,
        class_weight=class_weight,
        threshold_for=threshold_for,
    )
    if checkpoint_every is not None and (
        isinstance(checkpoint_every, bool)
        or not isinstance(checkpoint_every, int)
        or checkpoint_every < 1
    ):
        raise UsageError(
            f"--checkpoint-every must be a positive number of blocks (received {checkpoint_every!r})"
        )
    if out is None and resume != "auto":
        raise UsageError(f"resume={resume!r} needs a run folder: pass out=RUN")
    cap_arenas()  # before the run's threads allocate: memory flat at 20M samples (chunkfit.train.malloc)
    engine = engine_for_backend()
    distribution = _distribution(devices, engine)
    engine.check(opts)
    with contextlib.ExitStack() as stack:
        if not isinstance(store, Store):
            store = stack.enter_context(open_store(store))
        split = SplitPlan.of(store, opts)  # most mistakes are refused here, before TensorFlow loads
        identity = run_identity(opts, model, store)
        is_peer = (
            distribution is not None and distribution[0] is not None and not distribution[0].chief
        )
        folder = open_run_folder(out, resume, identity) if out is not None and not is_peer else None
        peer = (
            stack.enter_context(contextlib.closing(open_peer_folder(out)))
            if out is not None and is_peer
            else None
        )
        try:
            trainer = Trainer(
                model,
                store,
                opts,
                split,
                list(callbacks or []),
                folder,
                progress,
                checkpoint_every,
                identity,
                distribution,
                peer,
                engine,
            )
            history = trainer.train(tensorboard)
        except BaseException:
            if folder is not None:
                folder.close(failed=True)
            raise
        if folder is not None:
            folder.close()
        return history


class Trainer:
    """One training run: the epoch loop over a plan, an engine, and (with a run folder) checkpoints.

    Every check happens in ``__init__``, before any training; those that need no TensorFlow ran in
    ``SplitPlan.of`` and ``RunFolder`` already.
    """

    def __init__(
        self,
        model: keras.Model | str,
        store: Store,
        opts: FitOptions,
        split: SplitPlan,
        callbacks: list[keras.callbacks.Callback],
        folder: RunFolder | None,
        progress: Callable[[TrainProgress], None] | None,
        checkpoint_every: int | None,
        identity: dict[str, Any],
        distribution: tuple[Any, str | None] | None = None,
        peer: PeerFolder | None = None,
        engine: EngineEntry | None = None,
    ) -> None:
        self.store, self.opts, self.user_callbacks, self.progress, self.folder = (
            store,
            opts,
            callbacks,
            progress,
            folder,
        )
        self.model_spec = identity["model"]
        resumed = folder.checkpoint if folder is not None else None
        shapes = Shapes(opts.windows.window, store.n_channels, split.labeller.n_classes)
        self.normalizer = normalizer_for(opts.normalize, store, split.split.train)
        w = opts.windows
        self.weights = class_weights(
            opts.class_weight, split.labeller, split.split.train, w.window, w.stride
        )
        if self.weights.notice is not None and progress is not None:
            progress(
                TrainProgress(
                    "notice",
                    0,
                    opts.epochs,
                    0,
                    0,
                    0,
                    0,
                    0.0,
                    None,
                    0.0,
                    message=self.weights.notice,
                )
            )
        self.entry = entry = engine if engine is not None else engine_for_backend()
        self.engine: Engine
        if distribution is None:
            self.engine = entry.engine().start(
                model,
                opts,
                shapes,
                self.normalizer,
                self.weights.weights,
                opts.epochs * split.split.train_windows(),
                split.blocks(opts, opts.blocks.chunk).group_samples(),
                say=self._notice,
            )
        else:
            assert entry.distributed is not None  # refused in ``_distribution``
            self.engine = entry.distributed().start_distributed(
                model, opts, shapes, self.normalizer, self.weights.weights, *distribution
            )
            if folder is not None:
                folder.create()  # before the workers meet: a resumed checkpoint has its settled name
            resumed = self._meet(identity, folder, peer)
        self.model = self.engine.model
        # A resumed run keeps its blocks even when --memory-budget would pick another chunk now.
        if resumed is not None:
            chunk = int(resumed.state["chunk"])
        elif opts.memory_budget is not None:
            chunk = chunk_in_budget(
                opts.memory_budget,
                opts.windows,
                store.n_channels,
                opts.blocks.mix,
                opts.batch_size,
                self.engine.in_flight_bytes(),
            )
        else:
            chunk = opts.blocks.chunk
        self.plan: TrainPlan = split.blocks(opts, chunk)
        self.engine.pad_groups_to(self.plan.group_samples())
        batches = (
            sum(-(-b.n_windows // opts.batch_size) for b in self.plan.train_blocks) * opts.epochs
        )
        self.engine.choose_compile(batches)
        self._said_compile = False
        self._scoring: tuple[keras.Model, Predictor] | None = None
        self._last_chosen: tuple[dict[str, Any] | None, list[Any]] | None = (
            None  # last epoch's, and its weights
        )
        self.log = RunLog(self._about(), opts.blocks.seed)
        self.checkpoints: Checkpointer | None = None
        self.resumed = resumed
        if folder is not None and not folder.ready:
            folder.create()
        if folder is not None or resumed is not None:  # a peer worker only restores from one
            self.checkpoints = Checkpointer(
                folder if folder is not None else peer,
                identity,
                chunk,
                checkpoint_every,
                (opts.epochs, len(self.plan.train_blocks)),
            )
        self.blocks_done: list[int] = []  # train blocks of the current epoch, in the order trained
        # Between epochs: the stream whose one item left is the next epoch's first group, read in its
        # loader thread while this epoch validates (about a group's read, 1-2% of an epoch of the 1M
        # benchmark, no longer waited for at each epoch's start); the next epoch takes it from there.
        self._ahead: Generator[BlockTensors, None, None] | None = None

    def _about(self) -> dict[str, Any]:
        """The part of run.json that stays as it is while the run trains."""
        plan = self.plan
        return {
            "model": self.model_spec,
            "config": {
                **self.opts.to_dict(),
                "chunk_used": plan.chunk,
                "steps_per_execution_used": self.engine.steps,
            },
            "classes": plan.labeller.classes,
            "store": {"path": str(self.store.path.resolve()), "identity": self.store.identity},
            "split": plan.split.to_dict(),
            "blocks": {
                "train": len(plan.train_blocks),
                "validation": len(plan.val_blocks),
                "mix": plan.mix,
            },
            "normalization": self.normalizer.to_dict(),
            "class_weight": self.weights.to_dict(plan.labeller.classes),
            "engine": self.engine.name,
            "threads": self.engine.threads_info(),
            **(
                {"distribution": about}
                if (about := self.engine.distribution_info()) is not None
                else {}
            ),
        }

    def _meet(
        self, identity: dict[str, Any], folder: RunFolder | None, peer: PeerFolder | None
    ) -> Any:
        """The workers check each other (``Engine.rendezvous``); returns the checkpoint this worker
        resumes from: the chief's, read by every other worker (from a shared file system, or
        through an s3 run's pointer) after the chief settled it and before it can write another."""
        if folder is not None:
            return self.engine.rendezvous(
                identity,
                folder.shown,
                lambda: folder.checkpoint,
                write=folder.write_probe,
                remove=folder.remove_probe,
            )
        return self.engine.rendezvous(
            identity,
            peer.shown if peer is not None else None,
            peer.latest if peer is not None else lambda: None,
            read=peer.read_probe if peer is not None else None,
        )

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
        steps = sum(-(-b.n_windows // opts.batch_size) for b in self.plan.train_blocks)
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
        start = self._restore(resumed) if resumed is not None else Position()
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
        history.set_model(exported)
        self.threshold = self._choose_threshold()
        if folder is not None:
            folder.save_model(exported)
            folder.plot(history.history)
            self._write_record(finished=True)
            folder.remove_checkpoint()
        self.engine.finish()
        return history

    def _epochs(
        self, run_callbacks: keras.callbacks.CallbackList, start: Position, logs: dict[str, Any]
    ) -> dict[str, Any]:
        """The epochs from ``start`` on; returns the last epoch's logs."""
        model, opts = self.model, self.opts
        for epoch in range(start.epoch, opts.epochs):
            if model.stop_training:  # a checkpoint taken after a callback stopped the run
                break
            run_callbacks.on_epoch_begin(epoch)
            logs, record = self._epoch(
                epoch, run_callbacks, start if epoch == start.epoch else Position(epoch)
            )
            run_callbacks.on_epoch_end(epoch, logs)
            self.log.epochs.append(record)
            self._say_compile()
            if self.progress is not None:
                self.progress(
                    TrainProgress(
                        "epoch",
                        epoch,
                        opts.epochs,
                        0,
                        0,
                        record["train_windows"],
                        record["train_windows"],
                        record["windows_per_s"] or 0.0,
                        logs.get("loss"),
                        (epoch + 1) / opts.epochs,
                        dict(logs),
                    )
                )
            self._checkpoint(Position(epoch + 1))
            self._write_record(finished=False)
            if model.stop_training:
                break
        return logs

    def _epoch(
        self, epoch: int, run_callbacks: keras.callbacks.CallbackList, start: Position
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
        # The next epoch's first group is read after this epoch's last, while validation, the epoch's
        # callbacks and its checkpoint run (``_ahead``).
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
                logs = ordered(logs | self._event_logs())
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
        record = {
            "epoch": epoch,
            **logs,
            "train_windows": windows,
            "train_seconds": round(train_seconds, 3),
            "validation_seconds": round(time.perf_counter() - t1, 3),
            "windows_per_s": round(windows / train_seconds, 1) if train_seconds > 0 else None,
            "blocks": list(self.blocks_done),
        }
        sizes = [sum(plan.train_blocks[i].n_windows for i in g) for g in self._groups_done(epoch)]
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
        start: Position | None,
    ) -> int:
        """Train (or evaluate) the groups ``todo`` from ``stream``; returns how many ran.

        ``start`` (training only) is where the epoch resumes: its metric totals and batch count.
        """
        opts, plan, engine, training = self.opts, self.plan, self.engine, phase == "train"
        self.bridge.start_phase()
        carried = None
        blocks = plan.train_blocks if training else plan.val_blocks
        self._tick = Tick(
            phase,
            epoch,
            opts.epochs,
            len(blocks),
            sum(b.n_windows for b in blocks),
            opts.batch_size,
            plan.share(epoch, opts.epochs, phase),
        )
        if start is not None and start.position:
            carried, self.bridge.offset = start.metrics, start.batches
            self._tick.skip(start.position, plan.windows_of(start.blocks))
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
            self._tick.begin_group(tensors.n_blocks, tensors.n_windows, self.bridge.offset)
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
                        Position(
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
        """Group ``k`` of an epoch, its windows shuffled for training (``epoch``) or in order, as the
        engine's tensors (made here, in the loader thread).

        The store is checked for changes before and after the read (a few ``stat`` calls).
        """
        spec = self.opts.blocks
        order = None
        if epoch is not None:
            order = window_order(
                sum(b.n_windows for b in group), spec.seed, epoch, k, spec.shuffle_windows
            )
        self._check_store()
        data = read_group(self.store, self.plan.labeller, group, order)
        self._check_store()
        return self.engine.tensors(data, training=epoch is not None)

    def _check_store(self) -> None:
        changed = self.store.changed()
        if changed is not None:
            raise StoreChangedError(changed)

    # -- checkpoints ------------------------------------------------------------------------------
    def _checkpoint(self, at: Position) -> None:
        if self.checkpoints is not None and self.folder is not None:
            self.checkpoints.save(
                at,
                seed=self.opts.blocks.seed,
                model=self.model,
                callbacks=self.user_callbacks,
                history=self.history,
                log=self.log,
            )

    def _restore(self, resumed: Any) -> Position:
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
                TrainProgress(
                    "resume",
                    at.epoch,
                    self.opts.epochs,
                    at.position,
                    len(self.plan.train_blocks),
                    0,
                    0,
                    0.0,
                    None,
                    min(share, 1.0),
                )
            )
        return at

    def _kept(self) -> str:
        return self.checkpoints.kept() if self.checkpoints is not None else ""

    def _train_seconds(self) -> float:
        t0, before = self._clock
        return before + time.perf_counter() - t0

    def _on_batch(self, batches: int, logs: dict[str, Any]) -> None:
        assert self.progress is not None
        self.progress(self._tick.at(batches, logs))

    def _scorer(self) -> tuple[keras.Model, Predictor]:
        """The model that takes raw signal and its engine's compiled scorer, made once: it shares
        the trained model's weights, so it scores them as they are now."""
        if self._scoring is None:
            exported = self.engine.exported()
            self._scoring = (
                exported,
                self.entry.predictor(
                    exported, self.opts.windows.window, self.store.n_channels, SCORING_BATCH
                ),
            )
        return self._scoring

    def _event_logs(self) -> dict[str, float]:
        """The epoch's figures at the threshold chosen on the validation split now, when the store has
        event markers: ``val_threshold``, ``val_events_covered`` (the share of the split's events
        inside a positive window) and ``val_false_alarms_per_hour`` (``val_false_alarms`` without a
        sample rate). Window-level precision, recall and F1 stay at 0.5, as Keras computes them."""
        from ..score.threshold import choose_threshold

        if not self.store.has_events:
            return {}
        model, predictor = self._scorer()
        plan = self.plan
        chosen = choose_threshold(
            model,
            self.store,
            plan.labeller,
            self.opts.windows,
            plan.split.validation,
            self.opts.threshold_for,
            predictor,
        )
        self._last_chosen = chosen, [w.numpy() for w in self.model.weights]
        if chosen is None or "events" not in chosen:
            return {}
        events = chosen["events"]
        out = {
            "val_threshold": float(chosen["value"]),
            "val_events_covered": chosen["events_covered"] / events if events else float("nan"),
        }
        per_hour = chosen["false_alarms_per_hour"]
        if per_hour is None:
            out["val_false_alarms"] = float(chosen["false_alarms"])
        else:
            out["val_false_alarms_per_hour"] = float(per_hour)
        return out

    def _choose_threshold(self) -> dict[str, Any] | None:
        """The decision threshold, chosen on the validation split (chunkfit.score.threshold)."""
        from ..score.threshold import choose_threshold

        plan = self.plan
        if self._last_chosen is not None and _same(self._last_chosen[1], self.model.weights):
            chosen = self._last_chosen[
                0
            ]  # the last epoch's, on these weights (no callback restored others)
        else:
            model, predictor = self._scorer()
            chosen = choose_threshold(
                model,
                self.store,
                plan.labeller,
                self.opts.windows,
                plan.split.validation,
                self.opts.threshold_for,
                predictor,
            )
        if chosen is not None and self.progress is not None:
            events = ""
            if "events" in chosen:
                per_hour = chosen["false_alarms_per_hour"]
                alarms = f"{chosen['false_alarms']}" + (
                    "" if per_hour is None else f" ({per_hour:.3g}/h)"
                )
                events = f", events covered {chosen['events_covered']}/{chosen['events']}, false alarms {alarms}"
            self.progress(
                TrainProgress(
                    "notice",
                    self.opts.epochs - 1,
                    self.opts.epochs,
                    0,
                    0,
                    0,
                    0,
                    0.0,
                    None,
                    1.0,
                    message=(
                        f"threshold {chosen['value']:.4g} chosen on the validation split ({chosen['rule']}): "
                        f"PR-AUC {chosen['pr_auc']:.3f}, precision {chosen['precision']:.3f}, "
                        f"recall {chosen['recall']:.3f}, F1 {chosen['f1']:.3f}{events}"
                    ),
                )
            )
        return chosen

    def _notice(self, message: str) -> None:
        if self.progress is not None:
            self.progress(
                TrainProgress(
                    "notice", 0, self.opts.epochs, 0, 0, 0, 0, 0.0, None, 0.0, message=message
                )
            )

    def _say_compile(self) -> None:
        """The one line saying how the train step is compiled and threaded, once that is decided."""
        line = self.engine.compile_line()
        if self.progress is not None and not self._said_compile and line is not None:
            self._said_compile = True
            self._notice(line)

    def _write_record(self, *, finished: bool) -> None:
        if self.folder is not None:
            record = self.log.record(finished=finished, stopped=bool(self.model.stop_training))
            record["compile"] = self.engine.compile_info()
            if finished:
                record["threshold"] = self.threshold
            self.folder.write_json(record)


def _same(saved: list[Any], weights: list[Any]) -> bool:
    """Whether ``weights`` still hold the ``saved`` values."""
    import numpy as np

    return len(saved) == len(weights) and all(
        np.array_equal(a, w.numpy()) for a, w in zip(saved, weights, strict=True)
    )


def run_identity(opts: FitOptions, model: keras.Model | str, store: Store) -> dict[str, Any]:
    """What a checkpoint must share with the run resuming it: settings, model and store."""
    config = opts.to_dict()
    for speed in (
        "compute_threads",
        "steps_per_execution",
        "jit",
        "jax_loop",
    ):  # how fast, not what, is trained
        config.pop(speed)
    return {
        "config": config,
        "model": model if isinstance(model, str) else model.name,
        "store": store.identity,
    }


def _restore_copy(source: Path | None, target: Path) -> None:
    """Put ``source`` back at ``target`` atomically (or remove ``target`` when there is no source)."""
    if source is None:
        target.unlink(missing_ok=True)
        return
    tmp = target.with_name(target.name + ".tmp")
    shutil.copyfile(source, tmp)
    os.replace(tmp, target)


def _distribution(devices: str | None, engine: EngineEntry) -> tuple[Any, str | None] | None:
    """(cluster, devices) when this run is distributed (TF_CONFIG or ``devices``), else None; refuses
    what cannot work, before TensorFlow loads."""
    from .tensorflow.cluster import check_devices, cluster_from_env

    cluster = cluster_from_env()
    logical = check_devices(devices)
    if cluster is None and devices is None:
        return None
    if engine.distributed is None:
        raise UsageError(
            f"{'TF_CONFIG' if devices is None else '--devices ' + devices}: several devices or workers "
            "train on the TensorFlow engine; unset KERAS_BACKEND=jax (or pass --backend tensorflow)"
        )
    if cluster is not None and logical:
        raise UsageError(
            f"--devices {devices} is for one machine; with TF_CONFIG each worker trains on its GPUs "
            "(or its CPU): leave out --devices, or pass --devices all"
        )
    # TensorFlow's collective errors become one line
    if cluster is not None and os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2") == "2":
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    return cluster, devices
