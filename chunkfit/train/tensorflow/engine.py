"""``TensorFlowEngine``: Keras on TensorFlow, driven one group of blocks at a time by the training
loop, as chunkfit.train.engines.Engine describes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...config import FitOptions
from ...core.blocks import BlockData
from ..models import build_model, check_model, compile_model
from ..normalize import Normalizer
from ..singleprocess import SingleProcessEngine
from ..steps import Shapes, batch_bytes, element_steps, step_batches
from .pipeline import BlockTensors, eval_dataset, to_tensors, train_dataset, train_element_spec
from .threads import start_tensorflow
from .threadtune import RULE, ProbeSpec, ThreadChoice, cache_path, choose_threads, measure

if TYPE_CHECKING:
    import keras


class TensorFlowEngine(SingleProcessEngine):
    """Keras on TensorFlow: see the module docstring. Build with ``start``."""

    name = "tensorflow"

    def __init__(
        self,
        model: keras.Model,
        opts: FitOptions,
        shapes: Shapes,
        steps: int,
        threads: dict[str, int],
        normalizer: Normalizer,
        class_weights: tuple[float, ...] | None,
        thread_choice: ThreadChoice | None = None,
        gathered: bool = False,
        halves: int = 1,
    ) -> None:
        from ..augment import augmenter_for
        from .stepper import Stepper

        self.model, self.opts, self.shapes, self.steps, self.threads = (
            model,
            opts,
            shapes,
            steps,
            threads,
        )
        self.thread_choice = thread_choice
        self.normalizer = normalizer
        self.class_weights = None if class_weights is None else list(class_weights)
        self.group_samples: int | None = (
            None  # training groups' samples are padded to this (``pad_groups_to``)
        )
        self.gathered = (
            gathered  # training windows gathered in the input pipeline (on a CPU; see pipeline)
        )
        # training batches augmented inside the step (chunkfit.train.augment), or None
        self.augment = augmenter_for(opts.augment, opts.blocks.seed)
        self.stepper = Stepper(
            model,
            window=shapes.window,
            n_classes=shapes.classes,
            normalize=normalizer.apply,
            class_weights=self.class_weights,
            gathered=gathered,
            fuse=opts.jit != "off",
            halves=halves,
            augment=self.augment,
            targets=shapes.targets,
        )

    @classmethod
    def start(
        cls,
        model: keras.Model | str,
        opts: FitOptions,
        shapes: Shapes,
        normalizer: Normalizer,
        class_weights: tuple[float, ...] | None = None,
        run_windows: int = 0,
        group_samples: int = 0,
        say: Callable[[str], None] | None = None,
    ) -> TensorFlowEngine:
        """Start TensorFlow (threads before its runtime starts:
        chunkfit.train.tensorflow.threadtune, for a run of ``run_windows`` training windows in
        groups of up to ``group_samples`` samples), seed it, and build and compile ``model``, which
        trains on windows standardised by ``normalizer``, weighted by ``class_weights`` (one per
        class index; None: unweighted). ``say`` is told before threads are measured."""
        tuned = choose_threads(
            opts.compute_threads,
            None if shapes.targets else model,  # the probe trains classifiers
            deterministic=opts.deterministic,
            window=shapes.window,
            channels=shapes.channels,
            classes=shapes.classes,
            batch_size=opts.batch_size,
            run_windows=run_windows,
            jit=opts.jit,
            group_samples=group_samples,
        )
        if isinstance(tuned, ProbeSpec) and say is not None:
            say(
                f"measuring how fast {model} trains on every core, on one thread and in halves of "
                "each batch side by side (once for this machine and model: cached in "
                f"{cache_path()})"
            )
        decided: list[ThreadChoice] = []
        gpus: list[bool] = []

        def compute(
            tf: Any,
        ) -> tuple[int | None, int]:  # TensorFlow imported, its runtime not started
            gpus.append(gpu := bool(tf.config.list_physical_devices("GPU")))
            if gpu and (isinstance(tuned, ProbeSpec) or tuned.halves > 1):
                decided.append(ThreadChoice(None, f"{RULE} (a GPU trains the model)"))
            elif isinstance(tuned, ProbeSpec):
                decided.append(
                    measure(tuned)
                )  # in forks of this process, before its runtime starts
            else:
                decided.append(tuned)
            return decided[0].compute, decided[
                0
            ].halves  # halves side by side: an inter-op thread each

        threads = start_tensorflow(compute)
        choice = decided[0]
        import keras

        from .halves import splittable

        keras.utils.set_random_seed(opts.blocks.seed)
        if opts.deterministic:
            import tensorflow as tf

            tf.config.experimental.enable_op_determinism()
        built = (
            build_model(model, shapes.window, shapes.channels, shapes.classes)
            if isinstance(model, str)
            else model
        )
        picker = shapes.targets > 0
        check_model(built, shapes.window, shapes.channels, shapes.classes, picker=picker)
        steps = opts.steps_per_execution or element_steps(
            opts.batch_size, shapes.window, shapes.channels
        )
        compile_model(
            built,
            optimizer=opts.optimizer,
            lr=opts.lr,
            loss=opts.loss,
            steps_per_execution=steps,
            classes=shapes.classes,
            picker=picker,
        )
        if choice.halves > 1 and not (threads["inter_op"] == choice.halves and splittable(built)):
            choice = dataclasses.replace(
                choice, halves=1
            )  # TensorFlow started before, or another model
        # On a CPU the input pipeline copies the windows (numpy), a GPU's step gathers them on the
        # device
        return cls(
            built,
            opts,
            shapes,
            steps,
            threads,
            normalizer,
            class_weights,
            choice,
            not gpus[0],
            choice.halves,
        )

    @property
    def fit_wrapper(self) -> keras.Model | None:
        """The model whose ``fit`` trains the blocks (it wraps ``self.model``)."""
        return self.stepper

    def in_flight_bytes(self) -> int:
        """Memory of what trains beside the blocks: the offsets and classes of three elements (two
        prefetched, one training) and one batch of gathered windows (see pipeline); ``gathered``,
        the windows of three elements."""
        s, b = self.shapes, self.opts.batch_size
        windows = (3 * self.steps if self.gathered else 1) * batch_bytes(b, s.window, s.channels)
        return 3 * self.steps * b * 8 + windows

    def pad_groups_to(self, group_samples: int) -> None:
        """The most samples a training group holds (chunkfit.train.plan): every group's samples are
        padded to it, so that the compiled step sees one shape all run (XLA compiles once)."""
        self.group_samples = group_samples

    def tensors(self, data: BlockData, training: bool) -> BlockTensors:
        """A group's samples as tensors with the dataset it trains (or validates) from; runs in the
        loader thread."""
        if training:
            tensors = to_tensors(data, self.group_samples)
            window = self.shapes.window if self.gathered else None
            return dataclasses.replace(
                tensors,
                dataset=train_dataset(
                    tensors, batch_size=self.opts.batch_size, steps=self.steps, window=window
                ),
            )
        tensors = to_tensors(data)
        return dataclasses.replace(
            tensors,
            dataset=eval_dataset(
                tensors,
                window=self.shapes.window,
                batch_size=self.opts.batch_size,
                n_classes=self.shapes.classes,
                normalize=self.normalizer.apply,
                targets=self.shapes.targets,
            ),
        )

    def choose_compile(self, run_batches: int) -> None:
        """Set how the train step is compiled (``--jit``; for ``auto``, by timing the first elements
        of training, chunkfit.train.tensorflow.autotune). ``run_batches``: the run's training
        batches."""
        from ...errors import UsageError
        from .autotune import JitChoice

        # Op determinism stays on in a process once a deterministic run turned it on, and XLA has no
        # deterministic form of some ops (MaxPooling's gradient): such a process trains without XLA.
        determinism = self.opts.deterministic or _op_determinism()
        if determinism and self.opts.jit == "on":
            raise UsageError(
                "jit='on' cannot be used in this process: TensorFlow op determinism is on (an "
                "earlier deterministic run turned it on), and XLA has no deterministic form of "
                "some ops"
            )
        measured = self.thread_choice.jit if self.thread_choice is not None else None
        self.stepper.choice = JitChoice(
            self.opts.jit, determinism, -(-run_batches // self.steps), self.steps, measured=measured
        )

    def threads_info(self) -> dict[str, Any]:
        """The threads in effect for run.json, with how they were chosen."""
        return {**self.threads, **(self.thread_choice.to_dict() if self.thread_choice else {})}

    def describe_threads(self) -> str | None:
        return self.thread_choice.describe(self.threads) if self.thread_choice else None

    def compile_info(self) -> dict[str, Any]:
        """The compile choice for run.json; ``jit`` is None while the trial runs."""
        assert self.stepper.choice is not None
        return {
            **self.stepper.choice.to_dict(self.opts.batch_size),
            "gather": "input pipeline" if self.gathered else "train step",
        }

    def compile_line(self) -> str | None:
        """The run's one line on how it trains, once the compile choice is decided."""
        choice = self.stepper.choice
        if choice is None or not choice.decided:
            return None
        parts = [choice.describe(self.opts.batch_size), self.describe_threads()]
        return (
            "; ".join(p for p in parts if p is not None)
            + "; --jit on|off, --compute-threads N to choose"
        )

    def compile_summary(self) -> str | None:
        choice = self.stepper.choice
        if choice is None or not choice.decided:
            return None
        n, halves = (
            self.threads.get("intra_op", 0),
            self.thread_choice.halves if self.thread_choice else 1,
        )
        used = "every core" if n == 0 else f"{n} thread" + ("s" if n > 1 else "")
        if halves > 1:
            used += f" x {halves} halves of each batch"
        mode = "under XLA" if choice.jit else "without XLA"
        return f"TensorFlow, train step {mode}, {used}; --verbose says why"

    def prepare(self) -> None:
        """Compile the train step (the loop calls this while the first group loads)."""
        window = self.shapes.window if self.gathered else None
        self.stepper.prepare(
            train_element_spec(self.opts.batch_size, window, self.shapes.columns),
            self.shapes.columns,
        )

    def step_batches(self, n_windows: int) -> list[int]:
        """Batches in each training step of a group of ``n_windows``, for callbacks' batch
        numbers."""
        return step_batches(n_windows, self.opts.batch_size, self.steps)

    def train(self, tensors: BlockTensors, callbacks: keras.callbacks.CallbackList) -> None:
        self.stepper.fit(
            tensors.dataset,
            samples=tensors.samples,
            epochs=1,
            verbose=0,
            callbacks=callbacks,
            shuffle=False,
        )

    def evaluate(self, tensors: BlockTensors, callbacks: keras.callbacks.CallbackList) -> None:
        self.model.evaluate(tensors.dataset, verbose=0, callbacks=callbacks)


def _op_determinism() -> bool:
    """Whether TensorFlow op determinism is on in this process (TensorFlow has no public query)."""
    from tensorflow.python.framework.config import is_op_determinism_enabled

    return bool(is_op_determinism_enabled())
