"""``chunkfit export``."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from .interrupt import outputs_kept
from .root import Command, app

UNSAFE_HELP = (
    "Load the run's model.keras outside Keras safe mode (deserialises lambdas: only for files you "
    "trust)"
)


def _describe(report: Any) -> str:
    """The output line: what was written where, from what, and how it was converted."""
    kind = report.format + (f" {report.quantize}" if report.quantize else "")
    lines = [
        f"exported {report.model} (trained on {report.trained_on}; converted on "
        f"{report.converted_on}) as {kind}: {report.path} ({report.bytes:,} bytes)",
        f"metadata {report.sidecar}",
    ]
    t = report.input
    if t.scale is not None:
        lines.append(
            f"input    {t.dtype}, scale {t.scale:.6g}, zero point {t.zero_point}; output "
            f"{report.output.dtype}, scale {report.output.scale:.6g}, zero point "
            f"{report.output.zero_point}"
        )
    if report.calibration is not None:
        n, events = len(report.calibration.windows), report.calibration.events
        lines.append(
            f"int8     calibrated on {n:,} windows of the run's training split ({events:,} with "
            "an event)"
        )
    if report.threshold_note is not None:
        lines.append(f"note     {report.threshold_note}")
    return "\n".join(lines)


@app.command(cls=Command)
@outputs_kept("out", note="nothing half-written is left at --out")
def export(
    run: Annotated[str, typer.Argument(help="A run folder (model.keras + run.json)")],
    format: Annotated[
        str,
        typer.Option(
            "--format",
            help="litert (.tflite), onnx, saved_model (a folder) or c-array (the int8 LiteRT "
            "model as C source)",
        ),
    ] = "litert",
    out: Annotated[
        str | None,
        typer.Option(
            help="Where to write [default: in the run folder: model.tflite, model-int8.tflite, "
            "model-float16.tflite, model.onnx, saved_model/, model-int8.c]; the metadata goes "
            "to PATH.json (chunkfit.json inside a SavedModel folder)"
        ),
    ] = None,
    quantize: Annotated[
        str | None,
        typer.Option(
            help="int8: full-integer, calibrated on windows of the run's training split (litert; "
            "c-array always is); float16: half-size weights (litert) [default: float32]",
            rich_help_panel="Quantisation",
        ),
    ] = None,
    store: Annotated[
        str | None,
        typer.Option(
            help="With --quantize int8: the store the run trained on [default: the one run.json "
            "names]",
            rich_help_panel="Quantisation",
        ),
    ] = None,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace an existing export at --out")
    ] = False,
    unsafe: Annotated[bool, typer.Option("--unsafe", help=UNSAFE_HELP)] = False,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the metadata written, as one JSON object")
    ] = False,
) -> None:
    """Write a run's model for a device: LiteRT, ONNX, a SavedModel or a C array, with the run's
    window, stride, channels, rate, classes and threshold in a JSON file beside it.

    The model takes raw signal (its normalisation is inside), one window per batch row (batch,
    window, channels), and gives the class scores. It is converted on TensorFlow, whichever engine
    trained it.
    """
    from ..export import export_run, read_sidecar

    report = export_run(
        run,
        format,
        out=out,
        quantize=quantize,
        store=store,
        overwrite=overwrite,
        unsafe=unsafe,
    )
    if json_out:
        typer.echo(json.dumps(read_sidecar(report.sidecar), indent=2))
    else:
        typer.echo(_describe(report))
