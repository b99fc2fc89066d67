"""``chunkfit evaluate`` and ``chunkfit predict``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any

import typer

from .interrupt import outputs_kept
from .progress import bar
from .root import Command, app

RUN_HELP = (
    "A run folder (model.keras + run.json), a .keras file, or a model chunkfit export wrote "
    "(.tflite, .onnx, a SavedModel folder, a C array .c), scored in its own runtime"
)
CHANNELS_HELP = (
    "Map the store's channels to the run's: RUN=STORE pairs, or the store's channels in the run's "
    "order, comma separated [default: the run's own names; one channel on each side maps by itself]"
)
UNSAFE_HELP = (
    "Load .keras files outside Keras safe mode (deserialises lambdas: only for files you trust)"
)


def _num(v: Any, pct: bool = False) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    return f"{100 * v:.2f}%" if pct else f"{v:.4f}"


def _secs(v: float) -> str:
    return "n/a" if math.isnan(v) else f"{v:.3g} s"


def _json_ready(value: Any) -> Any:
    """NaN and infinities (an area with one class only, coverage without events) as null: JSON has
    no NaN."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_ready(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_ready(v) for v in value]
    return value


def format_eval(r: dict[str, Any]) -> str:
    """The evaluate table: what was scored, the event figures (detections matched one to one with
    the markers), then the window figures at the same threshold, accuracy last."""
    if r.get("picker"):
        return _format_picks(r)
    c = r["confusion"]
    lines = [f"exported     {r['exported']}"] if r.get("exported") else []
    lines += [f"channels     {r['channels']}"] if r.get("channels") else []
    lines += [
        f"scoring      {r['scored']}",
        f"run          {r['run']}",
        f"model        loaded {r['model_loaded']}",
        f"store        {r['store']}  ({r['windows']:,} windows of {r['window']}, stride "
        f"{r['stride']})",
        f"threshold    {r['threshold']:.4g} ({r['threshold_source']}); event class "
        f"{r['positive_class']}",
    ]
    if "events" in r:
        fa = r["false_alarms_per_hour"]
        tol = r["tolerance_s"]
        within = f"{tol:.3g} s" if tol is not None else f"{r['tolerance_samples']} samples"
        lines += [
            f"events       {r['event_found']:,} of {r['events']:,} markers found by "
            f"{r['detections']:,} detections ({r['match']} within {within})",
            f"event P/R/F1 {_num(r['event_precision'])} / {_num(r['event_recall'])} / "
            f"{_num(r['event_f1'])}",
            f"false alarms {r['false_alarms']:,}"
            + (f" ({fa:.1f} per hour of signal)" if fa is not None else ""),
        ]
        if r["time_error_median_s"] is not None:
            lines.append(
                f"time error   median {_secs(r['time_error_median_s'])}, 95th percentile "
                f"{_secs(r['time_error_p95_s'])} (peaks against their markers)"
            )
    lines += [
        f"PR-AUC       {_num(r['pr_auc'])}",
        f"precision    {_num(r['precision'], True)}  (windows)",
        f"recall       {_num(r['recall'], True)}  (windows)",
        f"F1           {_num(r['f1'])}  (windows)",
        f"ROC-AUC      {_num(r['roc_auc'])}",
        f"loss         {_num(r['loss'])}",
        "confusion    predicted 0   predicted 1",
        f"  true 0     {c['tn']:<13,} {c['fp']:,}",
        f"  true 1     {c['fn']:<13,} {c['tp']:,}",
        f"accuracy     {_num(r['accuracy'], True)}",
    ]
    if "argmax" in r:
        lines.append(
            f"argmax       accuracy {_num(r['argmax']['accuracy'], True)} over all classes; "
            f"confusion {r['argmax']['confusion_matrix']}"
        )
    if r.get("plot"):
        lines.append(f"plot         {r['plot']}")
    return "\n".join(lines)


