"""The run's model as an ONNX file, through tf2onnx on the frozen TensorFlow graph.

Keras's ``model.export(format="onnx")`` hands tf2onnx the traced function with its captured
tensors counted as inputs: the constants of chunkfit's normalisation layer (mean and scale) come
out as two extra graph inputs that ONNX Runtime then asks to be fed. Freezing the function first
(variables and captured constants folded in) and converting that graph gives one input, the raw
window, as the run's model takes it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .._quiet import Silenced
from .failures import conversion_failure, onnx_failure
from .meta import TensorInfo

if TYPE_CHECKING:
    import keras

INPUT_NAME = "signal"
OUTPUT_NAME = "scores"

_DTYPES = {"tensor(float)": "float32", "tensor(double)": "float64", "tensor(int8)": "int8"}


def write_onnx(model: keras.Model, path: Path) -> tuple[TensorInfo, TensorInfo]:
    """Write ``model`` to ``path`` (float32, dynamic batch); its input and output as ONNX Runtime
    reports them."""
    import onnx
    import tensorflow as tf
    import tf2onnx
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    window, channels = (int(d) for d in model.inputs[0].shape[1:])
    spec = tf.TensorSpec([None, window, channels], tf.float32, name=INPUT_NAME)
    try:
        with Silenced(2):  # tf2onnx logs what it cannot convert; the error says it in one line
            function = tf.function(lambda x: model(x, training=False), input_signature=[spec])
            frozen = convert_variables_to_constants_v2(function.get_concrete_function())
            inputs = [t.name for t in frozen.inputs]
            outputs = [t.name for t in frozen.outputs]
            proto, _ = tf2onnx.convert.from_graph_def(
                frozen.graph.as_graph_def(),
                input_names=inputs,
                output_names=outputs,
                tensors_to_rename={inputs[0]: INPUT_NAME, outputs[0]: OUTPUT_NAME},
            )
    except Exception as err:  # noqa: BLE001 - tracing and tf2onnx raise many types
        raise conversion_failure(err, "onnx") from None
    left = [
        (node.op_type, node.name)
        for node in proto.graph.node
        if not onnx.defs.has(node.op_type, node.domain or "")
    ]
    if left:
        raise onnx_failure(left, model)
    onnx.save_model(proto, str(path))
    return describe_onnx(path)


def describe_onnx(path: Path) -> tuple[TensorInfo, TensorInfo]:
    """The input and output of an ``.onnx`` file, after one window ran through ONNX Runtime."""
    import onnxruntime as ort

    try:
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        first = session.get_inputs()[0]
        shape = [1 if not isinstance(d, int) else d for d in first.shape]
        session.run(None, {first.name: np.zeros(shape, np.float32)})
    except Exception as err:  # noqa: BLE001 - ONNX Runtime refuses a file in many ways
        raise conversion_failure(err, "onnx") from None
    return _tensor(first), _tensor(session.get_outputs()[0])


def _tensor(arg: object) -> TensorInfo:
    shape = getattr(arg, "shape", None)
    return TensorInfo(
        name=str(getattr(arg, "name", "")),
        shape=None if shape is None else tuple(d if isinstance(d, int) else None for d in shape),
        dtype=_DTYPES.get(str(getattr(arg, "type", "")), str(getattr(arg, "type", ""))),
    )
