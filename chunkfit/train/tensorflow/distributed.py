"""Synchronous data-parallel training on tf.distribute: several workers (TF_CONFIG) or several devices.

``MultiWorkerMirroredStrategy`` runs one process per machine (TF_CONFIG, as Kubeflow's TFJob,
Vertex AI and SageMaker set it); ``MirroredStrategy`` the devices of one machine (``--devices all``,
or ``cpu:N`` logical CPU devices for trying it out). Keras 3's ``model.fit`` fails under
MultiWorkerMirroredStrategy (keras-team/keras#20585), so this engine runs its own step under
``strategy.run``: Keras layers, losses, optimizer and metrics, not Keras's loop.

Sharding (``shares``): every worker reads every group of blocks and shuffles its windows alike;
the shuffled windows are cut into global batches of ``--batch-size`` windows and replica r trains
its contiguous slice of each global batch, padded to the same size with zero-weight windows. A
replica's loss is sum(weight * loss) over its slice divided by the real windows of the whole global
batch, and the optimizer sums the replicas' gradients: the step is the single-process step on the
global batch, up to float32 summation order. Metric variables are summed across replicas when read.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from ...core.blocks import BlockData
from ...errors import RunError, UsageError, WorkerLostError
from .engine import Shapes, TensorFlowEngine
from .pipeline import BlockTensors, element_steps, to_tensors

if TYPE_CHECKING:
    import keras

    from ...config import FitOptions
    from ..normalize import Normalizer

PROBE_FILE = ".chunkfit-workers"
DEVICE_CHOICES = "all or cpu:N"


@dataclasses.dataclass(frozen=True)
class Cluster:
    """The workers of a TF_CONFIG run: their addresses in rank order (the chief first) and this one's rank."""

    addresses: tuple[str, ...]
    rank: int
    jobs: tuple[tuple[str, int], ...]  # (job, task index) of each rank, as TensorFlow names them

    @property
    def chief(self) -> bool:
        return self.rank == 0

    def name(self, rank: int) -> str:
        return f"worker {rank} ({self.addresses[rank]})"

    def rank_of(self, job: str, index: int) -> int | None:
        return next((r for r, j in enumerate(self.jobs) if j == (job, index)), None)


def cluster_from_env(environ: dict[str, str] | None = None) -> Cluster | None:
    """The cluster TF_CONFIG describes; None without TF_CONFIG or with a single task."""
    text = (os.environ if environ is None else environ).get("TF_CONFIG")
    if text is None or not text.strip():
        return None
    return parse_tf_config(text)


def parse_tf_config(text: str) -> Cluster | None:
    """TF_CONFIG as TensorFlow reads it: ``{"cluster": {"chief": [...], "worker": [...]}, "task":
    {"type": "worker", "index": 1}}``; the chief (or worker 0 without one) is rank 0."""

    def bad(why: str) -> UsageError:
        shown = text if len(text) <= 200 else text[:200] + "..."
        return UsageError(
            f"TF_CONFIG is not a valid cluster description ({why}; received {shown}); set it to "
            '{"cluster": {"worker": ["host1:port", "host2:port"]}, "task": {"type": "worker", "index": 0}}'
        )

    try:
        config = json.loads(text)
    except ValueError as err:
        raise bad(f"not JSON: {err}") from None
    if (
        not isinstance(config, dict)
        or not isinstance(config.get("cluster"), dict)
        or not isinstance(config.get("task"), dict)
    ):
        raise bad("it needs a 'cluster' and a 'task' object")
    cluster, task = config["cluster"], config["task"]
    other = sorted(set(cluster) - {"chief", "worker"})
    if other:
        raise bad(
            f"job {other[0]!r}: chunkfit runs synchronous workers only (jobs chief and worker)"
        )
    jobs: list[tuple[str, int]] = []
    addresses: list[str] = []
    for job in ("chief", "worker"):
        hosts = cluster.get(job, [])
        if not isinstance(hosts, list) or not all(
            isinstance(h, str) and re.fullmatch(r".+:\d+", h) for h in hosts
        ):
            raise bad(f"cluster.{job} must be a list of 'host:port' strings")
        if job == "chief" and len(hosts) > 1:
            raise bad("there can be one chief")
        jobs += [(job, i) for i in range(len(hosts))]
        addresses += hosts
    if len(set(addresses)) != len(addresses):
        raise bad("two tasks share an address")
    kind, index = task.get("type"), task.get("index", 0)
    if isinstance(index, bool) or not isinstance(index, int):
        raise bad("task.index must be an integer")
    if (kind, index) not in jobs:
        raise bad(f"task {kind}:{index} is not in the cluster")
    if len(addresses) < 2:
        return None
    return Cluster(tuple(addresses), jobs.index((kind, index)), tuple(jobs))


