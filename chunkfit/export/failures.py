"""A model that a format cannot hold, said in one line: the op or layer and the format.

The converters report such models with long exceptions (LiteRT's MLIR diagnostics, tf2onnx's log
lines and a model that ONNX Runtime then refuses). What a user can act on is the op's name and the
layer it came from: their own layer to rewrite, or another format to pick.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..errors import ModelError

if TYPE_CHECKING:
    import keras

FORMAT_NAMES = {
    "litert": "LiteRT",
    "c-array": "LiteRT",
    "onnx": "ONNX",
    "saved_model": "SavedModel",
}

# LiteRT's converter: "TF Select ops: Cumprod", "Custom ops: BesselI0e" (a comma-separated list)
_LITERT_OPS = re.compile(r"^(?:TF Select ops|Custom ops): (.+)$", re.M)
# ... and where each came from: fused["BesselI0e:", "model_1/layer_1/BesselI0e@__inference_..."]
_LITERT_LOC = re.compile(r'fused\["(\w+):", "([^"@]+)@')


def layer_names(model: keras.Model) -> dict[str, str]:
    """Every layer of ``model`` (nested models included) by name: its class name."""
    out: dict[str, str] = {}
    stack: list[Any] = list(getattr(model, "layers", []))
    while stack:
        layer = stack.pop()
        out.setdefault(layer.name, type(layer).__name__)
        stack.extend(getattr(layer, "layers", []))
    return out


def layer_of(path: str, layers: dict[str, str]) -> str | None:
    """The innermost layer named in a traced op's path (``outer_1/inner_1/my_layer_1/Op``): the
    trace adds ``_1`` to each scope, so a name is tried with and without it."""
    for part in reversed(path.split("/")[:-1]):
        for name in (part, re.sub(r"_1$", "", part)):
            if name in layers:
                return f"layer {name!r} ({layers[name]})"
    return None


def _ops_text(ops: Iterable[tuple[str, str | None]]) -> str:
    seen: dict[str, str | None] = {}
    for op, where in ops:
        if seen.get(op) is None:
            seen[op] = where
    return ", ".join(f"op {op}" + (f" in {w}" if w else "") for op, w in seen.items())


def litert_failure(err: BaseException, model: keras.Model, fmt: str) -> ModelError:
    """The one line for a LiteRT conversion that failed."""
    text = str(err)
    layers = layer_names(model)
    named = [op.strip() for m in _LITERT_OPS.finditer(text) for op in m.group(1).split(",")]
    where = {op: layer_of(path, layers) for op, path in _LITERT_LOC.findall(text)}
    if named:
        ops = _ops_text((op, where.get(op)) for op in named if op)
        return ModelError(
            f"the model cannot be exported to {FORMAT_NAMES[fmt]}: {ops} is not among LiteRT's "
            "built-in ops; rewrite that layer with built-in Keras layers, or use --format "
            "saved_model"
        )
    return conversion_failure(err, fmt)


def onnx_failure(ops: list[tuple[str, str]], model: keras.Model) -> ModelError:
    """The one line for ONNX nodes that tf2onnx left as TensorFlow ops (``(op, node name)``)."""
    layers = layer_names(model)
    text = _ops_text((op, layer_of(name, layers)) for op, name in ops)
    return ModelError(
        f"the model cannot be exported to ONNX: {text} has no ONNX equivalent; rewrite that layer "
        "with built-in Keras layers, or use --format saved_model"
    )


def conversion_failure(err: BaseException, fmt: str) -> ModelError:
    """Any other converter failure: its type and first meaningful line."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    first = lines[0][:300] if lines else ""
    return ModelError(
        f"the model cannot be exported to {FORMAT_NAMES[fmt]} ({type(err).__name__}: {first})"
    )