def _format_picks(r: dict[str, Any]) -> str:
    """The evaluate table of a dense picker: its picks against the markers."""
    fa = r["false_alarms_per_hour"]
    return "\n".join(
        ([f"exported     {r['exported']}"] if r.get("exported") else [])
        + [
            f"scoring      {r['scored']}",
            f"run          {r['run']}",
            f"model        picker, loaded {r['model_loaded']}",
            f"store        {r['store']}  ({r['samples']:,} samples scored, windows of "
            f"{r['window']}, stride {r['stride']})",
            f"threshold    {r['threshold']:.4g} ({r['threshold_source']}); picks at least "
            f"{r['pick_width']} samples apart, matched within {r['tolerance_samples']}",
            f"markers      {r['markers']:,}, found {r['found']:,}, missed {r['missed']:,}",
            f"picks        {r['detections']:,} ({r['false_alarms']:,} false alarms"
            + (f", {fa:.1f} per hour of signal)" if fa is not None and fa == fa else ")"),
            f"precision    {_num(r['precision'], True)}",
            f"recall       {_num(r['recall'], True)}",
            f"F1           {_num(r['f1'])}",
            f"time error   median {_num(r['time_error_median_s'])} s, 95th percentile "
            f"{_num(r['time_error_p95_s'])} s",
        ]
    )


@app.command(cls=Command)
@outputs_kept(note="nothing was written (the plot comes last)")
def evaluate(
    run: Annotated[str, typer.Argument(help=RUN_HELP)],
    store: Annotated[str, typer.Argument(help="A store with events or labels")],
    threshold: Annotated[
        float | None,
        typer.Option(
            help="Score at or above which a window counts as an event [default: the one the run "
            "chose on its validation split, else 0.5]"
        ),
    ] = None,
    split: Annotated[
        str | None,
        typer.Option(
            help="Part of the run's training store to score: validation, train or all [default: "
            "validation on the training store, all of any other store]"
        ),
    ] = None,
    chunk: Annotated[int, typer.Option(help="Windows per block")] = 200_000,
    batch_size: Annotated[int, typer.Option(help="Windows per prediction step")] = 1024,
    plot: Annotated[
        str | None,
        typer.Option(
            help="Plot file [default: eval.png in the run folder, or beside the .keras file]"
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
    unsafe: Annotated[bool, typer.Option("--unsafe", help=UNSAFE_HELP)] = False,
    channels: Annotated[str | None, typer.Option(help=CHANNELS_HELP)] = None,
    tolerance: Annotated[
        float | None,
        typer.Option(
            help="Seconds between a detection and a marker for the marker to count as found "
            "[default: the run's, else half a window]"
        ),
    ] = None,
    match: Annotated[
        str | None,
        typer.Option(
            help="What of a detection must lie within --tolerance of a marker: peak or span "
            "[default: the run's, else peak]"
        ),
    ] = None,
) -> None:
    """Event precision, recall, F1 and false alarms, then the window figures, block by block."""
    from ..score.evaluate import evaluate as run_evaluate
    from ..score.sidecar import exported_kind
    from ..store.urls import is_remote

    run_path = Path(run)
    plot_path: str | None = plot or str(
        run_path.parent / f"{run_path.name}.eval.png"
        if exported_kind(run_path) is not None  # beside it: a SavedModel folder stays as exported
        else (run_path if run_path.is_dir() else run_path.parent) / "eval.png"
    )
    if is_remote(run) and plot is None:
        plot_path = None  # an s3:// run folder is not written by evaluate: plot with --plot FILE
    with bar("evaluate", None, unit="windows") as update:
        result = run_evaluate(
            run,
            store,
            threshold=threshold,
            chunk=chunk,
            batch_size=batch_size,
            plot=plot_path,
            unsafe=unsafe,
            split=split,
            channels=channels,
            progress=lambda done, total: update(done, total=total),
            tolerance=tolerance,
            match=match,
        )
    if json_out:
        typer.echo(json.dumps(_json_ready(result), indent=2, allow_nan=False))
    else:
        typer.echo(format_eval(result))


@app.command(cls=Command)
@outputs_kept("out", "events_out")
def predict(
    run: Annotated[str, typer.Argument(help=RUN_HELP)],
    store: Annotated[str, typer.Argument(help="Any store: events and labels are not needed")],
    out: Annotated[
        str | None,
        typer.Option(help="Scores array to write: NAME.zarr or NAME.h5 (one float32 per sample)"),
    ] = None,
    events_out: Annotated[
        str | None,
        typer.Option(
            help="CSV of detections, one row per event: start, end and peak in seconds (and UTC "
            "where the store knows it), peak score, segment, samples"
        ),
    ] = None,
    merge_gap: Annotated[
        float,
        typer.Option(
            help="Seconds: positive windows at most this far apart are one event (0: only windows "
            "that overlap or touch)"
        ),
    ] = 0.0,
    min_duration: Annotated[
        float,
        typer.Option(help="Seconds: drop events shorter than this (one window lasts one window)"),
    ] = 0.0,
    threshold: Annotated[
        float | None,
        typer.Option(
            help="Score at or above which a window is positive [default: the one the run chose on "
            "its validation split, else 0.5]"
        ),
    ] = None,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace existing output files")
    ] = False,
    chunk: Annotated[int | None, typer.Option(help="Windows per block [default: 200000]")] = None,
    batch_size: Annotated[int, typer.Option(help="Windows per prediction step")] = 1024,
    unsafe: Annotated[bool, typer.Option("--unsafe", help=UNSAFE_HELP)] = False,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow",
            help="Score a growing store (a live `chunkfit ingest`) as its samples are committed",
        ),
    ] = False,
    idle: Annotated[
        float | None,
        typer.Option(
            help="With --follow: end when the store has not grown for this many seconds [default: "
            "10; 30 on object storage]"
        ),
    ] = None,
    channels: Annotated[str | None, typer.Option(help=CHANNELS_HELP)] = None,
) -> None:
    """Score every window start of a store (NaN where no window fits) in bounded memory.

    With --follow the store is watched while it grows: new windows are scored as soon as their
    samples are committed and each detection is written to --events-out as it closes; it ends on
    Ctrl-C or after --idle seconds without new samples, with outputs equal to a predict of the final
    store.
    """
    from ..errors import UsageError

    if follow and chunk is not None:
        raise UsageError(
            "--chunk does not apply to --follow, which scores what each commit adds; drop --chunk"
        )
    if follow:
        _follow(
            run,
            store,
            out,
            events_out,
            threshold,
            overwrite,
            batch_size,
            unsafe,
            idle,
            channels,
            (merge_gap, min_duration),
        )
        return
    if idle is not None:
        raise UsageError("--idle applies to --follow only; add --follow to score a growing store")
    from ..score.predict import predict as run_predict

    with bar("predict", None, unit="windows") as update:
        report = run_predict(
            run,
            store,
            out,
            events_out=events_out,
            threshold=threshold,
            overwrite=overwrite,
            chunk=200_000 if chunk is None else chunk,
            batch_size=batch_size,
            unsafe=unsafe,
            channels=channels,
            progress=lambda done, total: update(done, total=total),
            merge_gap=merge_gap,
            min_duration=min_duration,
        )
    if report.exported is not None:
        typer.echo(f"exported {report.exported}")
    if report.channels is not None:
        typer.echo(f"channels {report.channels}")
    typer.echo(f"threshold {report.threshold:.4g} ({report.threshold_source})")
    typer.echo(f"scored {report.windows:,} windows{_written(report)}")


