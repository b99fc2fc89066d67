"""The run's model as a LiteRT flatbuffer (``.tflite``): float32, float16 weights, or full int8.

Keras's own ``model.export(format="litert")`` traces the model into a SavedModel and runs
TensorFlow's LiteRT converter on it (``TFLiteConverter.from_keras_model`` fails on Keras 3,
keras#18430). chunkfit allows LiteRT's built-in ops only, not Keras's default fallback to
TensorFlow ops (SELECT_TF_OPS): the interpreter on a device, and ``ai-edge-litert``'s, has no
TensorFlow kernels, so a model needing one is refused at export rather than on the device.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .._quiet import Silenced
from .failures import conversion_failure, litert_failure
from .meta import TensorInfo

if TYPE_CHECKING:
    import keras

Representative = Callable[[], Iterator[list[np.ndarray]]]


def converter_settings(
    quantize: str | None, representative: Representative | None
) -> dict[str, Any]:
    """The LiteRT converter's settings for a quantisation (``model.export`` passes them on)."""
    import tensorflow as tf

    builtins = tf.lite.OpsSet.TFLITE_BUILTINS
    if quantize is None:
        return {"target_spec": {"supported_ops": [builtins]}}
    if quantize == "float16":
        return {
            "target_spec": {"supported_ops": [builtins], "supported_types": [tf.float16]},
            "optimizations": [tf.lite.Optimize.DEFAULT],
        }
    # full-integer: every op int8, the input and output too (a microcontroller has no float)
    return {
        "target_spec": {"supported_ops": [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]},
        "optimizations": [tf.lite.Optimize.DEFAULT],
        "representative_dataset": representative,
        "inference_input_type": tf.int8,
        "inference_output_type": tf.int8,
    }


def write_litert(
    model: keras.Model,
    path: Path,
    *,
    fmt: str,
    quantize: str | None,
    representative: Representative | None = None,
    batch: int | None = None,
) -> tuple[TensorInfo, TensorInfo]:
    """Write ``model`` to ``path`` (ending in .tflite); its input and output as the interpreter
    reports them.

    ``batch`` None leaves the batch dimension dynamic (the interpreter resizes it); 1 fixes it, as
    a microcontroller's interpreter needs.
    """
    import tensorflow as tf

    window, channels = (int(d) for d in model.inputs[0].shape[1:])
    spec = tf.TensorSpec([batch, window, channels], tf.float32, name="signal")
    settings = converter_settings(quantize, representative)
    try:
        with Silenced(2):  # the converter's MLIR diagnostics: the error says it in one line
            model.export(
                str(path), format="litert", verbose=False, input_signature=[spec], **settings
            )
    except Exception as err:  # noqa: BLE001 - the converter raises many types for one model it cannot hold
        raise litert_failure(err, model, fmt) from None
    return describe_litert(path, fmt)


def describe_litert(path: Path, fmt: str) -> tuple[TensorInfo, TensorInfo]:
    """The input and output of a ``.tflite`` file, after one window ran through LiteRT's own
    interpreter (the file is known to load and run where it will be used)."""
    from ai_edge_litert.interpreter import Interpreter

    try:
        with Silenced(2):  # the interpreter's notice of its CPU delegate
            interpreter = Interpreter(model_path=str(path))
            interpreter.allocate_tensors()
            first = interpreter.get_input_details()[0]
            interpreter.set_tensor(first["index"], np.zeros(first["shape"], first["dtype"]))
            interpreter.invoke()
    except Exception as err:  # noqa: BLE001 - the interpreter refuses a file in many ways
        raise conversion_failure(err, fmt) from None
    return _tensor(first), _tensor(interpreter.get_output_details()[0])


def _tensor(details: dict[str, Any]) -> TensorInfo:
    scale, zero_point = details.get("quantization", (0.0, 0))
    signature = details.get("shape_signature", details["shape"])
    quantized = bool(scale)
    return TensorInfo(
        name=str(details["name"]),
        shape=tuple(None if int(d) < 0 else int(d) for d in signature),
        dtype=np.dtype(details["dtype"]).name,
        scale=float(scale) if quantized else None,
        zero_point=int(zero_point) if quantized else None,
    )
