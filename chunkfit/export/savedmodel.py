"""The run's model as a TensorFlow SavedModel folder, through Keras's own
``model.export(format="tf_saved_model")``: one ``serve`` endpoint and the ``serving_default``
signature, taking the raw window as ``signal`` and giving the scores as ``output_0``. The folder is
loaded back and one window of zeros run through its signature before it is kept."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._quiet import Silenced
from .failures import conversion_failure
from .meta import TensorInfo

if TYPE_CHECKING:
    import keras

INPUT_NAME = "signal"
SIGNATURE = "serving_default"


def write_saved_model(model: keras.Model, path: Path) -> tuple[TensorInfo, TensorInfo]:
    """Write ``model`` as a SavedModel folder at ``path``; its signature's input and output."""
    import tensorflow as tf

    window, channels = (int(d) for d in model.inputs[0].shape[1:])
    spec = tf.TensorSpec([None, window, channels], tf.float32, name=INPUT_NAME)
    try:
        with Silenced(2):
            model.export(str(path), format="tf_saved_model", verbose=False, input_signature=[spec])
            signature = tf.saved_model.load(str(path)).signatures[SIGNATURE]
            signature(**{INPUT_NAME: tf.zeros([1, window, channels], tf.float32)})
    except Exception as err:  # noqa: BLE001 - tracing raises many types for a model it cannot hold
        raise conversion_failure(err, "saved_model") from None
    _, kwargs = signature.structured_input_signature
    (name, out_spec), *_ = sorted(signature.structured_outputs.items())
    return _tensor(INPUT_NAME, kwargs[INPUT_NAME]), _tensor(name, out_spec)


def _tensor(name: str, spec: Any) -> TensorInfo:
    return TensorInfo(
        name=name,
        shape=tuple(None if d is None else int(d) for d in spec.shape),
        dtype=spec.dtype.name,
    )
