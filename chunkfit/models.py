"""Models: the built-ins, loading a ``.keras`` file or ``module:function``, and checking the fit.

A model takes windows shaped (batch, window, channels) and returns (batch, classes) class scores
that the one-hot labels are compared with.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import IncompatibleError, ModelError

if TYPE_CHECKING:
    import keras

DEFAULT_MODEL = "baseline-cnn"
DEFAULT_OPTIMIZER = "adam"
DEFAULT_LR = 1e-3
DEFAULT_LOSS = "categorical_crossentropy"


def baseline_cnn(window: int, n_channels: int, n_classes: int) -> keras.Model:
    """The original question's model: Conv1D(24, 9) -> MaxPool(4) -> Dense(20) -> softmax."""
    import keras
    from keras import layers

    return keras.Sequential(
        [
            keras.Input((window, n_channels)),
            layers.Conv1D(24, 9, activation="relu"),
            layers.MaxPooling1D(4),
            layers.Flatten(),
            layers.Dense(20, activation="relu"),
            layers.Dense(n_classes, activation="softmax"),
        ],
        name="baseline_cnn",
    )


def dilated_resnet(window: int, n_channels: int, n_classes: int, filters: int = 32) -> keras.Model:
    """Residual 1-D CNN with dilations 1, 2, 4, 8 (receptive field 67 samples) and global pooling.

    Stronger than the baseline on events whose position in the window varies, at about
    ten times the compute per window.
    """
    import keras
    from keras import layers

    x = keras.Input((window, n_channels))
    h = layers.Conv1D(filters, 7, padding="same", activation="relu")(x)
    for d in (1, 2, 4, 8):
        r = layers.Conv1D(filters, 3, dilation_rate=d, padding="same", activation="relu")(h)
        r = layers.Conv1D(filters, 3, dilation_rate=d, padding="same")(r)
        h = layers.Activation("relu")(layers.Add()([h, r]))
    pooled = layers.Concatenate()([layers.GlobalMaxPooling1D()(h), layers.GlobalAveragePooling1D()(h)])
    y = layers.Dense(n_classes, activation="softmax")(pooled)
    return keras.Model(x, y, name="dilated_resnet")


BUILTINS: dict[str, Callable[[int, int, int], keras.Model]] = {
    "baseline-cnn": baseline_cnn,
    "dilated-resnet": dilated_resnet,
}


def build_model(spec: str, window: int, n_channels: int, n_classes: int) -> keras.Model:
    """A built-in name, a ``.keras`` file, or ``module:function``, as a Keras model."""
    if spec in BUILTINS:
        return BUILTINS[spec](window, n_channels, n_classes)
    if spec.endswith(".keras"):
        return _load_file(Path(spec))
    if ":" in spec:
        return _call_factory(spec, window, n_channels, n_classes)
    raise ModelError(
        f"unknown model {spec!r}: use a built-in ({', '.join(BUILTINS)}), a .keras file or module:function"
    )


def _load_file(path: Path) -> keras.Model:
    import keras

    if not path.is_file():
        raise ModelError(f"{path}: model file not found")
    try:
        return keras.saving.load_model(path)
    except Exception as err:  # Keras raises many types for unreadable files
        raise ModelError(f"{path}: cannot load the model ({type(err).__name__}: {err})") from None


def _call_factory(spec: str, window: int, n_channels: int, n_classes: int) -> keras.Model:
    import keras

    module_name, _, func_name = spec.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # so a model file beside the data can be named
    try:
        func = getattr(importlib.import_module(module_name), func_name)
    except (ImportError, AttributeError) as err:
        raise ModelError(f"model {spec!r} cannot be imported: {err}") from None
    offered = {"window": window, "n_channels": n_channels, "n_classes": n_classes,
               "input_shape": (window, n_channels)}
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):
        params = {}
    kwargs = {k: v for k, v in offered.items() if k in params}
    model = func(**kwargs)
    if not isinstance(model, keras.Model):
        raise ModelError(f"model {spec!r} returned {type(model).__name__}, not a keras.Model")
    return model


def check_model(model: keras.Model, window: int, n_channels: int, n_classes: int) -> None:
    """Refuse a model whose input does not take (window, channels) or whose output is not classes."""
    import numpy as np

    want_in = (window, n_channels)
    shape = _declared_input_shape(model)
    if shape is not None and any(d is not None and d != w for d, w in zip(shape, want_in, strict=True)):
        raise IncompatibleError(
            f"model {model.name!r} takes inputs shaped {_fmt(shape)}, but the windows are "
            f"{_fmt(want_in)} (window, channels); build it for --window {window} and {n_channels} channel(s)"
        )
    try:
        out = model(np.zeros((2, *want_in), dtype="float32"), training=False)
    except Exception as err:  # a model that cannot take these windows fails in many ways
        raise IncompatibleError(
            f"model {model.name!r} cannot take windows shaped {_fmt(want_in)}: {type(err).__name__}: "
            f"{str(err).splitlines()[0] if str(err) else ''}"
        ) from None
    got = tuple(getattr(out, "shape", ()))
    if len(got) != 2 or got[1] != n_classes:
        raise IncompatibleError(
            f"model {model.name!r} outputs shape {_fmt(got[1:])} per window, but the labels have "
            f"{n_classes} classes; its last layer needs {n_classes} units"
        )


def _declared_input_shape(model: keras.Model) -> tuple[int | None, ...] | None:
    try:
        inputs = model.inputs
    except (AttributeError, ValueError):
        return None
    if not inputs or len(inputs) != 1:
        return None
    shape = tuple(inputs[0].shape[1:])
    return shape if len(shape) == 2 else None


def _fmt(shape: tuple[Any, ...]) -> str:
    return "(" + ", ".join("None" if d is None else str(d) for d in shape) + ")"


def compile_model(
    model: keras.Model,
    *,
    optimizer: str | None,
    lr: float | None,
    loss: str | None,
    steps_per_execution: int,
) -> None:
    """Compile with chunkfit's defaults unless the model is compiled and nothing was asked to change.

    A compiled model keeps its optimizer, loss and metrics when ``optimizer``, ``lr`` and ``loss``
    are all None; otherwise it is recompiled (its optimizer state starts over).
    """
    import keras

    if not getattr(model, "compiled", False) or any(v is not None for v in (optimizer, lr, loss)):
        name = optimizer or DEFAULT_OPTIMIZER
        try:
            opt = keras.optimizers.get({"class_name": name, "config": {"learning_rate": lr or DEFAULT_LR}})
        except ValueError:
            raise ModelError(f"unknown optimizer {name!r}; use e.g. adam, sgd, rmsprop, adamw") from None
        try:
            keras.losses.get(loss or DEFAULT_LOSS)
        except ValueError:
            raise ModelError(
                f"unknown loss {loss!r}; use e.g. categorical_crossentropy, categorical_focal_crossentropy"
            ) from None
        model.compile(optimizer=opt, loss=loss or DEFAULT_LOSS, metrics=["accuracy"],
                      steps_per_execution=steps_per_execution)
    elif model.steps_per_execution != steps_per_execution:
        # The cached train function bakes the step count in; drop it so the new one is used.
        model.steps_per_execution = steps_per_execution
        model.train_function = model.test_function = model.predict_function = None
