"""Synchronous data-parallel training on tf.distribute: several workers (TF_CONFIG) or several
devices.

``MultiWorkerMirroredStrategy`` runs one process per machine (TF_CONFIG, as Kubeflow's TFJob,
Vertex AI and SageMaker set it); ``MirroredStrategy`` the devices of one machine (``--devices all``,
or ``cpu:N`` logical CPU devices for trying it out). Keras 3's ``model.fit`` fails under
MultiWorkerMirroredStrategy (keras-team/keras#20585), so this engine runs its own step under
``strategy.run``: Keras layers, losses, optimizer and metrics, not Keras's loop.

Sharding (chunkfit.train.tensorflow.cluster.shares): every worker reads every group of blocks and
shuffles its windows alike; the shuffled windows are cut into global batches of ``--batch-size``
windows and replica r trains its contiguous slice of each global batch, padded to the same size with
zero-weight windows. A replica's loss is sum(weight * loss) over its slice divided by the real
windows of the whole global batch, and the optimizer sums the replicas' gradients: the step is the
single-process step on the global batch, up to float32 summation order. Metric variables are summed
across replicas when read.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ...core.blocks import BlockData
from ...errors import UsageError
from ..singleprocess import C
from ..steps import Shapes, element_steps
from .cluster import Cluster, check_devices, share_ranges, shares
from .engine import TensorFlowEngine
from .pipeline import BlockTensors, to_tensors
from .replicastep import ReplicaStep
from .workers import Workers, forming

if TYPE_CHECKING:
    import keras

    from ...config import FitOptions
    from ..normalize import Normalizer


@dataclasses.dataclass(frozen=True)
class ShardedTensors(BlockTensors):
    """A group's tensors with every replica's share of each global batch (see ``shares``)."""

    index: Any = None  # offsets [batches, replicas, per]
    classes: Any = None  # class indices, same shape
    weights: Any = None  # sample weights (class weight, 0 for padding), same shape
    real: Any = None  # 1.0 for real windows, 0.0 for padding, same shape
    counts: Any = None  # real windows of each global batch [batches]


class DistributedEngine(TensorFlowEngine):
    """Keras on TensorFlow under a tf.distribute strategy; trains with its own step (module
    docstring)."""

    name = "tensorflow-distributed"

    def __init__(self, *args: Any, strategy: Any, cluster: Cluster | None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.strategy, self.cluster = strategy, cluster
        self.replicas = int(strategy.num_replicas_in_sync)
        self.workers = Workers(strategy, cluster, self.replicas)
        self.step = ReplicaStep(
            self.model,
            strategy,
            self.normalizer,
            self.shapes,
            self.replicas,
            self.opts.batch_size,
            weighted=self.class_weights is not None,
            class_weights=self.class_weights,
            augment=self.augment,
        )
        self._train_fn: Any = None
        self._eval_fn: Any = None

    @classmethod
    def start_distributed(
        cls,
        model: keras.Model | str,
        opts: FitOptions,
        shapes: Shapes,
        normalizer: Normalizer,
        class_weights: tuple[float, ...] | None,
        cluster: Cluster | None,
        devices: str | None,
    ) -> DistributedEngine:
        """Start TensorFlow with the strategy (before anything else runs in its runtime), then build
        and compile ``model`` in its scope."""
        from ..models import build_model, check_model, compile_model
        from .threads import start_tensorflow

        logical = check_devices(devices)
        made: list[Any] = []

        def before(tf: Any) -> None:
            # Both must happen before TensorFlow's runtime starts (collective ops, logical devices).
            if logical:
                cpu = tf.config.list_physical_devices("CPU")[0]
                tf.config.set_logical_device_configuration(
                    cpu, [tf.config.LogicalDeviceConfiguration()] * logical
                )
            if cluster is not None:
                # No collective timeout: a worker waits while the chief writes the run folder; a
                # dead worker is found by TensorFlow's coordination service heartbeats (about 10 s)
                # once every worker has joined, and by ``forming`` (--cluster-timeout) before.
                with forming(cluster):
                    made.append(tf.distribute.MultiWorkerMirroredStrategy())

        try:
            threads = start_tensorflow(opts.compute_threads, before=before)
        except RuntimeError:
            raise UsageError(
                "several workers or devices need a process in which TensorFlow has not started yet "
                "(run chunkfit train, or call chunkfit.fit before anything else uses TensorFlow)"
            ) from None
        import keras
        import tensorflow as tf

        if made:
            strategy = made[0]
        elif logical:
            strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(logical)])
        else:
            strategy = tf.distribute.MirroredStrategy()
        keras.utils.set_random_seed(opts.blocks.seed)
        if opts.deterministic:
            tf.config.experimental.enable_op_determinism()
        from .. import keras_state

        with strategy.scope():
            built = (
                build_model(model, shapes.window, shapes.channels, shapes.classes)
                if isinstance(model, str)
                else model
            )
            check_model(built, shapes.window, shapes.channels, shapes.classes)
            compile_model(
                built,
                optimizer=opts.optimizer,
                lr=opts.lr,
                loss=opts.loss,
                steps_per_execution=1,
                classes=shapes.classes,
            )
            keras_state.build(built, shapes.window, shapes.channels, shapes.classes)
        steps = opts.steps_per_execution or element_steps(
            opts.batch_size, shapes.window, shapes.channels
        )
        engine = cls(
            built,
            opts,
            shapes,
            steps,
            threads,
            normalizer,
            class_weights,
            strategy=strategy,
            cluster=cluster,
        )
        return engine

    # -- what the loop asks of an engine
    # ------------------------------------------------------------
    @property
    def fit_wrapper(self) -> keras.Model | None:
        return None  # the engine's own step, no model's fit

    def scope(self) -> contextlib.AbstractContextManager[Any]:
        return self.strategy.scope()  # type: ignore[no-any-return]

    def choose_compile(self, run_batches: int) -> None:
        pass

    def compile_line(self) -> str | None:
        return None  # one way only: no choice to report

    def compile_summary(self) -> str | None:
        return None

    def compile_info(self) -> dict[str, Any]:
        return {
            "jit": False,
            "reason": "tf.distribute step (chunkfit.train.tensorflow.distributed), without XLA",
        }

    def distribution_info(self) -> dict[str, Any] | None:
        """The run's distribution, for run.json."""
        c = self.cluster
        return {
            "strategy": "MultiWorkerMirroredStrategy" if c is not None else "MirroredStrategy",
            "workers": len(c.addresses) if c is not None else 1,
            "addresses": list(c.addresses) if c is not None else None,
            "replicas": self.replicas,
            "devices": [str(d) for d in self.strategy.extended.worker_devices],
            "batch_size": "global",
            "replica_batch": -(-self.opts.batch_size // self.replicas),
        }

    def finish(self) -> None:
        if self.cluster is not None:
            self.workers.exchange([0])  # the others leave once the chief has written the run

    def epoch_shares(self, groups: list[int]) -> list[list[dict[str, Any]]] | None:
        """For each replica, its share of each trained group of ``groups`` windows (see
        ``share_ranges``)."""
        b = self.opts.batch_size
        return [
            [
                {"group": k, "windows": n, **share_ranges(n, b, self.replicas, r)}
                for k, n in enumerate(groups)
            ]
            for r in range(self.replicas)
        ]

    def prepare(self) -> None:
        pass

    def step_batches(self, n_windows: int) -> list[int]:
        batches = -(-n_windows // self.opts.batch_size)
        calls, rest = divmod(batches, self.steps)
        return [self.steps] * calls + ([rest] if rest else [])

    def tensors(self, data: BlockData, training: bool) -> BlockTensors:
        """Every replica's share of the group's global batches (runs in the loader thread)."""
        import tensorflow as tf

        tensors = to_tensors(
            dataclasses.replace(data, offsets=data.offsets[:1], labels=data.labels[:1])
        )
        n = int(data.offsets.shape[0])
        index, real = shares(n, self.opts.batch_size, self.replicas)
        classes = data.labels[index].astype(np.int32)
        weights = real.astype(np.float32)
        if training and self.class_weights is not None:
            weights = weights * np.asarray(self.class_weights, np.float32)[classes]
        return ShardedTensors(
            n_windows=n,
            n_blocks=len(data.blocks),
            samples=tensors.samples,
            offsets=tensors.offsets,
            labels=tensors.labels,
            index=tf.constant(data.offsets[index].astype(np.int32)),
            classes=tf.constant(classes),
            weights=tf.constant(weights),
            real=tf.constant(real.astype(np.float32)),
            counts=tf.constant(real.sum(axis=(1, 2)).astype(np.float32)),
        )

    def train(self, tensors: BlockTensors, callbacks: keras.callbacks.CallbackList) -> None:
        if self._train_fn is None:
            self._train_fn = self.step.compiled(training=True)
        self._run(self._train_fn, tensors, callbacks, "train")

    def evaluate(self, tensors: BlockTensors, callbacks: keras.callbacks.CallbackList) -> None:
        if self._eval_fn is None:
            self._eval_fn = self.step.compiled(training=False)
        self._run(self._eval_fn, tensors, callbacks, "test")

    def metrics(self) -> dict[str, float]:
        with self.workers.lost():
            return super().metrics()

    def rendezvous(
        self,
        identity: dict[str, Any],
        where: str | None,
        latest: Callable[[], C | None],
        *,
        write: Callable[[str, str], None] | None = None,
        read: Callable[[str], str | None] | None = None,
        remove: Callable[[str], None] | None = None,
    ) -> C | None:
        """The workers check each other (``Workers.meet``); returns the checkpoint this worker
        resumes from, ``latest()``: the chief's, read by every other worker after the chief settled
        it and before it can write another, refused unless every worker found the same one."""
        self.workers.meet(identity, where, write=write, read=read, remove=remove)
        resumed = latest()
        self.workers.same_checkpoint(where, resumed.sequence if resumed is not None else None)
        return resumed

    def lost_worker(self) -> contextlib.AbstractContextManager[Any]:
        """A collective that failed because a worker stopped, as one line naming it."""
        return self.workers.lost()

    def _run(
        self, fn: Any, t: BlockTensors, callbacks: keras.callbacks.CallbackList, phase: str
    ) -> None:
        """The group's global batches, ``steps`` per compiled call, with Keras's batch events."""
        assert isinstance(t, ShardedTensors)
        self.model.reset_metrics()
        begin = getattr(callbacks, f"on_{phase}_batch_begin")
        end = getattr(callbacks, f"on_{phase}_batch_end")
        batches = int(t.counts.shape[0])
        with self.workers.lost():
            for step, lo in enumerate(range(0, batches, self.steps)):
                hi = min(lo + self.steps, batches)
                begin(step)
                fn(
                    t.samples,
                    t.index[lo:hi],
                    t.classes[lo:hi],
                    t.weights[lo:hi],
                    t.real[lo:hi],
                    t.counts[lo:hi],
                )
                end(
                    step,
                    {k: float(np.asarray(v)) for k, v in self.model.get_metrics_result().items()},
                )
                if phase == "train" and self.model.stop_training:
                    break
