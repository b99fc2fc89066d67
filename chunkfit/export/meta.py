"""The metadata written beside an exported model: what the device side must feed it and how to read
its outputs, without chunkfit.

A JSON sidecar: ``PATH.json`` beside a file artifact (``model.tflite.json``, ``model.onnx.json``,
``model-int8.c.json``), ``chunkfit.json`` inside a SavedModel folder. Its keys (``SIDECAR_KEYS``)
are a contract: ``chunkfit predict`` and ``evaluate`` read them to score with an exported file, and
``run`` holds the run's run.json verbatim so window, stride, label rule and classes are rebuilt
exactly as from the run folder (its NaN figures, if any, as null: the sidecar is strict JSON).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from .._version import __version__
from ..errors import RunError
from ..score.sidecar import SIDECAR_VERSION

SIDECAR_KEYS = (
    "chunkfit_export",
    "format",
    "file",
    "quantize",
    "model",
    "trained_on",
    "converted_on",
    "window",
    "stride",
    "channels",
    "n_channels",
    "rate",
    "classes",
    "positive",
    "threshold",
    "label",
    "output_kind",
    "input",
    "output",
    "normalization",
    "chunkfit_version",
    "run",
)


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """An input or output of an exported model as its runtime reports it.

    ``shape`` has None where a dimension is dynamic (the batch); ``scale`` and ``zero_point`` are
    set for an integer tensor (real value = scale * (q - zero_point)), else None.
    """

    name: str
    shape: tuple[int | None, ...] | None
    dtype: str
    scale: float | None = None
    zero_point: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "shape": None if self.shape is None else list(self.shape),
            "dtype": self.dtype,
            "scale": self.scale,
            "zero_point": self.zero_point,
        }


@dataclasses.dataclass(frozen=True)
class RunFacts:
    """What the sidecar says of the run, read from its run.json and its loaded model."""

    model: str
    trained_on: str
    window: int
    stride: int
    channels: list[str]
    n_channels: int
    rate: float | None
    classes: list[int]
    positive: int  # the event score's index on the output's last axis
    threshold: float
    label: str
    output_kind: str  # "window" or "per-sample"
    run: dict[str, Any]


def sidecar(
    facts: RunFacts,
    *,
    fmt: str,
    file: str,
    quantize: str | None,
    inputs: TensorInfo,
    output: TensorInfo,
) -> dict[str, Any]:
    """The sidecar's JSON object, keys in ``SIDECAR_KEYS`` order."""
    return {
        "chunkfit_export": SIDECAR_VERSION,
        "format": fmt,
        "file": file,
        "quantize": quantize,
        "model": facts.model,
        "trained_on": facts.trained_on,
        "converted_on": "tensorflow",
        "window": facts.window,
        "stride": facts.stride,
        "channels": list(facts.channels),
        "n_channels": facts.n_channels,
        "rate": facts.rate,
        "classes": list(facts.classes),
        "positive": facts.positive,
        "threshold": facts.threshold,
        "label": facts.label,
        "output_kind": facts.output_kind,
        "input": inputs.to_dict(),
        "output": output.to_dict(),
        "normalization": "inside",
        "chunkfit_version": __version__,
        "run": facts.run,
    }


def write_sidecar(path: Path, data: dict[str, Any]) -> None:
    """Strict JSON, for any parser on the device side: a NaN or infinity (a figure run.json could
    not compute) is written as null."""
    path.write_text(json.dumps(_finite(data), indent=2, allow_nan=False) + "\n")


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def read_sidecar(path: Path) -> dict[str, Any]:
    """The sidecar at ``path``, checked to be one (its version and keys)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError) as err:
        raise RunError(f"{path}: not a readable chunkfit export sidecar ({err})") from None
    if not isinstance(data, dict) or data.get("chunkfit_export") != SIDECAR_VERSION:
        raise RunError(
            f'{path}: not a chunkfit export sidecar (no "chunkfit_export": {SIDECAR_VERSION}); '
            "export the run again with chunkfit export"
        )
    missing = [k for k in SIDECAR_KEYS if k not in data]
    if missing:
        raise RunError(f"{path}: the export sidecar lacks {', '.join(missing)}; export again")
    return data
