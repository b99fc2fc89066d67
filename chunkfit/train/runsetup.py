"""A training run set up: its engine, class weights, blocks, checkpoints and run.json.

Every check happens here, before any training; those that need no TensorFlow ran in
``SplitPlan.of`` and ``RunFolder`` already. The epoch loop that runs it is chunkfit.train.loop.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

from ..config import FitOptions
from ..core.plan import SplitPlan, TrainPlan
from ..store import Store
from .budget import chunk_in_budget
from .engines import Engine, EngineEntry, engine_for_backend
from .normalize import normalizer_for
from .picker import pick_width_of
from .precision import set_policy
from .progress import TrainProgress
from .record import RunLog
from .rendezvous import meet
from .resume import Checkpointer
from .runfolder import PeerFolder, RunFolder
from .steps import Shapes
from .thresholds import ThresholdScoring
from .weights import class_weights

if TYPE_CHECKING:
    import keras

    from .choice import Choice
    from .tensorflow.pipeline import BlockTensors


class RunSetup:
    """One training run as set up: an engine, a plan, and (with a run folder) checkpoints.

    chunkfit.train.loop.Trainer runs its epochs.
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
        choice: Choice | None = None,
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
        # a picker's blocks carry a target column (chunkfit.core.picks.with_targets)
        self.pick_width = pick_width_of(model, opts)
        shapes = Shapes(
            opts.windows.window,
            store.n_channels,
            split.labeller.n_classes,
            targets=int(self.pick_width is not None),
        )
        self.normalizer = normalizer_for(opts.normalize, store, split.split.train)
        # a picker's loss is per sample: window classes weigh nothing there
        rule = "none" if self.pick_width is not None else opts.class_weight
        self.weights = class_weights(rule, split.labeller.classes, split.balance, opts.loss)
        if self.weights.notice is not None and progress is not None:
            progress(TrainProgress.notice(self.weights.notice, epochs=opts.epochs))
        self.entry = entry = engine if engine is not None else engine_for_backend()
        self.choice = choice
        if choice is not None:
            self._notice(choice.line())
        # the model is built in the run's precision; model.keras is saved in float32 (loop)
        set_policy(choice.precision if choice is not None else "float32")
        self.engine: Engine
        if distribution is None:
            self.engine = entry.engine().start(
                model,
                opts,
                shapes,
                self.normalizer,
                self.weights.weights,
                opts.epochs * split.balance.epoch_windows(),
                split.blocks(opts, opts.blocks.chunk).group_samples(),
                say=self._notice,
            )
        else:
            assert entry.distributed is not None  # refused in chunkfit.train.fit
            self.engine = entry.distributed().start_distributed(
                model, opts, shapes, self.normalizer, self.weights.weights, *distribution
            )
            if folder is not None:
                # before the workers meet: a resumed checkpoint has its settled name
                folder.create()
            resumed = meet(self.engine, identity, folder, peer)
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
        batches = self.plan.train_batches(opts.batch_size) * opts.epochs
        self.engine.choose_compile(batches)
        self._said_compile = False
        self.threshold: dict[str, Any] | None = None  # chosen at the end of the run
        self.thresholds = ThresholdScoring(
            self.engine,
            entry,
            self.model,
            opts,
            store,
            self.plan,
            progress,
            self.pick_width,
            float32=choice is not None and choice.precision != "float32",
        )
        self.log = RunLog(self._about(), opts.blocks.seed)
        self.checkpoints: Checkpointer | None = None
        self.resumed = resumed
        if folder is not None and not folder.ready:
            folder.create()
        holder = folder if folder is not None else peer if resumed is not None else None
        if holder is not None:  # a peer worker only restores from one
            self.checkpoints = Checkpointer(
                holder,
                identity,
                chunk,
                checkpoint_every,
                (opts.epochs, len(self.plan.train_blocks)),
            )
        self.blocks_done: list[int] = []  # train blocks of the current epoch, in the order trained
        # Between epochs: the stream whose one item left is the next epoch's first group, read in
        # its loader thread while this epoch validates, so that the next epoch starts without
        # waiting for a read; the next epoch takes it from there.
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
            "balance": {
                **self.weights.balance_info(),
                **plan.balance.to_dict(plan.labeller.classes),
            },
            "augment": self.opts.augment.record(self.opts.blocks.seed),
            "engine": self.engine.name,
            "precision": self.choice.precision if self.choice is not None else "float32",
            **({"choice": self.choice.to_dict()} if self.choice is not None else {}),
            "threads": self.engine.threads_info(),
            **(
                {"distribution": about}
                if (about := self.engine.distribution_info()) is not None
                else {}
            ),
        }

    def _kept(self) -> str:
        return self.checkpoints.kept() if self.checkpoints is not None else ""

    def _notice(self, message: str, detail: str | None = None) -> None:
        if self.progress is not None:
            self.progress(TrainProgress.notice(message, epochs=self.opts.epochs, detail=detail))

    def _say_compile(self) -> None:
        """The one line saying how the train step is compiled and threaded, once that is decided:
        a few words, the reasons and timings as its detail."""
        line = self.engine.compile_line()
        if self.progress is not None and not self._said_compile and line is not None:
            self._said_compile = True
            self._notice(self.engine.compile_summary() or line, detail=line)

    def _write_record(self, *, finished: bool) -> None:
        if self.folder is not None:
            record = self.log.record(finished=finished, stopped=bool(self.model.stop_training))
            record["compile"] = self.engine.compile_info()
            if finished:
                record["threshold"] = self.threshold
                record["warnings"] = self.thresholds.warnings
            self.folder.write_json(record)
