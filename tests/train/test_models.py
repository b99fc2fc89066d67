"""Built-in models, loading a .keras file or module:function, and the shape check."""

from __future__ import annotations

import sys
from pathlib import Path

import keras
import pytest

from chunkfit.errors import IncompatibleError, ModelError
from chunkfit.train.models import BUILTINS, build_model, check_model, compile_model
from chunkfit.train.picker import PICKERS

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", sorted(set(BUILTINS) - PICKERS))
def test_builtin_takes_windows_and_returns_one_score_per_class(name: str) -> None:
    model = build_model(name, 104, 3, 4)
    check_model(model, 104, 3, 4)
    assert model.output_shape == (None, 4)


@pytest.mark.parametrize("window", [104, 37])
def test_picker_returns_one_score_per_sample_of_any_window(window: int) -> None:
    model = build_model("picker", window, 3, 2)
    check_model(model, window, 3, 2, picker=True)
    assert model.output_shape == (None, window, 1)


def test_classifier_is_refused_where_a_picker_is_expected() -> None:
    with pytest.raises(IncompatibleError, match="a picker outputs one probability per sample"):
        check_model(build_model("baseline-cnn", 50, 1, 2), 50, 1, 2, picker=True)


def test_saved_model_file_loads(tmp_path: Path) -> None:
    build_model("baseline-cnn", 50, 1, 2).save(tmp_path / "m.keras")
    assert build_model(str(tmp_path / "m.keras"), 50, 1, 2).input_shape == (None, 50, 1)


def test_missing_model_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="model file not found"):
        build_model(str(tmp_path / "nope.keras"), 50, 1, 2)


def test_module_function_gets_the_arguments_it_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "my_models.py").write_text(
        "import keras\n"
        "def tiny(window, n_classes):\n"
        "    return keras.Sequential([keras.Input((window, 1)), keras.layers.Flatten(),\n"
        "                             keras.layers.Dense(n_classes, activation='softmax')])\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_models", raising=False)
    assert build_model("my_models:tiny", 30, 1, 3).output_shape == (None, 3)


def test_unimportable_module_function_is_refused() -> None:
    with pytest.raises(ModelError, match="cannot be imported"):
        build_model("no_such_module_here:make", 30, 1, 2)


def test_unknown_model_name_is_refused() -> None:
    with pytest.raises(ModelError, match="unknown model 'resnet9000'"):
        build_model("resnet9000", 30, 1, 2)


def test_model_that_cannot_take_the_window_length_is_refused() -> None:
    model = keras.Sequential(
        [
            keras.Input((None, 1)),
            keras.layers.Conv1D(4, 50),
            keras.layers.GlobalMaxPooling1D(),
            keras.layers.Dense(2),
        ]
    )
    with pytest.raises(IncompatibleError, match=r"cannot take windows shaped \(20, 1\)"):
        check_model(model, 20, 1, 2)


def test_unknown_optimizer_is_refused() -> None:
    with pytest.raises(ModelError, match="unknown optimizer 'adamm'"):
        compile_model(
            build_model("baseline-cnn", 30, 1, 2),
            optimizer="adamm",
            lr=None,
            loss=None,
            steps_per_execution=1,
        )


def test_compiled_model_keeps_its_optimizer_when_nothing_is_asked() -> None:
    model = build_model("baseline-cnn", 30, 1, 2)
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="categorical_crossentropy")
    compile_model(model, optimizer=None, lr=None, loss=None, steps_per_execution=8)
    assert isinstance(model.optimizer, keras.optimizers.SGD) and model.steps_per_execution == 8


def test_learning_rate_flag_recompiles_with_that_rate() -> None:
    model = build_model("baseline-cnn", 30, 1, 2)
    compile_model(model, optimizer="sgd", lr=0.25, loss=None, steps_per_execution=1)
    assert float(model.optimizer.learning_rate) == pytest.approx(0.25)
