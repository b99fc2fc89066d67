"""What ``chunkfit export`` can write: the formats, the quantisations each allows, the default file
names, and the packages each needs. Pure settings: nothing here imports TensorFlow.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

from ..errors import MissingExtraError, UsageError
from ..score.sidecar import FORMATS, SAVED_MODEL_SIDECAR

QUANTIZE = ("int8", "float16")
EXTRA_HINT = "install it with pip install 'chunkfit[export]'"


@dataclasses.dataclass(frozen=True)
class Target:
    """One export asked for: a format and its quantisation (None: float32)."""

    format: str
    quantize: str | None

    @property
    def folder(self) -> bool:
        """Whether the artifact is a folder (a SavedModel) rather than one file."""
        return self.format == "saved_model"

    @property
    def suffix(self) -> str:
        return {"litert": ".tflite", "onnx": ".onnx", "saved_model": "", "c-array": ".c"}[
            self.format
        ]

    @property
    def default_name(self) -> str:
        """The artifact's name in the run folder: ``model.tflite``, ``model-int8.tflite``,
        ``model.onnx``, ``saved_model``, ``model-int8.c``."""
        if self.folder:
            return "saved_model"
        tag = f"-{self.quantize}" if self.quantize is not None else ""
        return f"model{tag}{self.suffix}"

    def sidecar(self, artifact: Path) -> Path:
        """Where the metadata of ``artifact`` goes: ``PATH.json`` beside a file, ``chunkfit.json``
        inside a SavedModel folder."""
        if self.folder:
            return artifact / SAVED_MODEL_SIDECAR
        return artifact.with_name(artifact.name + ".json")


def target(fmt: str, quantize: str | None) -> Target:
    """The export asked for, or a usage error naming what cannot be combined."""
    if fmt not in FORMATS:
        raise UsageError(f"--format must be one of {', '.join(FORMATS)} (received {fmt!r})")
    if quantize is not None and quantize not in QUANTIZE:
        raise UsageError(f"--quantize must be int8 or float16 (received {quantize!r})")
    if fmt == "c-array":
        if quantize == "float16":
            raise UsageError(
                "--format c-array writes the int8 LiteRT model for a microcontroller; drop "
                "--quantize float16 (c-array is always --quantize int8)"
            )
        return Target(fmt, "int8")
    if quantize is not None and fmt == "saved_model":
        raise UsageError(
            f"--quantize {quantize} does not apply to --format saved_model (a SavedModel is the "
            "float model); use --format litert to quantise"
        )
    if quantize is not None and fmt == "onnx":
        raise UsageError(
            f"--quantize {quantize} is not supported for --format onnx; export the float model, or "
            "use --format litert for int8 and float16"
        )
    return Target(fmt, quantize)


def check_out(tgt: Target, out: Path) -> None:
    """Refuse an ``--out`` whose name does not say its format (how the scoring side tells them
    apart)."""
    if tgt.folder:
        if out.suffix in (".tflite", ".onnx", ".c", ".json", ".keras"):
            raise UsageError(
                f"--out {out}: a SavedModel is a folder; give a folder name without {out.suffix}"
            )
        return
    if out.suffix != tgt.suffix:
        raise UsageError(
            f"--out {out}: a {tgt.format} file ends in {tgt.suffix}; rename it (e.g. "
            f"{out.with_suffix(tgt.suffix).name})"
        )


# the packages each format needs beyond TensorFlow, by import name and as pip names them
_NEEDS = {
    "litert": (("ai_edge_litert", "ai-edge-litert"),),
    "c-array": (("ai_edge_litert", "ai-edge-litert"),),
    "onnx": (("tf2onnx", "tf2onnx"), ("onnx", "onnx"), ("onnxruntime", "onnxruntime")),
    "saved_model": (),
}


def check_extra(fmt: str) -> None:
    """Refuse a format whose packages (the ``export`` extra) are missing, before anything loads."""
    for module, package in _NEEDS[fmt]:
        if importlib.util.find_spec(module) is None:
            raise MissingExtraError(f"--format {fmt} needs the {package} package; {EXTRA_HINT}")
