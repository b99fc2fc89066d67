"""What a run carries across a crash, on the Keras side: capture it into arrays and JSON, put it
back.

- every model variable (weights, non-trainable state, ``SeedGenerator`` states of layers such as
  Dropout) and every optimizer variable (iterations, learning rate, slots);
- the running metric totals of the unfinished epoch (what ``BlockBridge`` carries between blocks);
- the state of the run's callbacks that keep some between epochs: EarlyStopping, ReduceLROnPlateau,
  ModelCheckpoint, and any callback with ``get_state() -> dict`` / ``set_state(dict)``;
- the global random states: Python's, numpy's and Keras's global SeedGenerator.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import IncompatibleError, ModelError

if TYPE_CHECKING:
    import keras

# Attributes each Keras callback resets in on_train_begin (or keeps from __init__) and changes per
# epoch.
_CALLBACK_ATTRS: dict[str, tuple[str, ...]] = {
    "EarlyStopping": ("wait", "stopped_epoch", "best", "best_epoch"),
    "ReduceLROnPlateau": ("wait", "best", "cooldown_counter"),
    "ModelCheckpoint": ("best",),
}


def build(
    model: keras.Model, window: int, n_channels: int, n_classes: int, *, picker: bool = False
) -> None:
    """Create now the variables Keras creates in the first training step (metric totals, optimizer
    slots).

    Keras builds them while tracing the train function, after the first batch has begun: too late
    for a resumed run to put its metric totals back. Only shapes are traced here; nothing is
    computed.
    """
    symbolic_build = getattr(model, "_symbolic_build", None)  # private Keras 3 API (3.15 has it)
    if symbolic_build is None:
        raise ModelError(
            "this Keras version cannot build a model's metrics before training (no "
            "Model._symbolic_build); "
            "resuming was tested with Keras 3.15; use a Keras that has it, or pass --restart"
        )
    x = np.zeros((1, window, n_channels), dtype=np.float32)
    # a picker (or any model scoring each sample: a resumed one) has per-sample targets
    per_sample = picker or len(getattr(model, "output_shape", ())) == 3
    y = np.zeros((1, window, 1) if per_sample else (1, n_classes), dtype=np.float32)
    symbolic_build(data_batch=(x, y))


def model_arrays(model: keras.Model) -> dict[str, np.ndarray]:
    """Every model and optimizer variable, as ``model.<i>`` and ``optimizer.<i>``."""
    optimizer = model.optimizer
    if not optimizer.built:
        optimizer.build(model.trainable_variables)
    out = {f"model.{i}": np.array(v.numpy()) for i, v in enumerate(model.variables)}
    out.update({f"optimizer.{i}": np.array(v.numpy()) for i, v in enumerate(optimizer.variables)})
    return out


def set_model_arrays(model: keras.Model, arrays: dict[str, np.ndarray], where: str) -> None:
    """Put back what ``model_arrays`` captured; refuse a checkpoint made for another model."""
    optimizer = model.optimizer
    if not optimizer.built:
        optimizer.build(model.trainable_variables)
    for prefix, variables in (("model", model.variables), ("optimizer", optimizer.variables)):
        saved = _numbered(arrays, prefix)
        shapes = [tuple(v.shape) for v in variables]
        if [a.shape for a in saved] != shapes:
            raise IncompatibleError(
                f"{where}: the checkpoint's {prefix} variables do not fit this model ({len(saved)} "
                "saved, "
                f"{len(shapes)} in the model, or of other shapes); resume with the model the run "
                "was made with, or pass --restart"
            )
        for var, value in zip(variables, saved, strict=True):
            var.assign(value)


def metric_arrays(state: list[np.ndarray] | None) -> dict[str, np.ndarray]:
    return {f"metrics.{i}": a for i, a in enumerate(state or [])}


def metrics_from(arrays: dict[str, np.ndarray]) -> list[np.ndarray] | None:
    return _numbered(arrays, "metrics") or None


def callback_state(
    callbacks: Sequence[keras.callbacks.Callback],
) -> tuple[list[dict[str, Any]], dict[str, np.ndarray]]:
    """JSON state and arrays (EarlyStopping's best weights) of the callbacks that keep state."""
    states: list[dict[str, Any]] = []
    arrays: dict[str, np.ndarray] = {}
    for i, cb in enumerate(callbacks):
        kind = _kind(cb)
        if kind is None:
            continue
        if kind == "get_state":
            states.append({"index": i, "class": type(cb).__name__, "state": cb.get_state()})  # type: ignore[attr-defined]
            continue
        attrs = {name: _scalar(getattr(cb, name, None)) for name in _CALLBACK_ATTRS[kind]}
        best_weights = getattr(cb, "best_weights", None)
        if best_weights is not None:
            arrays.update({f"callback{i}.{j}": np.asarray(w) for j, w in enumerate(best_weights)})
        states.append(
            {
                "index": i,
                "class": type(cb).__name__,
                "attrs": attrs,
                "best_weights": best_weights is not None,
            }
        )
    return states, arrays


def set_callback_state(
    callbacks: Sequence[keras.callbacks.Callback],
    states: list[dict[str, Any]],
    arrays: dict[str, np.ndarray],
    where: str,
) -> None:
    """Put back ``callback_state``; refuse callbacks other than those the run was made with."""
    stateful = [(i, type(cb).__name__) for i, cb in enumerate(callbacks) if _kind(cb) is not None]
    saved = [(s["index"], s["class"]) for s in states]
    if stateful != saved:
        raise IncompatibleError(
            f"{where}: the run was made with the callbacks {_names(saved)}, this call passes "
            f"{_names(stateful)}; "
            "pass the same callbacks to resume it, or start over with resume='restart'"
        )
    for s in states:
        cb = callbacks[s["index"]]
        if "state" in s:
            cb.set_state(s["state"])  # type: ignore[attr-defined]
            continue
        for name, value in s["attrs"].items():
            setattr(cb, name, value)
        if s["best_weights"]:
            cb.best_weights = _numbered(arrays, f"callback{s['index']}")  # type: ignore[attr-defined]


def rng_state() -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Python's and numpy's global random states and Keras's global SeedGenerator, if one was
    made."""
    version, mt, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "python": [version, list(mt), gauss],
        "numpy": [kind, int(pos), int(has_gauss), float(cached)],
    }
    arrays = {"rng.numpy": np.asarray(keys)}
    generator = _keras_global_generator()
    if generator is not None:
        arrays["rng.keras"] = np.array(generator.state.numpy())
    return state, arrays


def set_rng_state(state: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    version, mt, gauss = state["python"]
    random.setstate((version, tuple(mt), gauss))
    kind, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, arrays["rng.numpy"], pos, has_gauss, cached))
    if "rng.keras" in arrays:
        from keras.src.random.seed_generator import global_seed_generator

        global_seed_generator().state.assign(arrays["rng.keras"])


def _keras_global_generator() -> Any:
    try:
        from keras.src.backend.common import global_state
        from keras.src.random.seed_generator import GLOBAL_SEED_GENERATOR
    except ImportError:  # a Keras that moved it: such models are then resumed without it
        return None
    return global_state.get_global_attribute(GLOBAL_SEED_GENERATOR)


def _kind(cb: keras.callbacks.Callback) -> str | None:
    import keras

    if callable(getattr(cb, "get_state", None)) and callable(getattr(cb, "set_state", None)):
        return "get_state"
    for name in _CALLBACK_ATTRS:
        if isinstance(cb, getattr(keras.callbacks, name)):
            return name
    return None


def _numbered(arrays: dict[str, np.ndarray], prefix: str) -> list[np.ndarray]:
    out: list[np.ndarray] = []
    while f"{prefix}.{len(out)}" in arrays:
        out.append(arrays[f"{prefix}.{len(out)}"])
    return out


def _scalar(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return float(np.asarray(value))


def _names(pairs: list[tuple[int, str]]) -> str:
    return ", ".join(name for _, name in pairs) or "(none that keep state)"
