"""Scoring with an exported model in the runtime made for it: what will run on the device.

``chunkfit export`` writes a LiteRT flatbuffer, an ONNX file, a SavedModel folder or a C array,
with a sidecar that carries the run's settings (chunkfit.score.sidecar). ``ExportedPredictor`` has
the call of the engines' predictors (chunkfit.core.scoring.Predictor), so evaluate and predict
score through it unchanged: windows are gathered from the block's raw samples with a strided view,
quantised with the input's scale and zero point for an integer model, run through the runtime in
batches of ``batch_size`` (the last one padded with copies of its last window, as the engines do),
and the outputs dequantised back to probabilities.

Each runtime is imported only when its format is scored: LiteRT's interpreter (``ai_edge_litert``)
for ``.tflite`` and C arrays, ONNX Runtime for ``.onnx``, TensorFlow only for a SavedModel. None of
them needs the model's normalisation: it is inside the exported graph (raw signal in).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np

from .._quiet import Silenced
from ..errors import MissingExtraError, ModelError
from .runs import RunFiles, RunSpec, run_spec

# One batch through the runtime: float32 or integer windows [b, window, channels] -> outputs.
Run = Callable[[np.ndarray], np.ndarray]
RUNTIMES = {
    "litert": "LiteRT",
    "c-array": "LiteRT",
    "onnx": "ONNX Runtime",
    "saved_model": "TensorFlow SavedModel",
}


def _missing(path: Path, library: str, what: str) -> MissingExtraError:
    return MissingExtraError(
        f"{path}: scoring {what} needs {library}; install it with pip install 'chunkfit[export]'"
    )


def _threads() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def c_array_bytes(path: Path) -> bytes:
    """The flatbuffer a C source array holds (``xxd -i`` style: ``NAME[] = { 0x.., ... };``)."""
    text = re.sub(r"/\*.*?\*/", "", path.read_text(errors="replace"), flags=re.DOTALL)
    array = re.search(r"\[\s*\]\s*=\s*\{(.*?)\}", text, flags=re.DOTALL)
    found = re.findall(r"0[xX]([0-9a-fA-F]{1,2})", array.group(1)) if array else []
    if not found:
        raise ModelError(f"{path}: holds no C array of bytes; pass the .tflite file instead")
    return bytes(int(h, 16) for h in found)


@dataclasses.dataclass(frozen=True)
class Runtime:
    """One exported model opened in its runtime: shapes, dtypes, quantisation, and ``run``."""

    run: Run
    window: int
    n_channels: int
    out_shape: tuple[int, ...]  # per window: (classes,), or (window, k) for a dense picker
    batch: int | None  # the fixed batch size of the model's input, None where it is free
    in_dtype: np.dtype[Any] = np.dtype(np.float32)
    in_quant: tuple[float, int] | None = None  # (scale, zero point) of an integer input
    out_quant: tuple[float, int] | None = None
    out_dtype: np.dtype[Any] = np.dtype(np.float32)


def _quant(scale: Any, zero: Any) -> tuple[float, int] | None:
    if scale is None or not float(scale):
        return None
    return float(scale), int(zero or 0)


def _side_quant(side: Any) -> tuple[float, int] | None:
    return _quant(side.get("scale"), side.get("zero_point")) if isinstance(side, dict) else None


def _litert(path: Path, sidecar: dict[str, Any], batch_size: int) -> Runtime:
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        raise _missing(path, "LiteRT's interpreter (ai-edge-litert)", "a LiteRT model") from None
    # LiteRT prints its delegate's INFO line on stderr from C++; hidden as TensorFlow's notices are.
    quiet = Silenced() if os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0") != "0" else nullcontext()
    with quiet:
        try:
            if sidecar.get("format") == "c-array" or path.suffix.lower() != ".tflite":
                it = Interpreter(model_content=c_array_bytes(path), num_threads=_threads())
            else:
                it = Interpreter(model_path=str(path), num_threads=_threads())
        except ValueError as err:
            raise ModelError(f"{path}: LiteRT cannot read it ({err}); export it again") from None
        inp, out = it.get_input_details()[0], it.get_output_details()[0]
        batch, window, n_channels = (int(d) for d in inp["shape_signature"])
        if batch == -1:  # free: one resize to the scoring batch
            it.resize_tensor_input(inp["index"], [batch_size, window, n_channels], strict=True)
        it.allocate_tensors()

    def run(x: np.ndarray) -> np.ndarray:
        it.set_tensor(inp["index"], x)
        it.invoke()
        return np.array(it.get_tensor(out["index"]))

    return Runtime(
        run,
        window,
        n_channels,
        tuple(int(d) for d in out["shape_signature"][1:]),
        None if batch == -1 else batch,
        np.dtype(inp["dtype"]),
        _quant(*inp["quantization"]),
        _quant(*out["quantization"]),
        np.dtype(out["dtype"]),
    )


INTEGER_TYPES = {"tensor(int8)": np.int8, "tensor(uint8)": np.uint8}


def _onnx(path: Path, sidecar: dict[str, Any], batch_size: int) -> Runtime:
    try:
        import onnxruntime as ort
    except ImportError:
        raise _missing(path, "ONNX Runtime (onnxruntime)", "an ONNX model") from None
    options = ort.SessionOptions()
    options.intra_op_num_threads = _threads()
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as err:  # onnxruntime raises its own Fail/InvalidGraph, not a base class
        raise ModelError(f"{path}: ONNX Runtime cannot read it ({err}); export it again") from None
    inputs, out = session.get_inputs(), session.get_outputs()[0]
    if len(inputs) != 1:
        raise ModelError(
            f"{path}: the ONNX model takes {len(inputs)} inputs "
            f"({', '.join(i.name for i in inputs)}), and an exported detector takes one, the "
            "window; export it again"
        )
    inp = inputs[0]
    in_type, out_type = INTEGER_TYPES.get(str(inp.type)), INTEGER_TYPES.get(str(out.type))

    def run(x: np.ndarray) -> np.ndarray:
        return np.asarray(session.run([out.name], {inp.name: x})[0])

    return Runtime(
        run,
        int(inp.shape[1]),
        int(inp.shape[2]),
        tuple(d if isinstance(d, int) else -1 for d in out.shape[1:]),
        inp.shape[0] if isinstance(inp.shape[0], int) else None,
        np.dtype(in_type or np.float32),
        _side_quant(sidecar.get("input")) if in_type is not None else None,
        _side_quant(sidecar.get("output")) if out_type is not None else None,
        np.dtype(out_type or np.float32),
    )


def _saved_model(path: Path, sidecar: dict[str, Any], batch_size: int) -> Runtime:
    import tensorflow as tf

    try:
        loaded = tf.saved_model.load(str(path))
    except (OSError, ValueError) as err:
        raise ModelError(f"{path}: TensorFlow cannot load it ({err}); export it again") from None
    signature = loaded.signatures.get("serving_default")
    if signature is None:
        raise ModelError(f"{path}: the SavedModel has no serving_default signature")
    (name, spec), *_ = signature.structured_input_signature[1].items()
    out_name, out_spec = next(iter(signature.structured_outputs.items()))

    def run(x: np.ndarray) -> np.ndarray:
        return np.asarray(signature(**{name: tf.constant(x)})[out_name])

    return Runtime(
        run,
        int(spec.shape[1]),
        int(spec.shape[2]),
        tuple(-1 if d is None else int(d) for d in out_spec.shape[1:]),
        spec.shape[0],
    )


OPENERS = {"litert": _litert, "c-array": _litert, "onnx": _onnx, "saved_model": _saved_model}


def quantize(x: np.ndarray, quant: tuple[float, int], dtype: np.dtype[Any]) -> np.ndarray:
    """Float windows as the integers of a quantised input: round(x / scale) + zero point, clipped
    to the type's range."""
    scale, zero = quant
    info = np.iinfo(dtype)
    q = np.round(x / np.float32(scale)) + zero
    return np.clip(q, info.min, info.max).astype(dtype)


