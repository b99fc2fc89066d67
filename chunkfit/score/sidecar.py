"""An exported model's sidecar: the JSON ``chunkfit export`` writes beside it, read for scoring.

A file artifact ``PATH`` (``model.tflite``, ``model.onnx``, a C array) has its sidecar at
``PATH.json``; a SavedModel folder holds it as ``chunkfit.json``. The sidecar carries the run's
run.json verbatim under ``"run"``, so an exported model is scored with the window, stride, label
rule, classes and channels of the run it came from, and with the threshold the export wrote down.
Reading it needs no runtime: a wrong path is refused before LiteRT, ONNX Runtime or TensorFlow load.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import UsageError

# The sidecar's contract, shared with chunkfit.export, which writes it.
SIDECAR_VERSION = 1
SAVED_MODEL_SIDECAR = "chunkfit.json"  # inside a SavedModel folder

# What each file suffix holds; a folder with saved_model.pb is a SavedModel.
SUFFIXES = {
    ".tflite": "litert",
    ".onnx": "onnx",
    ".cc": "c-array",
    ".c": "c-array",
    ".h": "c-array",
}
FORMATS = ("litert", "onnx", "saved_model", "c-array")  # what chunkfit export writes


def exported_kind(path: Path) -> str | None:
    """The format of the exported model at ``path`` ("litert", "onnx", "saved_model",
    "c-array"), or None when it is no exported model (a run folder, a ``.keras`` file)."""
    if path.is_dir():
        return "saved_model" if (path / "saved_model.pb").is_file() else None
    return SUFFIXES.get(path.suffix.lower())


def sidecar_path(path: Path) -> Path:
    """Where the sidecar of the exported model at ``path`` lives."""
    if path.is_dir():
        return path / SAVED_MODEL_SIDECAR
    return path.with_name(path.name + ".json")


def read_sidecar(path: Path) -> dict[str, Any]:
    """The sidecar of the exported model at ``path``, checked; a missing or foreign one is refused
    in one line that says how to make it."""
    if not path.exists():
        raise UsageError(f"{path}: no such exported model, run folder or .keras file")
    side = sidecar_path(path)
    remake = (
        f"export the run again with chunkfit export RUN --format {exported_kind(path)} "
        f"--out {path}, which writes it"
    )
    if not side.is_file():
        raise UsageError(
            f"{path}: the exported model's metadata {side.name} is missing beside it (window, "
            f"channels, threshold and the run it came from); {remake}"
        )
    try:
        meta = json.loads(side.read_text())
    except (ValueError, UnicodeDecodeError) as err:
        raise UsageError(f"{side}: not a chunkfit export's metadata ({err}); {remake}") from None
    if not isinstance(meta, dict) or meta.get("chunkfit_export") is None:
        raise UsageError(f"{side}: not a chunkfit export's metadata (no chunkfit_export); {remake}")
    if meta.get("chunkfit_export") != SIDECAR_VERSION:
        raise UsageError(
            f"{side}: metadata version {meta.get('chunkfit_export')!r}, and this chunkfit reads "
            f"version {SIDECAR_VERSION}; {remake}"
        )
    if not isinstance(meta.get("run"), dict):
        raise UsageError(f"{side}: the metadata holds no run (its run.json); {remake}")
    if meta.get("format") not in FORMATS:
        raise UsageError(
            f"{side}: format {meta.get('format')!r} is not one of {', '.join(FORMATS)}; {remake}"
        )
    return meta


def run_meta(sidecar: dict[str, Any]) -> dict[str, Any]:
    """The run's run.json as scoring reads it, with the threshold the export wrote down (the
    device fires at that one, so scoring here does too)."""
    meta = dict(sidecar["run"])
    value = sidecar.get("threshold")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        chosen = meta.get("threshold")
        rule = chosen.get("rule", "f1") if isinstance(chosen, dict) else "f1"
        meta["threshold"] = {**(chosen if isinstance(chosen, dict) else {}), "value": float(value)}
        if not isinstance(chosen, dict) or chosen.get("value") != value:
            meta["threshold"]["rule"] = f"{rule}, as exported"
    return meta
