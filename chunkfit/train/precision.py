"""The arithmetic a run trains in: float32, or Keras's ``mixed_bfloat16`` policy (layers compute in
bfloat16, variables stay float32), and the float32 model it saves either way.

bfloat16 pays only on CPUs with bfloat16 instructions (AMX, AVX512-BF16: oneDNN runs
convolutions and matrix products in them); elsewhere it emulates them and runs far slower. So
``--precision auto`` (chunkfit.train.choice) measures it only where ``/proc/cpuinfo`` lists
``amx_bf16`` or ``avx512_bf16``, and keeps it only when it trained faster and its held-out figures
on the measurement's short trial stayed within ``LOSS_TOLERANCE`` and ``ACCURACY_TOLERANCE`` of
float32's. The saved model.keras is float32 (``float32_model``): what scores a run never depends
on how it was trained.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import keras

PRECISIONS = ("auto", "float32", "bfloat16")
POLICY = {"float32": "float32", "bfloat16": "mixed_bfloat16"}
BF16_FLAGS = ("amx_bf16", "avx512_bf16")
LOSS_TOLERANCE = 0.05  # bfloat16's held-out loss at most this share above float32's
ACCURACY_TOLERANCE = 0.02  # and its accuracy at most this much below


def bf16_flags() -> list[str]:
    """The bfloat16 instruction sets this CPU lists (Linux; elsewhere none are known)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    for line in text.splitlines():
        if line.startswith("flags"):
            have = set(line.split(":", 1)[1].split())
            return [f for f in BF16_FLAGS if f in have]
    return []


def set_policy(precision: str) -> None:
    """Make ``precision`` Keras's global dtype policy: layers built from now on compute in it.

    float32 is Keras's default: with Keras not yet imported there is nothing to set, and importing
    it here would load TensorFlow before the engine has chosen its threads (which must come first).
    """
    if precision == "float32" and "keras" not in sys.modules:
        return
    import keras

    if keras.config.dtype_policy().name != POLICY[precision]:
        keras.config.set_dtype_policy(POLICY[precision])


def current_precision() -> str:
    """The precision Keras's global policy computes in now ("float32" while Keras is not imported:
    its default), without importing Keras."""
    if "keras" not in sys.modules:
        return "float32"
    name = sys.modules["keras"].config.dtype_policy().name
    return next((p for p, policy in POLICY.items() if policy == name), name)


def within_tolerance(float32: list[float], bfloat16: list[float]) -> bool:
    """Whether bfloat16's held-out ``[loss, accuracy]`` stays within the tolerances of float32's."""
    loss32, acc32 = float32
    loss16, acc16 = bfloat16
    return loss16 <= loss32 * (1 + LOSS_TOLERANCE) and acc16 >= acc32 - ACCURACY_TOLERANCE


def float32_model(model: keras.Model) -> keras.Model:
    """``model`` rebuilt with every layer in float32 and its weights copied, not compiled: the model
    a bfloat16 run saves and scores with. A model already in float32 is returned as it is."""
    import keras

    config = keras.saving.serialize_keras_object(model)
    changed = _to_float32(config)
    if not changed:
        return model
    before = keras.config.dtype_policy()
    keras.config.set_dtype_policy("float32")
    try:
        copy = keras.saving.deserialize_keras_object(config)
    finally:
        keras.config.set_dtype_policy(before)
    copy.set_weights(model.get_weights())
    return copy


def _to_float32(node: Any) -> bool:
    """Rewrite every mixed dtype policy in a serialised model to float32; whether one was."""
    changed = False
    if isinstance(node, dict):
        # the copy scores; it is not trained on (and a compiled AUC does not round-trip here)
        node.pop("compile_config", None)
        if node.get("class_name") == "DTypePolicy" and isinstance(node.get("config"), dict):
            if node["config"].get("name", "float32") != "float32":
                node["config"]["name"] = "float32"
                changed = True
        for value in node.values():
            changed = _to_float32(value) or changed
    elif isinstance(node, list):
        for value in node:
            changed = _to_float32(value) or changed
    return changed
