"""``chunkfit train``.

Over 400 lines because the command declares about forty options, each with its help panel, default
and help text; what it does with them is one call of ``chunkfit.train.fit.fit``.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..train.tensorflow.cluster import CLUSTER_TIMEOUT
from .interrupt import keeps, kept_by_run
from .progress import bar
from .root import Command, app

if TYPE_CHECKING:
    from ..train.progress import TrainProgress


def _metrics(logs: dict[str, float]) -> str:
    return "  ".join(f"{k} {v:.4f}" for k, v in logs.items())


def _count_or_share(text: str | None) -> float | None:
    """``--validation-segments``: "2" -> 2 (segments), "0.25" -> 0.25 (a share of them)."""
    from ..errors import UsageError

    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise UsageError(
            "--validation-segments must be a count (2) or a share (0.25) of the segments "
            f"(received {text!r})"
        ) from None
    return int(value) if value >= 1 and value.is_integer() else value


@app.command(cls=Command)
def train(
    store: Annotated[
        str | None,
        typer.Argument(
            help="Store to train on",
            metavar="STORE, else chunkfit.toml's store, else ./sensor.zarr",
            show_default="the store named in ./chunkfit.toml, else ./sensor.zarr",
        ),
    ] = None,
    window: Annotated[int, typer.Option(help="Samples per window", rich_help_panel="Data")] = 104,
    stride: Annotated[
        int, typer.Option(help="Samples between window starts", rich_help_panel="Data")
    ] = 1,
    label: Annotated[
        str,
        typer.Option(
            help="Window label: any-event (an event marker in the window), event-last=K (one in "
            "its last K samples, for online detectors), event-in=A:B (one at offsets [A, B)), last "
            "or majority (per-sample labels)",
            rich_help_panel="Data",
        ),
    ] = "any-event",
    validation: Annotated[
        float,
        typer.Option(
            help="Share of each segment held out at its end for validation", rich_help_panel="Data"
        ),
    ] = 0.1,
    validation_segments: Annotated[
        str | None,
        typer.Option(
            help="Hold out whole segments (recordings) for validation instead: a count (2) or a "
            "share (0.25), chosen by --seed",
            rich_help_panel="Data",
            show_default="none: --validation",
        ),
    ] = None,
    model: Annotated[
        str,
        typer.Option(
            help="baseline-cnn, dilated-resnet, inception-time, picker (a probability per sample, "
            "picks at its peaks), a .keras file, or module:function (imports that module and "
            "calls that function: it runs your own Python code)",
            rich_help_panel="Model",
        ),
    ] = "baseline-cnn",
    pick_width: Annotated[
        int | None,
        typer.Option(
            help="--model picker: the width in samples of the triangle it learns around each "
            "marker; its picks lie at least this far apart and match a marker within it",
            rich_help_panel="Model",
            show_default="21",
        ),
    ] = None,
    optimizer: Annotated[
        str | None,
        typer.Option(
            help="Keras optimizer name",
            rich_help_panel="Model",
            show_default="adam, or the saved model's",
        ),
    ] = None,
    lr: Annotated[
        float | None,
        typer.Option(help="Learning rate", rich_help_panel="Model", show_default="0.001"),
    ] = None,
    loss: Annotated[
        str | None,
        typer.Option(
            help="Keras loss name",
            rich_help_panel="Model",
            show_default="categorical_crossentropy",
        ),
    ] = None,
    normalize: Annotated[
        str,
        typer.Option(
            help="Standardise windows before the model: global (per channel, mean and std of the "
            "training split), window (each window by its own mean and std) or none; saved inside "
            "model.keras",
            rich_help_panel="Model",
        ),
    ] = "global",
    unsafe: Annotated[
        bool,
        typer.Option(
            "--unsafe",
            help="Load a --model .keras file outside Keras safe mode (deserialises lambdas: only "
            "for files you trust)",
            rich_help_panel="Model",
            metavar="",
            show_default="off",
        ),
    ] = False,
    epochs: Annotated[
        int, typer.Option(help="Passes over every training window", rich_help_panel="Training")
    ] = 5,
    batch_size: Annotated[
        int, typer.Option(help="Windows per training step", rich_help_panel="Training")
    ] = 128,
    seed: Annotated[
        int,
        typer.Option(
            help="Seed for weights and the block and window order", rich_help_panel="Training"
        ),
    ] = 0,
    deterministic: Annotated[
        bool,
        typer.Option(
            "--deterministic",
            help="Same seed, same weights bit for bit (TensorFlow op determinism; a little slower)",
            rich_help_panel="Training",
            metavar="",
            show_default="off",
        ),
    ] = False,
    class_weight: Annotated[
        str,
        typer.Option(
            help="Weigh training windows by class: auto (balanced when the rarest class holds "
            "under 5%), balanced, none, or CLASS:WEIGHT pairs like 0:1,1:40",
            rich_help_panel="Rare events",
        ),
    ] = "auto",
    oversample: Annotated[
        float,
        typer.Option(
            help="Repeat the rarest class's windows in every epoch up to this share of it, e.g. "
            "0.25 (every other window once; 0: off)",
            rich_help_panel="Rare events",
        ),
    ] = 0.0,
    label_margin: Annotated[
        int,
        typer.Option(
            help="Leave out windows whose event marker lies within this many samples of an edge "
            "(of the window, or of event-in's span): neither class, in training or the figures",
            rich_help_panel="Rare events",
        ),
    ] = 0,
    augment: Annotated[
        str,
        typer.Option(
            help="Augment training windows inside the train step: none, or transforms like "
            "noise=20,gain=0.1,offset=0.05,flip,shift=8,mix=0.2 (noise down to 20 dB SNR, gain "
            "within 10%, level within 0.05, sign flipped half the time, rolled up to 8 samples, "
            "an event of the batch added to 20% of the negative windows); seeded by --seed",
            rich_help_panel="Rare events",
        ),
    ] = "none",
    threshold_for: Annotated[
        str,
        typer.Option(
            help="How the run picks its decision threshold on the validation split: event-f1 "
            "(maximise the F1 of detections matched to the markers), f1 (of windows), recall=0.9 "
            "or precision=0.8; evaluate and predict use it",
            rich_help_panel="Rare events",
        ),
    ] = "event-f1",
    tolerance: Annotated[
        float | None,
        typer.Option(
            help="Seconds between a detection and a marker for the marker to count as found "
            "(samples on a store without a rate)",
            rich_help_panel="Rare events",
            show_default="half a window",
        ),
    ] = None,
    match: Annotated[
        str,
        typer.Option(
            help="What of a detection must lie within --tolerance of a marker: peak (its "
            "highest-scoring window's centre) or span (any of its windows)",
            rich_help_panel="Rare events",
        ),
    ] = "peak",
    fail_under: Annotated[
        list[str] | None,
        typer.Option(
            help="After writing the run, exit 3 when a figure on the validation split is under "
            "its target: FIGURE=VALUE (event_f1, event_recall, event_precision, pr_auc, f1, "
            "precision, recall), repeatable",
            rich_help_panel="Rare events",
            show_default="none",
        ),
    ] = None,
    chunk: Annotated[
        int,
        typer.Option(help="Windows per block (one model.fit call each)", rich_help_panel="Speed"),
    ] = 200_000,
    mix: Annotated[
        int,
        typer.Option(
            help="Blocks from different parts of the signal trained together, windows shuffled "
            "jointly",
            rich_help_panel="Speed",
        ),
    ] = 4,
    memory_budget: Annotated[
        str | None,
        typer.Option(
            help="Pick --chunk so the process stays within this much memory, e.g. 1.5GB",
            rich_help_panel="Speed",
            show_default="none: --chunk decides",
        ),
    ] = None,
    steps_per_execution: Annotated[
        int | None,
        typer.Option(
            help="Batches per compiled training call; callbacks hear of each call's last batch",
            rich_help_panel="Speed",
            show_default="256, fewer when their windows would come to over 16 MB",
        ),
    ] = None,
    compute_threads: Annotated[
        int | None,
        typer.Option(
            help="Threads for the model's arithmetic, each batch trained whole; 0 = every core",
            rich_help_panel="Speed",
            show_default="measured on this machine for this model with the compile mode, among "
            "every core, one thread, and each batch in halves side by side (long runs; cached for "
            "the next), else every core",
        ),
    ] = None,
    jit: Annotated[
        str,
        typer.Option(
            help="Train step under XLA: auto (time both on this machine, with the threads before "
            "training or in the first training calls, and keep the faster; off with "
            "--deterministic), on, or off (Keras's step op for op: no XLA, no fused Adam kernel)",
            rich_help_panel="Speed",
        ),
    ] = "auto",
    jax_loop: Annotated[
        str,
        typer.Option(
            help="JAX engine: run an element's batches one compiled call each (dispatch), all in "
            "one compiled call (scan), or auto (time both on this machine in the first training "
            "calls and keep the faster; dispatch with --deterministic)",
            rich_help_panel="Speed",
        ),
    ] = "auto",
    precision: Annotated[
        str,
        typer.Option(
            help="Arithmetic of training: float32, bfloat16 (Keras's mixed_bfloat16; model.keras "
            "stays float32), or auto (measured on CPUs with bfloat16 instructions for long runs, "
            "float32 elsewhere)",
            rich_help_panel="Speed",
        ),
    ] = "auto",
    out: Annotated[
        str | None,
        typer.Option(
            help="Run folder for model.keras, history.csv, run.json, curves.png; an unfinished run "
            "in it is resumed from its checkpoint",
            rich_help_panel="Run folder",
            show_default="runs/<timestamp>",
        ),
    ] = None,
    checkpoint_every: Annotated[
        int | None,
        typer.Option(
            help="Checkpoint the run every this many blocks; always at the end of each epoch",
            rich_help_panel="Run folder",
            show_default="about every 3 minutes of training",
        ),
    ] = None,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="Refuse to start unless --out holds an unfinished run to resume",
            rich_help_panel="Run folder",
            metavar="",
            show_default="off",
        ),
    ] = False,
    restart: Annotated[
        bool,
        typer.Option(
            "--restart",
            help="Delete the run in --out (finished or not) and start over",
            rich_help_panel="Run folder",
            metavar="",
            show_default="off",
        ),
    ] = False,
    tensorboard: Annotated[
        str | None,
        typer.Option(
            help="Folder for TensorBoard logs (Keras's TensorBoard callback; steps run on across "
            "blocks)",
            rich_help_panel="Run folder",
            show_default="none",
        ),
    ] = None,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose",
            help="Print every figure of each epoch and how the engine chose its compile mode and "
            "threads, timings included (history.csv and run.json hold them anyway)",
            rich_help_panel="Run folder",
            metavar="",
            show_default="off: a few figures per epoch",
        ),
    ] = False,
    devices: Annotated[
        str | None,
        typer.Option(
            help="Train on several devices of this machine: all (every GPU; tf.distribute "
            "MirroredStrategy) or cpu:N (N logical CPU devices, for trying it out); --batch-size "
            "is then the global batch. Several machines: set TF_CONFIG on each (see README)",
            rich_help_panel="Distribution",
            show_default="one device",
        ),
    ] = None,
    cluster_timeout: Annotated[
        float,
        typer.Option(
            help="Seconds a worker of several (TF_CONFIG) waits for the others to start and join; "
            "then it stops with one line naming the missing worker",
            rich_help_panel="Distribution",
        ),
    ] = CLUSTER_TIMEOUT,
) -> None:
    """Train a Keras model on every window of a store, block by block, without materialising them.

    Running the same command again after a crash or a kill resumes the run in --out from its last
    checkpoint.
    """
    from .._fs import refuse_url
    from ..config import FitOptions
    from ..errors import UsageError, WorkerLostError
    from ..project import default_store
    from ..store.urls import is_remote
    from ..train.budget import parse_bytes
    from ..train.fit import fit
    from ..train.metrics import epoch_summary
    from ..train.models import check_model_spec, unsafe_model_files
    from ..train.verdict import parse_targets

    if resume and restart:
        raise UsageError("give either --resume or --restart, not both")
    options = FitOptions.from_keywords(
        window=window,
        stride=stride,
        label=label,
        label_margin=label_margin,
        validation=validation,
        validation_segments=_count_or_share(validation_segments),
        chunk=chunk,
        seed=seed,
        mix=mix,
        batch_size=batch_size,
        epochs=epochs,
        deterministic=deterministic,
        memory_budget=parse_bytes(memory_budget) if memory_budget is not None else None,
        steps_per_execution=steps_per_execution,
        compute_threads=compute_threads,
        jit=jit,
        jax_loop=jax_loop,
        precision=precision,
        pick_width=pick_width,
        optimizer=optimizer,
        lr=lr,
        loss=loss,
        normalize=normalize,
        class_weight=class_weight,
        threshold_for=threshold_for,
        tolerance=tolerance,
        match=match,
        oversample=oversample,
        augment=augment,
    )
    targets = parse_targets(fail_under)
    for given, what in ((store, "stores"), (out, "run folders")):
        if given is not None:
            refuse_url(given, what, s3=True)
    check_model_spec(model, unsafe=unsafe)  # a wrong --model is refused before TensorFlow loads
    path: str | Path = (
        (store if is_remote(store) else Path(store)) if store is not None else default_store()
    )
    run_dir: str | Path = (
        (out if is_remote(out) else Path(out))
        if out is not None
        else Path("runs") / time.strftime("%Y%m%d-%H%M%S")
    )
    with (
        keeps(lambda: kept_by_run(run_dir, options.epochs, out is None)),
        bar("train", 1.0, unit="") as update,
    ):

        def progress(p: TrainProgress) -> None:
            if p.phase == "notice":
                message = p.detail if verbose and p.detail is not None else p.message
                typer.echo(message, err=(message or "").startswith("warning:"))
                return
            if p.phase == "resume":
                part = (
                    f" and {p.block} of {p.blocks} blocks of epoch {p.epoch + 1}" if p.block else ""
                )
                typer.echo(
                    f"resuming the run in {run_dir} from its checkpoint: {p.epoch} of {p.epochs} "
                    f"epoch(s){part} done"
                )
                return
            if p.phase == "epoch":
                figures = (
                    f"{_metrics(p.logs or {})}  {p.windows_per_s:,.0f} windows/s"
                    if verbose
                    else epoch_summary(p.logs or {})
                )
                typer.echo(f"epoch {p.epoch + 1}/{p.epochs}  {figures}")
                return
            what = (
                f"block {p.block}/{p.blocks}"
                if p.phase == "train"
                else f"validating {p.block}/{p.blocks}"
            )
            loss_text = "" if p.loss is None else f"  loss {p.loss:.4f}"
            update(
                p.done,
                info=f"epoch {p.epoch + 1}/{p.epochs}  {what}  {p.windows_per_s:,.0f} "
                f"windows/s{loss_text}",
            )

        from ..train.tensorflow.cluster import cluster_from_env

        if cluster_from_env() is not None:
            _native_stderr_quiet()
        with unsafe_model_files(unsafe):
            try:
                history = fit(
                    model,
                    path,
                    options=options,
                    out=run_dir,
                    progress=progress,
                    checkpoint_every=checkpoint_every,
                    resume="resume" if resume else "restart" if restart else "auto",
                    tensorboard=tensorboard,
                    devices=devices,
                    cluster_timeout=cluster_timeout,
                    fail_under=targets,
                )
            except WorkerLostError as err:
                # After aborted collectives TensorFlow's runtime may print or wait at interpreter
                # exit (seen: a pool's finaliser failing): the one line, then out at once. The run
                # folder was closed by fit.
                print(f"chunkfit: error: {err}", file=sys.stderr, flush=True)
                sys.stdout.flush()
                os._exit(err.exit_code)
    cluster = cluster_from_env()
    if cluster is not None and not cluster.chief:
        typer.echo(
            f"{cluster.name(cluster.rank)} done; the chief, {cluster.name(0)}, wrote the run "
            f"folder {run_dir}"
        )
        return
    done = len(history.epoch)
    stopped = f" (stopped early after {done} of {epochs})" if done < epochs else ""
    typer.echo(f"trained {model} for {done} epoch(s){stopped}")
    typer.echo(f"run folder {run_dir}: model.keras, history.csv, run.json, curves.png")


def _native_stderr_quiet() -> None:
    """A worker of several: TensorFlow's gRPC and collective layers log from C++ (absl) when a peer
    is lost, whatever TF_CPP_MIN_LOG_LEVEL says, and the worker's message must stay one line. Native
    writes to file descriptor 2 go to /dev/null from here on; Python's ``sys.stderr`` (chunkfit's
    lines, progress, a bug's traceback) keeps the original stderr. TF_CPP_MIN_LOG_LEVEL=0 or 1 keeps
    TensorFlow's own logs."""
    if os.environ.get("TF_CPP_MIN_LOG_LEVEL") in ("0", "1"):
        return
    sys.stderr.flush()
    kept = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)
    sys.stderr = open(
        kept,
        "w",
        buffering=1,
        encoding=sys.stderr.encoding or "utf-8",  # noqa: SIM115 - the process's stderr
        errors="backslashreplace",
    )
