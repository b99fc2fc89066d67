"""``chunkfit.fit``: the keyword facade over a training run.

It turns keywords (or a ``FitOptions``) into a checked run: the store opened, the split planned
(most mistakes are refused there, before TensorFlow loads), the run folder opened or resumed, and
whether this process is one of several workers. ``Trainer`` (chunkfit.train.runsetup,
chunkfit.train.loop) does the rest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..config import BlockSpec, FitOptions
from ..core.plan import SplitPlan
from ..errors import MissingExtraError, UsageError
from ..ingest.formats import recording_kind
from ..store import Store, open_store
from ..store.urls import is_remote
from .backend import use_backend
from .choice import Choice, backend_given, choose
from .engines import ENGINES, EngineEntry, engine_for_backend
from .loop import Trainer
from .malloc import cap_arenas
from .models import DEFAULT_MODEL
from .picker import pick_width_of
from .precision import set_policy
from .remotefolder import RemotePeerFolder, RemoteRunFolder
from .runfolder import RUN_FILE, PeerFolder, RunFolder
from .tensorflow.cluster import CLUSTER_TIMEOUT
from .verdict import TARGETS, check_targets, parse_targets

if TYPE_CHECKING:
    import keras

    from .progress import TrainProgress

__all__ = ["fit", "run_identity"]


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
    label_margin: int = 0,
    deterministic: bool = False,
    memory_budget: int | None = None,
    normalize: str = "global",
    class_weight: str = "auto",
    oversample: float = 0.0,
    threshold_for: str = "event-f1",
    tolerance: float | None = None,
    match: str = "peak",
    fail_under: Mapping[str, float] | None = None,
    steps_per_execution: int | None = FitOptions.steps_per_execution,
    compute_threads: int | None = None,
    jit: str = "auto",
    jax_loop: str = "auto",
    augment: str = "none",
    precision: str = "auto",
    pick_width: int | None = None,
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
    cluster_timeout: float = CLUSTER_TIMEOUT,
) -> keras.callbacks.History:
    """Train ``model`` on every window of ``store``, block by block; returns the Keras History.

    ``model`` is a Keras model or what ``chunkfit train --model`` takes (a built-in name, a
    ``.keras`` file, ``module:function``). ``options``, when given, replaces the keyword settings.
    With ``out`` the run folder gets model.keras, history.csv, run.json and curves.png, and while
    training a checkpoint every ``checkpoint_every`` blocks (default: about every 3 minutes of
    training) and at the end of every epoch. On a folder holding an unfinished run, ``resume``
    "auto" continues it from its checkpoint (a folder without one starts a new run), "resume" does
    the same but refuses a folder with nothing to resume, and "restart" deletes the run and starts
    over. A finished run is refused unless "restart". ``normalize`` ("global", "window" or "none")
    is how windows are standardised before ``model`` sees them (chunkfit.train.normalize): the
    returned History's ``model`` is the trained model behind that standardisation, the one that
    takes raw signal (and the one saved as model.keras). ``class_weight`` ("auto", "balanced",
    "balanced:max=20", "none" or "0:1,1:40") weighs training windows by class
    (chunkfit.train.weights); ``oversample`` (a share in [0, 1), 0: off) repeats the rarest class's
    windows in every epoch up to that share of it, and ``label_margin`` leaves out windows whose
    event marker lies within that many samples of an edge (chunkfit.core.balance). At the end, the
    run picks its decision threshold on the validation split by ``threshold_for`` ("event-f1",
    "f1", "recall=0.9", "precision=0.8"; chunkfit.core.threshold), its detections matched to the
    event markers within ``tolerance`` seconds (None: half a window) of their peak or span
    (``match``), records it in run.json with the verdict's warnings (chunkfit.train.verdict), and
    then raises BelowTargetError when a figure misses its ``fail_under`` target
    ({"event_f1": 0.8}). ``jit``
    ("auto", "on", "off") is whether the train step runs under XLA; "auto" times both on this
    machine first (chunkfit.train.tensorflow.autotune; the choice goes to run.json). ``pick_width``
    is the target width of a ``"picker"`` model (chunkfit.core.picks). ``jax_loop``
    ("auto", "dispatch", "scan") is how the JAX engine runs an element's batches
    (chunkfit.train.jax.loopchoice). ``augment`` ("none", or transforms like
    "noise=20,gain=0.1,flip,shift=8,mix=0.2") augments training batches inside the train step
    (chunkfit.train.augment). ``precision`` ("auto", "float32", "bfloat16") is the arithmetic of
    training, and without ``--backend``/``KERAS_BACKEND`` the engine is chosen for this machine
    and model too (chunkfit.train.choice; a Keras already imported fixes it). ``tensorboard``
    is a folder for Keras's TensorBoard callback:
    epoch summaries, and evaluation figures against the optimizer's step count, which runs on across
    blocks. ``devices`` ("all", or "cpu:N" logical CPU devices for trying it out) trains on several
    devices of this machine, and TF_CONFIG in the environment makes this process one worker of a
    synchronous multi-worker run (chunkfit.train.tensorflow.distributed); ``batch_size`` is then the
    global batch, and only the chief (rank 0) writes ``out``. A worker waits ``cluster_timeout``
    seconds for the others to join, then ends the process with one line naming the missing worker.
    """
    opts = options or FitOptions.from_keywords(
        window=window,
        stride=stride,
        label=label,
        label_margin=label_margin,
        validation=validation,
        validation_segments=validation_segments,
        chunk=chunk,
        seed=seed,
        mix=mix,
        batch_size=batch_size,
        epochs=epochs,
        deterministic=deterministic,
        memory_budget=memory_budget,
        steps_per_execution=steps_per_execution,
        compute_threads=compute_threads,
        jit=jit,
        jax_loop=jax_loop,
        pick_width=pick_width,
        optimizer=optimizer,
        lr=lr,
        loss=loss,
        normalize=normalize,
        class_weight=class_weight,
        oversample=oversample,
        threshold_for=threshold_for,
        tolerance=tolerance,
        match=match,
        augment=augment,
        precision=precision,
    )
    targets = dict(fail_under or {})
    if any(name not in TARGETS for name in targets):
        parse_targets([f"{name}={value}" for name, value in targets.items()])
    if checkpoint_every is not None and (
        isinstance(checkpoint_every, bool)
        or not isinstance(checkpoint_every, int)
        or checkpoint_every < 1
    ):
        raise UsageError(
            "--checkpoint-every must be a positive number of blocks (received "
            f"{checkpoint_every!r})"
        )
    if tensorboard is not None:
        _require_tensorboard()
    picker = pick_width_of(model, opts) is not None
    if opts.pick_width is not None and not picker:
        name = model if isinstance(model, str) else model.name
        raise UsageError(
            f"--pick-width applies to --model picker only (received --model {name}); drop it"
        )
    if picker and (opts.augment.on or opts.oversample or opts.windows.margin):
        raise UsageError(
            "--model picker learns per-sample targets, which --augment, --oversample and "
            "--label-margin (made for window classes) do not move with the window; drop them"
        )
    if out is None and resume != "auto":
        raise UsageError(f"resume={resume!r} needs a run folder: pass out=RUN")
    kind = None if isinstance(store, Store) else recording_kind(store)
    if kind is not None:
        raise UsageError(
            f"{store} is {kind}, not a store; ingest it into one first: chunkfit ingest "
            f"STORE.zarr {store}"
        )
    # before the run's threads allocate, so that memory stays flat (chunkfit.train.malloc)
    cap_arenas()
    # Without --backend or KERAS_BACKEND, the engine is chosen once the run's size is known
    # (chunkfit.train.choice); until then the checks are TensorFlow's, which trains distributed.
    given = backend_given() is not None
    engine = engine_for_backend() if given else ENGINES["tensorflow"]
    distribution = _distribution(devices, engine, cluster_timeout)
    if picker and distribution is not None:
        raise UsageError(
            "--model picker trains in one process on one device; drop --devices and TF_CONFIG"
        )
    if given:
        engine.check(opts)
    with contextlib.ExitStack() as stack:
        if not isinstance(store, Store):
            store = stack.enter_context(open_store(store))
        split = SplitPlan.of(store, opts)  # most mistakes are refused here, before TensorFlow loads
        if picker and not store.has_events:
            raise UsageError(
                f"{store.path}: --model picker learns from event markers, and the store has none; "
                "ingest its events (or use a classifier with --label)"
            )
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
        choice: Choice | None = None
        try:
            choice, engine = _choose_engine(
                model, opts, split, store, folder, distributed=distribution is not None, given=given
            )
            identity["choice"] = {"engine": choice.engine, "precision": choice.precision}
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
                choice,
            )
            history = trainer.train(tensorboard)
        except BaseException:
            if folder is not None:
                folder.close(failed=True)
            raise
        finally:  # finished, failed or interrupted: what the process builds next is float32 again
            if choice is not None and choice.precision != "float32":
                set_policy("float32")
        if folder is not None:
            folder.close()
        if targets and not is_peer:
            check_targets(trainer.threshold, targets, str(out) if out is not None else "the run")
        return history


def run_identity(opts: FitOptions, model: keras.Model | str, store: Store) -> dict[str, Any]:
    """What a checkpoint must share with the run resuming it: settings, model and store."""
    config = opts.to_dict()
    for speed in (
        "compute_threads",
        "steps_per_execution",
        "precision",
        "jit",
        "jax_loop",
        "threshold_for",
        "tolerance",
        "match",
    ):  # how fast, not what, is trained; how the threshold is chosen after it
        config.pop(speed)
    config["augment"] = str(opts.augment)  # refused in the flag's own words when it differs
    return {
        "config": config,
        "model": model if isinstance(model, str) else model.name,
        "store": store.identity,
    }


def _choose_engine(
    model: keras.Model | str,
    opts: FitOptions,
    split: SplitPlan,
    store: Store,
    folder: RunFolder | None,
    *,
    distributed: bool,
    given: bool,
) -> tuple[Choice, EngineEntry]:
    """The run's engine and precision (chunkfit.train.choice), Keras's backend set to it."""
    choice = choose(
        model,
        opts,
        channels=store.n_channels,
        classes=split.labeller.n_classes,
        run_windows=opts.epochs * split.balance.epoch_windows(),
        resumed=_resumed_choice(folder),
        distributed=distributed,
    )
    if not given:
        use_backend(choice.engine)
    engine = ENGINES[choice.engine]
    engine.check(opts)
    return choice, engine


def _resumed_choice(folder: RunFolder | None) -> dict[str, Any] | None:
    """The engine and precision the checkpoint a run resumes from was made with (None: a new run).
    A checkpoint made before chunkfit chose them records neither: that run trained in float32 on
    the engine its run.json names (TensorFlow where it names none), and goes on so."""
    if folder is None or not folder.checkpoint:
        return None
    made = folder.checkpoint.state["run"]
    if made.get("choice"):
        return dict(made["choice"])
    try:
        engine = json.loads(folder.file(RUN_FILE).read_text()).get("engine")
    except (OSError, ValueError, AttributeError):
        engine = None
    return {"engine": engine if engine in ENGINES else "tensorflow", "precision": "float32"}


def _distribution(
    devices: str | None, engine: EngineEntry, cluster_timeout: float = CLUSTER_TIMEOUT
) -> tuple[Any, str | None] | None:
    """(cluster, devices) when this run is distributed (TF_CONFIG or ``devices``), else None;
    refuses what cannot work, before TensorFlow loads."""
    from .tensorflow.cluster import check_cluster_timeout, check_devices, cluster_from_env

    timeout = check_cluster_timeout(cluster_timeout)
    cluster = cluster_from_env()
    if cluster is not None:
        cluster = dataclasses.replace(cluster, timeout=timeout)
    logical = check_devices(devices)
    if cluster is None and devices is None:
        return None
    if engine.distributed is None:
        raise UsageError(
            f"{'TF_CONFIG' if devices is None else '--devices ' + devices}: several devices or "
            "workers "
            "train on the TensorFlow engine; unset KERAS_BACKEND=jax (or pass --backend tensorflow)"
        )
    if cluster is not None and logical:
        raise UsageError(
            f"--devices {devices} is for one machine; with TF_CONFIG each worker trains on its "
            "GPUs (or its CPU): leave out --devices, or pass --devices all"
        )
    # TensorFlow's collective errors become one line
    if cluster is not None and os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2") == "2":
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    return cluster, devices


def open_run_folder(
    path: str | os.PathLike[str], resume: str = "auto", run: dict[str, Any] | None = None
) -> RunFolder:
    """A local run folder, or one on object storage (``s3://``, chunkfit.train.remotefolder)."""
    if is_remote(path):
        return RemoteRunFolder(str(path), resume, run)
    return RunFolder(path, resume, run)


def open_peer_folder(path: str | os.PathLike[str]) -> PeerFolder:
    """What a worker other than the chief reads of the run folder ``path``, local or ``s3://``."""
    if is_remote(path):
        return RemotePeerFolder(str(path))
    return PeerFolder(path)


def _require_tensorboard() -> None:
    """Refuse ``--tensorboard`` before training when its package is missing (TensorFlow would
    fail at the first logged batch, with a traceback)."""
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        raise MissingExtraError(
            "--tensorboard needs the tensorboard package; install it with "
            "pip install 'chunkfit[tensorboard]'"
        ) from None
