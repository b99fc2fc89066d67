"""chunkfit.train.tensorflow.fused: Keras's Adam update as one TensorFlow kernel, against Keras's
own."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf

from chunkfit.train.models import build_model, compile_model
from chunkfit.train.tensorflow.fused import fusable, fused_adam
from chunkfit.train.tensorflow.pipeline import train_element_spec
from chunkfit.train.tensorflow.stepper import Stepper

OPTIONS = {
    "defaults": {},
    "other betas and epsilon": {
        "learning_rate": 0.01,
        "beta_1": 0.8,
        "beta_2": 0.99,
        "epsilon": 1e-4,
    },
    "clipping and weight decay": {"clipnorm": 0.5, "weight_decay": 0.01},
    "moving average": {"use_ema": True, "ema_overwrite_frequency": 3},
    "schedule": {"learning_rate": keras.optimizers.schedules.ExponentialDecay(0.01, 2, 0.5)},
}


def _trained(
    options: dict[str, Any], fused: bool, steps: int = 7
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Variables with a constraint-free update, after ``steps`` applies of seeded gradients inside a
    tf.function (as in a train step); the variables and the optimizer's variables."""
    rng = np.random.default_rng(3)
    variables = [
        keras.Variable(rng.normal(size=shape).astype(np.float32)) for shape in ((4, 3), (3,))
    ]
    grads = [tf.constant(rng.normal(size=(steps, *v.shape)).astype(np.float32)) for v in variables]
    optimizer = keras.optimizers.Adam(**options)
    optimizer.build(variables)

    @tf.function(autograph=False)
    def apply(k: Any) -> None:
        with fused_adam(optimizer if fused else None):
            optimizer.apply([g[k] for g in grads], variables)

    for k in range(steps):
        apply(tf.constant(k))
    return [v.numpy() for v in variables], [v.numpy() for v in optimizer.variables]


@pytest.mark.parametrize("options", list(OPTIONS.values()), ids=list(OPTIONS))
def test_the_fused_update_ends_where_keras_adam_ends(options: dict[str, Any]) -> None:
    ours, our_slots = _trained(options, fused=True)
    theirs, their_slots = _trained(options, fused=False)
    assert not np.allclose(
        ours[0], _trained(options, fused=True, steps=0)[0][0]
    )  # the updates moved them
    for a, b in zip(ours + our_slots, theirs + their_slots, strict=True):
        np.testing.assert_allclose(
            a, b, rtol=1e-5, atol=1e-6
        )  # the kernel rounds 1 - beta in float32


def _kernels(optimizer: keras.optimizers.Optimizer, fuse: bool = True) -> list[str]:
    """The op types of chunkfit's traced multi-batch step for baseline-cnn compiled with
    ``optimizer``."""
    keras.utils.set_random_seed(0)
    model = build_model("baseline-cnn", 12, 1, 2)
    compile_model(model, optimizer=None, lr=None, loss=None, steps_per_execution=2)
    model.compile(optimizer=optimizer, loss="categorical_crossentropy", metrics=["accuracy"])
    stepper = Stepper(model, window=12, n_classes=2, fuse=fuse)
    stepper.build_state(train_element_spec(8), 1)
    graph = stepper.whole(False).get_concrete_function().graph.as_graph_def()
    return [node.op for f in graph.library.function for node in f.node_def]


def test_a_plain_adam_trains_through_the_fused_kernel() -> None:
    kernels = _kernels(keras.optimizers.Adam())
    assert kernels.count("ResourceApplyAdam") == 6  # baseline-cnn's six variables


def test_a_step_not_fused_is_kerass_op_for_op() -> None:
    """``--jit off``: Keras's own update, so that the logs equal model.fit's to the last digit."""
    assert "ResourceApplyAdam" not in _kernels(keras.optimizers.Adam(), fuse=False)


class _MyAdam(keras.optimizers.Adam):
    """A user's Adam: its update_step might be anything."""


@pytest.mark.parametrize(
    "optimizer",
    [
        keras.optimizers.Adam(amsgrad=True),
        _MyAdam(),
        keras.optimizers.AdamW(),
        keras.optimizers.SGD(),
    ],
    ids=["amsgrad", "subclass", "adamw", "sgd"],
)
def test_other_optimizers_keep_kerass_own_update(optimizer: keras.optimizers.Optimizer) -> None:
    assert not fusable(optimizer)
    assert "ResourceApplyAdam" not in _kernels(optimizer)


def test_no_fused_kernel_under_a_distribution_strategy() -> None:
    with tf.distribute.OneDeviceStrategy("/cpu:0").scope():
        assert not fusable(keras.optimizers.Adam())
    assert fusable(keras.optimizers.Adam())