def _written(report: Any) -> str:
    """Where the scores and the detections went, as the last line says it."""
    into = f" into {report.scores}" if report.scores is not None else ""
    if report.events_out:
        into += f"; {report.detections:,} detection(s) in {report.events_out}"
    return into


def _follow(
    run: str,
    store: str,
    out: str | None,
    events_out: str | None,
    threshold: float | None,
    overwrite: bool,
    batch_size: int,
    unsafe: bool,
    idle: float | None,
    channels: str | None,
    rule: tuple[float, float],
) -> None:
    from ..config import FollowOptions
    from ..score.follow import default_idle, follow

    options = FollowOptions(idle=default_idle(store) if idle is None else idle)
    report = follow(
        run,
        store,
        out,
        events_out=events_out,
        threshold=threshold,
        overwrite=overwrite,
        batch_size=batch_size,
        unsafe=unsafe,
        options=options,
        channels=channels,
        merge_gap=rule[0],
        min_duration=rule[1],
    )
    why = "Ctrl-C" if report.ended == "interrupted" else f"the store idle for {options.idle:g} s"
    if report.exported is not None:
        typer.echo(f"exported {report.exported}")
    if report.channels is not None:
        typer.echo(f"channels {report.channels}")
    typer.echo(f"threshold {report.threshold:.4g} ({report.threshold_source})")
    typer.echo(
        f"scored {report.windows:,} windows of {report.samples:,} samples{_written(report)} "
        f"(followed until {why})"
    )