def dequantize(q: np.ndarray, quant: tuple[float, int] | None) -> np.ndarray:
    """Integer outputs back to the floats they stand for: (q - zero point) * scale."""
    if quant is None:
        return q.astype(np.float32, copy=False)
    scale, zero = quant
    return ((q.astype(np.float32) - np.float32(zero)) * np.float32(scale)).astype(np.float32)


class ExportedPredictor:
    """Outputs of an exported model for windows of a block's raw samples, ``batch_size`` at a time
    (the model's own batch size where its input fixes one)."""

    def __init__(self, runtime: Runtime, batch_size: int) -> None:
        self.runtime = runtime
        self.batch_size = runtime.batch if runtime.batch is not None else batch_size
        self.per_sample = len(runtime.out_shape) == 2  # a dense picker: [window, k] per window
        integer = np.issubdtype(runtime.out_dtype, np.integer)
        self.ceiling = (  # the highest score an integer output can give (255/256 for int8)
            float(dequantize(np.asarray(np.iinfo(runtime.out_dtype).max), runtime.out_quant))
            if runtime.out_quant is not None and integer
            else None
        )

    def __call__(self, samples: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """float32 [len(offsets), outputs]: the outputs for the windows
        ``samples[o : o + window]``."""
        rt, b, n = self.runtime, self.batch_size, int(offsets.size)
        # view[o] is samples[o : o + window] as [channels, window]; indexing copies the batch.
        view = np.lib.stride_tricks.sliding_window_view(
            np.asarray(samples, dtype=np.float32), rt.window, axis=0
        )
        padded = np.empty(-(-n // b) * b, dtype=np.int64)
        padded[:n] = offsets
        padded[n:] = offsets[-1] if n else 0
        outs = []
        for i in range(0, padded.size, b):
            x = np.ascontiguousarray(view[padded[i : i + b]].transpose(0, 2, 1))
            if rt.in_quant is not None:
                x = quantize(x, rt.in_quant, rt.in_dtype)
            outs.append(dequantize(rt.run(x), rt.out_quant).reshape(b, -1))
        if not outs:
            return np.zeros((0, int(np.prod(rt.out_shape))), dtype=np.float32)
        return np.concatenate(outs)[:n]


def describe(path: Path, sidecar: dict[str, Any], runtime: Runtime) -> str:
    """``model.tflite (LiteRT int8)``: the file and what scores it, at what precision."""
    fmt = str(sidecar.get("format"))
    if runtime.in_quant is not None:
        precision = runtime.in_dtype.name
    else:
        precision = str(sidecar.get("quantize") or "float32")
    return f"{path.name} ({RUNTIMES.get(fmt, fmt)} {precision})"


def load_exported(files: RunFiles, batch_size: int) -> tuple[RunSpec, ExportedPredictor, str]:
    """The RunSpec, the predictor and its one-line description of an exported model, opened in its
    runtime and checked against its sidecar."""
    sidecar = files.sidecar
    assert sidecar is not None
    fmt = str(sidecar["format"])
    runtime = OPENERS[fmt](files.path, sidecar, batch_size)
    line = describe(files.path, sidecar, runtime)
    per_sample = len(runtime.out_shape) == 2
    n_out = runtime.out_shape[-1]
    for key, got in (("window", runtime.window), ("n_channels", runtime.n_channels)):
        if isinstance(sidecar.get(key), int) and sidecar[key] != got:
            raise ModelError(
                f"{files.path}: its metadata says {key} {sidecar[key]}, and the model takes "
                f"{got}; export the run again"
            )
    spec = run_spec(
        files,
        (runtime.window, runtime.n_channels),
        n_out,
        per_sample,
        "from the export, in its runtime",
    )
    return spec, ExportedPredictor(runtime, batch_size), line
