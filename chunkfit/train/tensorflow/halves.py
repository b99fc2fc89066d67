"""Each training batch as independent halves that TensorFlow runs side by side, one thread each.

A small model's step is a chain of small kernels, each too small for TensorFlow's intra-op threads
to share well: a small model's step can run about as fast on one compute thread as on every core.
Cut the batch in two instead: the forward pass of each half, and its backward pass, are independent
chains of ops, and TensorFlow's inter-op executor runs two chains at once, one compute thread each,
which beat both one thread and every core for the built-in models where measured.

Only where the halves compute exactly what the whole batch would: the model's outputs are those of
its layers applied to each window alone (convolutions, dense layers, pooling, activations, dropout,
merges, layer normalization...), so the two halves' outputs, concatenated, are the batch's, and the
loss, its gradients and the metrics are computed on the whole batch as before (equal up to float
rounding: the weight gradients sum the same terms in another order). A layer that mixes windows
(BatchNormalization), adds losses per call (an activity regularizer), or is not one of Keras's own
(its code may do anything) keeps the batch whole. Which runs faster depends on the machine and the
model: chunkfit.train.tensorflow.threadtune measures it as one of its candidates.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from itertools import pairwise
from typing import Any

import keras

L = keras.layers
# Keras's own layers that compute each window from that window alone, without per-call losses.
PER_WINDOW: tuple[type, ...] = (
    L.InputLayer,
    L.Conv1D,
    L.Conv2D,
    L.SeparableConv1D,
    L.DepthwiseConv1D,
    L.Conv1DTranspose,
    L.Dense,
    L.MaxPooling1D,
    L.MaxPooling2D,
    L.AveragePooling1D,
    L.AveragePooling2D,
    L.GlobalMaxPooling1D,
    L.GlobalMaxPooling2D,
    L.GlobalAveragePooling1D,
    L.GlobalAveragePooling2D,
    L.Flatten,
    L.Reshape,
    L.Permute,
    L.Activation,
    L.ReLU,
    L.LeakyReLU,
    L.ELU,
    L.PReLU,
    L.Softmax,
    L.Dropout,
    L.SpatialDropout1D,
    L.GaussianNoise,
    L.GaussianDropout,
    L.Add,
    L.Subtract,
    L.Multiply,
    L.Average,
    L.Maximum,
    L.Minimum,
    L.Concatenate,
    L.LayerNormalization,
    L.ZeroPadding1D,
    L.Cropping1D,
    L.UpSampling1D,
    L.Identity,
)


def splittable(model: keras.Model) -> bool:
    """Whether ``model``'s outputs for a batch are its outputs for each half, concatenated (see the
    module docstring): a Sequential or Functional model with one input and one output, made of
    ``PER_WINDOW`` layers (or of such models) without activity regularizers."""
    if not _graph(model):
        return False
    try:
        if len(model.inputs) != 1 or len(model.outputs) != 1:
            return False
    except (AttributeError, TypeError, ValueError):
        return False
    return all(_per_window(layer) for layer in model.layers)


def _graph(model: Any) -> bool:
    """A Sequential or Functional model (a subclassed one's ``call`` is code of its own)."""
    from keras.src.models.functional import Functional

    return isinstance(model, Functional | keras.Sequential)


def _per_window(layer: Any) -> bool:
    if getattr(layer, "activity_regularizer", None) is not None:
        return False
    if isinstance(layer, keras.Model):
        return _graph(layer) and all(_per_window(inner) for inner in layer.layers)
    return type(layer) in PER_WINDOW


@contextmanager
def split_batch(model: keras.Model, parts: int) -> Iterator[None]:
    """While tracing a step, ``model``'s forward pass cut along the batch into ``parts`` slices
    whose outputs are concatenated (``parts`` of 1 changes nothing). The caller holds the trace
    lock: the model's ``call`` is replaced on the instance meanwhile."""
    if parts <= 1:
        yield
        return
    import tensorflow as tf

    whole = model.call

    def call(inputs: Any, *args: Any, **kwargs: Any) -> Any:
        n = inputs.shape[0]
        if n is None or n < parts:  # a batch of unknown or tiny size stays whole
            return whole(inputs, *args, **kwargs)
        cuts = [n * k // parts for k in range(parts + 1)]
        return tf.concat([whole(inputs[a:b], *args, **kwargs) for a, b in pairwise(cuts)], axis=0)

    object.__setattr__(model, "call", call)
    try:
        yield
    finally:
        object.__delattr__(model, "call")