def check_devices(devices: str | None) -> int | None:
    """``--devices``: None (one device), "all" (0 here: every GPU) or "cpu:N" (N logical CPU devices)."""
    if devices is None or devices == "all":
        return None if devices is None else 0
    match = re.fullmatch(r"cpu:(\d+)", devices)
    if match is None or int(match[1]) < 1:
        raise UsageError(f"--devices must be {DEVICE_CHOICES} (received {devices!r})")
    return int(match[1])


def shares(n: int, batch: int, replicas: int) -> tuple[np.ndarray, np.ndarray]:
    """The positions (into a group's shuffled windows) each replica trains, batch by batch.

    Returns ``index`` [batches, replicas, per] and ``real`` (same shape, bool): global batch b holds
    windows [b*batch, min((b+1)*batch, n)); of its m windows replica r takes [r*m//R, (r+1)*m//R),
    padded with window 0 (``real`` False) to ``per = ceil(batch / R)``. Example: n=10, batch=4, R=2:
    batches [0..3], [4..7], [8, 9]; replica 0 takes 0-1, 4-5, 8; replica 1 takes 2-3, 6-7, 9.
    """
    per = -(-batch // replicas)
    batches = -(-n // batch)
    index = np.zeros((batches, replicas, per), np.int64)
    real = np.zeros((batches, replicas, per), bool)
    for b in range(batches):
        start, m = b * batch, min(batch, n - b * batch)
        for r in range(replicas):
            lo, hi = r * m // replicas, (r + 1) * m // replicas
            index[b, r, : hi - lo] = np.arange(start + lo, start + hi)
            real[b, r, : hi - lo] = True
    return index, real


def share_ranges(n: int, batch: int, replicas: int, replica: int) -> dict[str, list[int]]:
    """Replica ``replica``'s slice of a full global batch and of the short last one, for run.json."""
    full, short = divmod(n, batch)
    out = {"full_batches": [full, replica * batch // replicas, (replica + 1) * batch // replicas]}
    if short:
        out["last_batch"] = [
            full * batch + replica * short // replicas,
            full * batch + (replica + 1) * short // replicas,
        ]
    return out


@dataclasses.dataclass(frozen=True)
class ShardedTensors(BlockTensors):
    """A group's tensors with every replica's share of each global batch (see ``shares``)."""

    index: Any = None  # offsets [batches, replicas, per]
    classes: Any = None  # class indices, same shape
    weights: Any = None  # sample weights (class weight, 0 for padding), same shape
    real: Any = None  # 1.0 for real windows, 0.0 for padding, same shape
    counts: Any = None  # real windows of each global batch [batches]


class _NoJit:
    """The engine's compile choice: the distributed step runs without XLA."""

    choice = None


class DistributedEngine(TensorFlowEngine):
    """Keras on TensorFlow under a tf.distribute strategy; trains with its own step (module docstring)."""

    name = "tensorflow-distributed"

    def __init__(self, *args: Any, strategy: Any, cluster: Cluster | None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.strategy, self.cluster = strategy, cluster
        self.replicas = int(strategy.num_replicas_in_sync)
        self.stepper = _NoJit()  # type: ignore[assignment]
        self._train_fn: Any = None
        self._eval_fn: Any = None
        self._exchange_fn: Any = None

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
                # No collective timeout: a worker waits while the chief writes the run folder; a dead
                # worker is found by TensorFlow's coordination service heartbeats (about 10 s).
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
        engine._loss = _elementwise_loss(built)
        return engine

    # -- what the loop asks of an engine ------------------------------------------------------------
    @property
    def fitting(self) -> keras.Model:
        return self.model

    def scope(self) -> contextlib.AbstractContextManager[Any]:
        return self.strategy.scope()  # type: ignore[no-any-return]

    def choose_compile(self, run_batches: int) -> None:
        pass

    def compile_info(self) -> dict[str, Any]:
        return {
            "jit": False,
            "reason": "tf.distribute step (chunkfit.train.tensorflow.distributed), without XLA",
        }

    def about(self) -> dict[str, Any] | None:
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
            self.exchange([0])  # the others leave once the chief has written the run

    def epoch_shares(self, groups: list[int]) -> list[list[dict[str, Any]]] | None:
        """For each replica, its share of each trained group of ``groups`` windows (see ``share_ranges``)."""
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
            self._train_fn = self._compiled(self._replica_train)
        self._run(self._train_fn, tensors, callbacks, "train")

    def evaluate(self, tensors: BlockTensors, callbacks: keras.callbacks.CallbackList) -> None:
        if self._eval_fn is None:
            self._eval_fn = self._compiled(self._replica_eval)
        self._run(self._eval_fn, tensors, callbacks, "test")

    def metrics(self) -> dict[str, float]:
        with self.lost_worker():
            return super().metrics()

    def exchange(self, values: list[int]) -> np.ndarray:
        """Every worker's ``values`` (up to 3 int64), in rank order: [workers, 3] (by one all-reduce
        of a matrix where each worker fills its own row, compiled once)."""
        import tensorflow as tf

        workers = len(self.cluster.addresses) if self.cluster is not None else 1
        rank = self.cluster.rank if self.cluster is not None else 0
        if self._exchange_fn is None:
            strategy = self.strategy
            local = self.replicas // workers

            def replica(m: Any) -> Any:
                ctx = tf.distribute.get_replica_context()
                first = tf.cast(
                    tf.equal(ctx.replica_id_in_sync_group % local, 0), tf.int64
                )  # one replica per worker
                return ctx.all_reduce(tf.distribute.ReduceOp.SUM, m * first)

            self._exchange_fn = tf.function(
                lambda m: strategy.experimental_local_results(strategy.run(replica, (m,)))[0],
                input_signature=[tf.TensorSpec([workers, 3], tf.int64)],
                autograph=False,
            )
        mine = np.zeros((workers, 3), np.int64)
        mine[rank, : len(values)] = values
        with self.lost_worker():
            return np.asarray(self._exchange_fn(tf.constant(mine)))

    def meet(
        self,
        identity: dict[str, Any],
        where: str | None,
        *,
        write: Callable[[str, str], None] | None = None,
        read: Callable[[str], str | None] | None = None,
        remove: Callable[[str], None] | None = None,
    ) -> None:
        """Before training: every worker was started with the chief's settings (a hash of the run's
        identity, gathered), and every worker reads the run folder ``where`` the chief writes (on a
        shared file system or on object storage): the chief writes a nonce there by ``write(name,
        text)``, every other worker reads it back by ``read(name)`` (None when there is none), the
        verdicts are gathered, and the chief removes it by ``remove(name)``. Refuses with one line
        naming the worker."""
        c = self.cluster
        if c is None:
            return
        digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).digest()
        mine = [int.from_bytes(digest[i : i + 7], "big") for i in (0, 7, 14)]
        hashes = self.exchange(mine)
        differ = [r for r in range(len(hashes)) if list(hashes[r]) != list(hashes[0])]
        if differ:
            raise UsageError(
                f"{c.name(differ[0])} was started with other settings, model or store than the chief, "
                f"{c.name(0)}; run the same chunkfit train command on every worker"
            )
        nonce = int.from_bytes(os.urandom(7), "big")
        write = write if c.chief else None
        try:
            if write is not None:
                write(PROBE_FILE, str(nonce))
            chief_nonce, chief_wrote = (
                int(v) for v in self.exchange([nonce, int(write is not None)])[0][:2]
            )
            seen = 1
            if not c.chief and chief_wrote:  # without a run folder there is nothing to read
                try:
                    seen = int(
                        read is not None and (read(PROBE_FILE) or "").strip() == str(chief_nonce)
                    )
                except (OSError, ValueError):
                    seen = 0
            verdicts = self.exchange([seen])
        finally:
            if write is not None and remove is not None:
                with contextlib.suppress(OSError):
                    remove(PROBE_FILE)
        blind = [r for r in range(len(verdicts)) if not verdicts[r][0]]
        if blind:
            raise RunError(
                f"{where}: {c.name(blind[0])} cannot read the run folder the chief, {c.name(0)}, writes; "
                "give every worker the same --out on storage they all reach (a shared file system, or "
                "the same s3:// URL)"
            )

    @contextlib.contextmanager
    def lost_worker(self) -> Iterator[None]:
        """A collective that failed because a worker stopped, as one line naming it."""
        import tensorflow as tf

        try:
            yield
        except (
            tf.errors.UnavailableError,
            tf.errors.AbortedError,
            tf.errors.DeadlineExceededError,
            tf.errors.CancelledError,
            tf.errors.InternalError,
        ) as err:
            if self.cluster is None:
                raise
            raise WorkerLostError(self._lost_message(str(err))) from None

    def _lost_message(self, text: str) -> str:
        c = self.cluster
        assert c is not None
        who = "another worker"
        for job, index in re.findall(r"/job:(\w+)/(?:replica:\d+/)?task:(\d+)", text):
            rank = c.rank_of(job, int(index))
            if rank is not None and rank != c.rank:
                who = c.name(rank)
                break
        reason = (
            "stopped answering" if "heartbeat" in text or "unhealthy" in text else "is unreachable"
        )
        return (
            f"{who} {reason}, so this worker, {c.name(c.rank)}, stopped training; run the same chunkfit train "
            "command on every worker to resume from the run's last checkpoint"
        )

    # -- the step -----------------------------------------------------------------------------------
    def _compiled(self, replica_fn: Callable[..., Any]) -> Any:
        """One compiled call per element: ``replica_fn`` under ``strategy.run`` for each of its global batches."""
        import tensorflow as tf

        s = self.shapes
        per = -(-self.opts.batch_size // self.replicas)
        grid = tf.TensorSpec([None, self.replicas, per])
        spec = (
            tf.TensorSpec([None, s.channels], tf.float32),
            tf.TensorSpec([None, self.replicas, per], tf.int32),
            tf.TensorSpec([None, self.replicas, per], tf.int32),
            grid,
            grid,
            tf.TensorSpec([None], tf.float32),
        )
        strategy = self.strategy

        def loop(
            samples: Any, index: Any, classes: Any, weights: Any, real: Any, counts: Any
        ) -> Any:
            def body(k: Any) -> Any:
                strategy.run(
                    replica_fn, args=(samples, index[k], classes[k], weights[k], real[k], counts[k])
                )
                return k + 1

            return tf.while_loop(lambda k: k < tf.shape(index)[0], body, [tf.constant(0)])

        return tf.function(loop, input_signature=spec, autograph=False)

    def _windows(self, samples: Any, index: Any, classes: Any) -> tuple[Any, Any]:
        import tensorflow as tf

        r = tf.distribute.get_replica_context().replica_id_in_sync_group
        x = tf.gather(samples, index[r][:, None] + tf.range(self.shapes.window))
        return self.normalizer.apply(x), tf.one_hot(
            classes[r], self.shapes.classes, dtype=tf.float32
        )

    def _replica_train(
        self, samples: Any, index: Any, classes: Any, weights: Any, real: Any, count: Any
    ) -> None:
        import tensorflow as tf

        model = self.model
        r = tf.distribute.get_replica_context().replica_id_in_sync_group
        x, y = self._windows(samples, index, classes)
        w, mask = weights[r], real[r]
        with tf.GradientTape() as tape:
            p = model(x, training=True)
            total = tf.reduce_sum(self._loss(y, p) * w)
            extra = tf.add_n(model.losses) if model.losses else tf.constant(0.0)
            loss = total / tf.maximum(count, 1.0) + extra / self.replicas
        grads = tape.gradient(loss, model.trainable_variables)
        model.optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        self._track(total, extra, mask, x, y, p, w if self.class_weights is not None else None)

    def _replica_eval(
        self, samples: Any, index: Any, classes: Any, weights: Any, real: Any, count: Any
    ) -> None:
        import tensorflow as tf

        model = self.model
        r = tf.distribute.get_replica_context().replica_id_in_sync_group
        x, y = self._windows(samples, index, classes)
        mask = real[r]
        p = model(x, training=False)
        extra = tf.add_n(model.losses) if model.losses else tf.constant(0.0)
        self._track(tf.reduce_sum(self._loss(y, p) * mask), extra, mask, x, y, p, None)

    def _track(self, total: Any, extra: Any, mask: Any, x: Any, y: Any, p: Any, w: Any) -> None:
        """The loss tracker and compiled metrics, as Keras's step updates them, for this replica's part:
        summed over replicas, the tracker gets the global batch's loss weighted by its windows. The
        metrics see the real windows only (the padding comes last): Keras's unweighted metrics
        ignore sample weights."""
        import tensorflow as tf

        model = self.model
        n = tf.reduce_sum(mask)
        model._loss_tracker.update_state(tf.math.divide_no_nan(total, n) + extra, sample_weight=n)
        k = tf.cast(n, tf.int32)
        model.compute_metrics(x[:k], y[:k], p[:k], sample_weight=None if w is None else w[:k])

    def _run(
        self, fn: Any, t: BlockTensors, callbacks: keras.callbacks.CallbackList, phase: str
    ) -> None:
        """The group's global batches, ``steps`` per compiled call, with Keras's batch events."""
        assert isinstance(t, ShardedTensors)
        self.model.reset_metrics()
        begin = getattr(callbacks, f"on_{phase}_batch_begin")
        end = getattr(callbacks, f"on_{phase}_batch_end")
        batches = int(t.counts.shape[0])
        with self.lost_worker():
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


def _elementwise_loss(model: keras.Model) -> Callable[[Any, Any], Any]:
    """The compiled loss of a single-output model, one value per window (no reduction)."""
    import keras

    spec = model.loss
    if isinstance(spec, (list, tuple, dict)):
        raise UsageError(
            "several workers or devices train single-output models only (the model's loss is a "
            f"{type(spec).__name__} of losses)"
        )
    fn = keras.losses.get(spec) if isinstance(spec, str) else spec
    if isinstance(fn, keras.losses.Loss):
        return fn.call  # type: ignore[no-any-return]
    return fn  # type: ignore[no-any-return]
