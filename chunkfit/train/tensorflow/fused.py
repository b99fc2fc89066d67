"""Keras's Adam update of one variable as TensorFlow's one fused kernel, inside chunkfit's train
step.

Keras's ``Adam.update_step`` spells the update out in about fifteen small ops per variable (powers
of the betas, the step size, two moment updates, the variable's), each a separate kernel launch in
TensorFlow's graph; ``ResourceApplyAdam`` is the same arithmetic in one kernel::

    alpha = lr * sqrt(1 - beta_2 ** t) / (1 - beta_1 ** t)
    m += (g - m) * (1 - beta_1);  v += (g * g - v) * (1 - beta_2)
    var -= m * alpha / (sqrt(v) + epsilon)

(Keras's ``update_step`` with ``amsgrad=False``, term by term; ``t`` is the optimizer's iterations
plus one.) One kernel per variable instead of Keras's chain of small ops makes a small model's
step measurably faster on a CPU. Only the
per-variable update is replaced: ``Optimizer.apply`` still filters, clips, decays weights, averages
(EMA), accumulates, applies constraints and counts iterations, so every option the user set keeps
its meaning. The kernel is used for a plain ``keras.optimizers.Adam`` (not a subclass, not AMSGrad)
on float32 variables with dense gradients, outside any distribution strategy; anything else runs
Keras's own ``update_step``. Results equal Keras's to float rounding (the kernel computes
``1 - beta_1`` in float32).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import keras


def fusable(optimizer: Any) -> bool:
    """Whether ``optimizer``'s per-variable update can run as ``ResourceApplyAdam`` (see the module
    docstring)."""
    import tensorflow as tf

    return (
        type(optimizer) is keras.optimizers.Adam
        and not optimizer.amsgrad
        and not tf.distribute.has_strategy()
    )


@contextmanager
def fused_adam(optimizer: Any) -> Iterator[None]:
    """While a train step is traced: ``optimizer.update_step`` is the fused kernel where ``fusable``
    (the caller holds the lock that keeps other traces out)."""
    if optimizer is None or not fusable(optimizer):
        yield
        return
    object.__setattr__(optimizer, "update_step", _fused_update(optimizer))
    try:
        yield
    finally:
        object.__delattr__(optimizer, "update_step")


def _fused_update(optimizer: keras.optimizers.Adam) -> Callable[[Any, Any, Any], None]:
    import tensorflow as tf

    keras_update = type(optimizer).update_step

    def update_step(gradient: Any, variable: Any, learning_rate: Any) -> None:
        if isinstance(gradient, tf.IndexedSlices) or variable.dtype != tf.float32:
            return keras_update(optimizer, gradient, variable, learning_rate)
        index = optimizer._get_variable_index(variable)
        m, v = optimizer._momentums[index], optimizer._velocities[index]
        step = tf.cast(optimizer.iterations + 1, tf.float32)

        def f32(x: Any) -> Any:
            return tf.cast(x, tf.float32)

        tf.raw_ops.ResourceApplyAdam(
            var=_handle(variable),
            m=_handle(m),
            v=_handle(v),
            beta1_power=tf.pow(f32(optimizer.beta_1), step),
            beta2_power=tf.pow(f32(optimizer.beta_2), step),
            lr=f32(learning_rate),
            beta1=f32(optimizer.beta_1),
            beta2=f32(optimizer.beta_2),
            epsilon=f32(optimizer.epsilon),
            grad=tf.cast(gradient, tf.float32),
        )
        return None

    return update_step


def _handle(variable: Any) -> Any:
    """The resource handle of a Keras or TensorFlow variable."""
    return (variable.value if isinstance(variable, keras.Variable) else variable).handle
