"""Each training batch as independent halves run side by side (chunkfit.train.tensorflow.halves)."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf

from chunkfit.train.models import build_model, compile_model
from chunkfit.train.normalize import Normalizer
from chunkfit.train.tensorflow.halves import split_batch, splittable
from chunkfit.train.tensorflow.pipeline import train_element_spec, windows_at
from chunkfit.train.tensorflow.stepper import Stepper

WINDOW = 24


def _functional(*layers: keras.layers.Layer) -> keras.Model:
    x = keras.Input((WINDOW, 1))
    h = x
    for layer in layers:
        h = layer(h)
    return keras.Model(x, keras.layers.Dense(2, activation="softmax")(keras.layers.Flatten()(h)))


@pytest.mark.parametrize("name", ["baseline-cnn", "dilated-resnet"])
def test_the_built_in_models_split(name: str) -> None:
    assert splittable(build_model(name, WINDOW, 1, 2))


def test_a_model_inside_a_model_of_per_window_layers_splits() -> None:
    inner = keras.Sequential(
        [keras.Input((WINDOW, 1)), keras.layers.Conv1D(4, 3), keras.layers.ReLU()]
    )
    assert splittable(_functional(inner))


@pytest.mark.parametrize(
    "layer",
    [
        keras.layers.BatchNormalization(),  # statistics of the whole batch
        keras.layers.Conv1D(4, 3, activity_regularizer="l2"),  # a loss per call
        keras.layers.Lambda(lambda t: t - keras.ops.mean(t, axis=0)),  # code of its own
    ],
    ids=["batch-norm", "activity-regularizer", "lambda"],
)
def test_a_model_with_a_layer_that_mixes_windows_or_adds_losses_stays_whole(
    layer: keras.layers.Layer,
) -> None:
    assert not splittable(_functional(keras.layers.Conv1D(4, 3), layer))


def test_a_subclassed_model_stays_whole() -> None:
    class Mine(keras.Model):
        def __init__(self) -> None:
            super().__init__()
            self.dense = keras.layers.Dense(2, activation="softmax")

        def call(self, x: Any) -> Any:
            return self.dense(keras.ops.mean(x, axis=1))

    model = Mine()
    model(np.zeros((2, WINDOW, 1), np.float32))
    assert not splittable(model)


def test_a_model_of_two_inputs_stays_whole() -> None:
    a, b = keras.Input((WINDOW, 1)), keras.Input((WINDOW, 1))
    y = keras.layers.Dense(2)(keras.layers.Flatten()(keras.layers.Concatenate()([a, b])))
    assert not splittable(keras.Model([a, b], y))


def test_a_split_forward_pass_equals_the_whole_one_and_runs_each_half_apart() -> None:
    keras.utils.set_random_seed(0)
    model = build_model("dilated-resnet", WINDOW, 1, 2)
    x = tf.constant(
        np.random.default_rng(0).normal(size=(7, WINDOW, 1)).astype(np.float32)
    )  # odd: 3 + 4

    def convolutions(parts: int) -> tuple[np.ndarray, int]:
        with split_batch(model, parts):
            graph = tf.function(lambda t: model(t, training=False)).get_concrete_function(x).graph
        return graph, sum(op.type == "Conv2D" for op in graph.get_operations())

    (_, whole), (_, halves) = convolutions(1), convolutions(2)
    assert halves == 2 * whole > 0
    with split_batch(model, 2):
        split = tf.function(lambda t: model(t, training=False))(x)
    np.testing.assert_allclose(
        split.numpy(), model(x, training=False).numpy(), rtol=1e-6, atol=1e-7
    )
    assert "call" not in vars(model)  # the model's own call again


def _trained(
    name: str, halves: int, batch: int, weighted: bool = False
) -> tuple[list[np.ndarray], dict[str, float], int]:
    """Weights and logs of ``name`` after 3 elements of 4 batches (windows gathered before, as the
    input pipeline hands them over on a CPU), each batch whole or in halves, and the number of
    weight-gradient convolutions in the step of one batch."""
    keras.utils.set_random_seed(1)
    model = build_model(name, WINDOW, 1, 2)
    # SGD: its update is linear in the gradients, so their rounding stays rounding (Adam's divides
    # near-zero moments and turns it into differences of a learning rate)
    compile_model(model, optimizer="sgd", lr=0.05, loss=None, steps_per_execution=4, classes=2)
    extra: dict[str, Any] = {}
    if weighted:  # each window standardised on its own, and weighted by its class
        extra = {
            "normalize": Normalizer("window", (0.0,), (1.0,)).apply,
            "class_weights": [1.0, 3.0],
        }
    stepper = Stepper(
        model, window=WINDOW, n_classes=2, fuse=True, halves=halves, gathered=True, **extra
    )
    stepper.build_state(train_element_spec(batch, WINDOW), 1)
    rng = np.random.default_rng(4)
    samples = tf.constant(rng.normal(size=(5000, 1)).astype(np.float32))
    step = stepper.whole(False)
    for _ in range(3):
        offsets = tf.constant(rng.integers(0, 5000 - WINDOW, (4, batch)).astype(np.int32))
        windows = windows_at(samples, offsets, WINDOW)
        labels = tf.constant(rng.integers(0, 2, (4, batch)).astype(np.int32))
        logs = step(samples, windows, labels)
    one = tf.function(stepper._one, autograph=False).get_concrete_function(
        samples, windows[0], labels[0]
    )
    gradients = [op.type for op in one.graph.get_operations()].count("Conv2DBackpropFilter")
    return [w.numpy() for w in model.weights], {k: float(v) for k, v in logs.items()}, gradients


@pytest.mark.parametrize(
    ("name", "batch", "weighted"),
    [("baseline-cnn", 64, False), ("dilated-resnet", 33, False), ("baseline-cnn", 50, True)],
)
def test_training_in_halves_ends_where_training_whole_batches_ends(
    name: str, batch: int, weighted: bool
) -> None:
    whole_weights, whole_logs, whole_gradients = _trained(name, 1, batch, weighted)
    split_weights, split_logs, split_gradients = _trained(name, 2, batch, weighted)
    assert split_gradients == 2 * whole_gradients > 0  # each half's backward pass made apart
    assert whole_logs.keys() == split_logs.keys() and "loss" in whole_logs
    assert split_logs["loss"] == pytest.approx(whole_logs["loss"], rel=1e-4)
    for key in whole_logs:  # counts at thresholds: a prediction at a threshold may round either way
        assert split_logs[key] == pytest.approx(whole_logs[key], abs=0.01), key
    for ours, theirs in zip(split_weights, whole_weights, strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-6)
