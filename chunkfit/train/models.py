"""Models: the built-ins, loading a ``.keras`` file or ``module:function``, and checking the fit.

A model takes windows shaped (batch, window, channels) and returns (batch, classes) class scores
that the one-hot labels are compared with.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import inspect
import os
import sys
import zipfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import IncompatibleError, ModelError
from .inception import inception_time
from .picker import picker

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
    pooled = layers.Concatenate()(
        [layers.GlobalMaxPooling1D()(h), layers.GlobalAveragePooling1D()(h)]
    )
    y = layers.Dense(n_classes, activation="softmax")(pooled)
    return keras.Model(x, y, name="dilated_resnet")


BUILTINS: dict[str, Callable[[int, int, int], keras.Model]] = {
    "baseline-cnn": baseline_cnn,
    "dilated-resnet": dilated_resnet,
    "inception-time": inception_time,
    "picker": picker,
}

# Built-ins whose training step costs fixed per-op overhead more than arithmetic on a CPU: they
# train fastest with one compute thread (see chunkfit.train.tensorflow.threads).
SMALL_BUILTINS = frozenset({"baseline-cnn"})


_UNSAFE_FILES: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "chunkfit_unsafe_model_files", default=False
)


@contextlib.contextmanager
def unsafe_model_files(allowed: bool = True) -> Iterator[None]:
    """Inside this block ``build_model`` loads ``.keras`` files outside Keras safe mode.

    Safe mode refuses deserialised Python code (``Lambda`` layers); allow it only for files you
    trust.
    """
    token = _UNSAFE_FILES.set(allowed)
    try:
        yield
    finally:
        _UNSAFE_FILES.reset(token)


def unsafe_files_allowed() -> bool:
    """Whether ``.keras`` files load outside safe mode here (inside ``unsafe_model_files()``)."""
    return _UNSAFE_FILES.get()


def build_model(
    spec: str, window: int, n_channels: int, n_classes: int, *, unsafe: bool | None = None
) -> keras.Model:
    """A built-in name, a ``.keras`` file, or ``module:function``, as a Keras model.

    A ``.keras`` file loads in Keras safe mode unless ``unsafe`` (default: inside
    ``unsafe_model_files()``). A ``module:function`` runs the user's own code.
    """
    allowed = _UNSAFE_FILES.get() if unsafe is None else unsafe
    check_model_spec(spec, unsafe=allowed)
    if spec in BUILTINS:
        return BUILTINS[spec](window, n_channels, n_classes)
    if spec.endswith(".keras"):
        return load_model_file(Path(spec), unsafe=allowed)
    return _call_factory(spec, window, n_channels, n_classes)


def check_model_spec(spec: str, *, unsafe: bool = False) -> None:
    """Refuse a model spec that cannot name a model, cheaply: no TensorFlow, no user code runs."""
    if spec in BUILTINS:
        return
    if spec.endswith(".keras"):
        check_model_file(Path(spec), unsafe=unsafe)
        return
    if ":" in spec:
        _split_factory(spec)
        return
    raise ModelError(
        f"unknown model {spec!r}: use a built-in ({', '.join(BUILTINS)}), a .keras file or "
        "module:function"
    )


def check_model_file(path: Path, *, unsafe: bool = True) -> None:
    """Refuse a path that is not a .keras file (a zip archive) without loading it.

    Unless ``unsafe``, also refuse a file holding Python lambdas, as Keras safe mode would on load.
    """
    if path.is_dir():
        raise ModelError(f"{path}: is a directory, not a .keras model file")
    if not path.is_file():
        raise ModelError(f"{path}: model file not found")
    if not zipfile.is_zipfile(path):
        # Keras would report "File not found" for a file that exists but is not a zip archive
        raise ModelError(
            f"{path}: not a .keras model (a .keras file is a zip archive, this file is not)"
        )
    if not unsafe and _holds_lambdas(path):
        raise _safe_mode_error(path)


def _holds_lambdas(path: Path) -> bool:
    """Whether the model's config serialises Python lambdas (read without TensorFlow, nothing
    runs)."""
    try:
        with zipfile.ZipFile(path) as archive:
            config = archive.read("config.json")
    except (KeyError, OSError, zipfile.BadZipFile):
        return False  # Keras itself reports what is wrong with the file
    return b'"__lambda__"' in config


def _safe_mode_error(path: Path) -> ModelError:
    return ModelError(
        f"{path}: refused in Keras safe mode: the file holds Python code (a Lambda layer or custom "
        "function) that runs when it loads; if you trust its author, pass --unsafe"
    )


def load_model_file(
    path: Path,
    *,
    unsafe: bool = False,
    compile: bool = True,
    custom_objects: dict[str, Any] | None = None,
) -> keras.Model:
    """Load a ``.keras`` file in Keras safe mode (no deserialised lambdas) unless ``unsafe``.

    ``compile`` False skips the loss, metrics and optimizer (what scoring needs: a custom loss then
    need not be found); ``custom_objects`` resolves the names of custom layers and functions.
    """
    check_model_file(path, unsafe=unsafe)
    import keras

    try:
        return keras.saving.load_model(
            path, safe_mode=not unsafe, compile=compile, custom_objects=custom_objects
        )
    except Exception as err:  # noqa: BLE001 - Keras raises many types for files that are not models
        first = str(err).splitlines()[0] if str(err) else ""
        if "safe_mode" in str(err):
            raise _safe_mode_error(path) from None
        raise ModelError(
            f"{path}: not a loadable .keras model ({type(err).__name__}: {first[:200]})"
        ) from None


def _split_factory(spec: str) -> tuple[str, str]:
    module_name, _, func_name = spec.partition(":")
    if (
        not all(part.isidentifier() for part in module_name.split("."))
        or not func_name.isidentifier()
    ):
        raise ModelError(
            f"model {spec!r} is not module:function; name a Python module and a function in it, "
            "e.g. my_models:build"
        )
    return module_name, func_name


def factory_objects(spec: str) -> dict[str, Any]:
    """The custom layers, losses, metrics and functions of a ``module:function`` model's module, by
    name, for loading a model it built: imports the module (the user's own code, as ``train`` does),
    calls nothing."""
    import keras

    module = _import_factory_module(spec)
    kinds = (
        keras.layers.Layer,
        keras.losses.Loss,
        keras.metrics.Metric,
        keras.optimizers.Optimizer,
    )
    out: dict[str, Any] = {}
    for name, obj in vars(module).items():
        if inspect.isclass(obj) and issubclass(obj, kinds):
            out[name] = obj
        elif inspect.isfunction(obj) and obj.__module__ == module.__name__:
            out[name] = obj
    return out


def _import_factory_module(spec: str) -> Any:
    module_name, _ = _split_factory(spec)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # so a model file beside the data can be named
    writes_bytecode, sys.dont_write_bytecode = (
        sys.dont_write_bytecode,
        True,
    )  # no __pycache__ beside the data
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ModelError(f"model {spec!r} cannot be imported: {err}") from None
    except Exception as err:  # noqa: BLE001 - the user's module failed while importing: their code
        raise ModelError(
            f"model factory {spec}: importing {module_name} raised {_one_line(err)}"
        ) from None
    finally:
        sys.dont_write_bytecode = writes_bytecode
    return module


def _call_factory(spec: str, window: int, n_channels: int, n_classes: int) -> keras.Model:
    """Call the user's ``module:function``; its own exceptions become one line naming it."""
    import keras

    module_name, func_name = _split_factory(spec)
    module = _import_factory_module(spec)
    func = getattr(module, func_name, None)
    if func is None:
        raise ModelError(
            f"model {spec!r} cannot be imported: module {module_name!r} has no attribute "
            f"{func_name!r}"
        )
    if not callable(func):
        raise ModelError(f"model {spec!r}: {func_name} is a {type(func).__name__}, not a function")
    offered = {
        "window": window,
        "n_channels": n_channels,
        "n_classes": n_classes,
        "input_shape": (window, n_channels),
    }
    try:
        params: Mapping[str, Any] = inspect.signature(func).parameters
    except (TypeError, ValueError):
        params = {}
    needed = [
        n
        for n, p in params.items()
        if p.default is p.empty
        and n not in offered
        and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    if needed:
        raise ModelError(
            f"model factory {spec} needs argument(s) {', '.join(needed)}, but chunkfit passes only "
            f"{', '.join(offered)}; give them default values"
        )
    kwargs = {k: v for k, v in offered.items() if k in params}
    try:
        model = func(**kwargs)
    except Exception as err:  # noqa: BLE001 - the user's own code: report it, do not crash
        raise ModelError(f"model factory {spec} raised {_one_line(err)}") from None
    if not isinstance(model, keras.Model):
        raise ModelError(f"model {spec!r} returned {type(model).__name__}, not a keras.Model")
    return model


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text[:300]}" if text else type(err).__name__


def check_model(
    model: keras.Model, window: int, n_channels: int, n_classes: int, *, picker: bool = False
) -> None:
    """Refuse a model whose input does not take (window, channels) or whose output is not
    classes (a ``picker``: one event probability per sample, (window, 1))."""
    import numpy as np

    want_in = (window, n_channels)
    shape = _declared_input_shape(model)
    if shape is not None and any(
        d is not None and d != w for d, w in zip(shape, want_in, strict=True)
    ):
        raise IncompatibleError(
            f"model {model.name!r} takes inputs shaped {_fmt(shape)}, but the windows are "
            f"{_fmt(want_in)} (window, channels); build it for --window {window} and {n_channels} "
            "channel(s)"
        )
    try:
        out = model(np.zeros((2, *want_in), dtype="float32"), training=False)
    except Exception as err:  # noqa: BLE001 - a model that cannot take these windows fails in many ways
        raise IncompatibleError(
            f"model {model.name!r} cannot take windows shaped {_fmt(want_in)}: "
            f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        ) from None
    got = tuple(getattr(out, "shape", ()))
    if picker:
        if got[1:] != (window, 1):
            raise IncompatibleError(
                f"model {model.name!r} outputs shape {_fmt(got[1:])} per window, but a picker "
                f"outputs one probability per sample, ({window}, 1)"
            )
        return
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
    classes: int = 2,
    picker: bool = False,
) -> None:
    """Compile with chunkfit's defaults unless the model is compiled and nothing was asked to
    change.

    A compiled model keeps its optimizer, loss and metrics when ``optimizer``, ``lr`` and ``loss``
    are all None; otherwise it is recompiled (its optimizer state starts over). A model of
    ``classes`` 2 is compiled with the event class's metrics first (chunkfit.train.metrics); a
    ``picker`` with binary cross-entropy per sample and no metrics (its figures are its picks').
    """
    import keras

    from .metrics import compiled_metrics
    from .weights import keras_loss

    loss = keras_loss(loss)  # --loss focal
    if not getattr(model, "compiled", False) or any(v is not None for v in (optimizer, lr, loss)):
        name = optimizer or DEFAULT_OPTIMIZER
        try:
            opt = keras.optimizers.get(
                {"class_name": name, "config": {"learning_rate": lr or DEFAULT_LR}}
            )
        except ValueError:
            raise ModelError(
                f"unknown optimizer {name!r}; use e.g. adam, sgd, rmsprop, adamw"
            ) from None
        try:
            keras.losses.get(loss or DEFAULT_LOSS)
        except ValueError:
            raise ModelError(
                f"unknown loss {loss!r}; use e.g. categorical_crossentropy, focal "
                "(categorical_focal_crossentropy)"
            ) from None
        model.compile(
            optimizer=opt,
            loss=loss or ("binary_crossentropy" if picker else DEFAULT_LOSS),
            metrics=[] if picker else compiled_metrics(classes),
            steps_per_execution=steps_per_execution,
        )
    elif model.steps_per_execution != steps_per_execution:
        # The cached train function bakes the step count in; drop it so the new one is used.
        model.steps_per_execution = steps_per_execution
        model.train_function = model.test_function = model.predict_function = None
