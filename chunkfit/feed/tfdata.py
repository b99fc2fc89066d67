"""``chunkfit.dataset(kind="tf")``: a ``tf.data.Dataset`` of batches for ``model.fit``.

A group of blocks enters the input graph as its raw samples, its shuffled window offsets and their
class indices (three tensors, about (chunk + window) x channels floats), the way train hands a block
to its engine (chunkfit.train.tensorflow.pipeline); each batch's windows are gathered from the
samples inside the graph (``tf.gather`` of offsets + range), standardised, and the labels made
one-hot and weighted there, on tf.data's threads. No (windows x window) array is made in Python.

Each iterator taken from the dataset is the next epoch, so ``model.fit(ds, epochs=E)`` trains E
epochs of chunkfit's order from the first ``epoch``; an extra ``iter(ds)`` (a ``next(iter(ds))``
peek) uses up an epoch too and shifts the ones after it by one.

Its length (``cardinality``) is the batches of one epoch, the same for every epoch, so that Keras
reads each epoch whole: Keras 3 learns an unknown length from the first epoch and cuts the later
ones at one batch more. Each group's last batch is short, as in ``chunkfit train``, where the
groups are the same every epoch (one block a group, mix 1; blocks unshuffled; validation). Where
they are not (mix > 1 with shuffled blocks), which blocks share a group, and so how many short
batches an epoch has, changes by epoch: there the batches run on across groups, in the same order
of windows, and only the epoch's last batch is short.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np
import tensorflow as tf

from .source import Feed


def tf_dataset(feed: Feed, *, batch_size: int, epoch: int = 0) -> tf.data.Dataset:
    """The dataset; see the module docstring."""
    epochs = itertools.count(epoch)
    window, b = feed.window, batch_size

    def groups() -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        e = next(epochs)
        for k, group in enumerate(feed.groups(e)):
            data = feed.read(e, k, group)
            yield data.samples, data.offsets, data.labels

    spec = (
        tf.TensorSpec([None, feed.n_channels], tf.float32),
        tf.TensorSpec([None], tf.int32),
        tf.TensorSpec([None], tf.int32),
    )
    normalize = _normalizer(feed)
    weights = feed.weights.weights if feed.training else None
    class_weights = None if weights is None else tf.constant(weights, tf.float32)
    n_classes = len(feed.classes)
    onehot = feed.label_kind == "onehot"

    def batches(samples: tf.Tensor, offsets: tf.Tensor, labels: tf.Tensor) -> tf.data.Dataset:
        n = tf.shape(offsets, out_type=tf.int64)[0]
        span = tf.range(window, dtype=tf.int32)

        def batch(i: tf.Tensor) -> tuple[tf.Tensor, ...]:
            lo = i * b
            hi = tf.minimum(lo + b, n)
            x = tf.gather(samples, offsets[lo:hi, None] + span)
            cls = labels[lo:hi]
            y = tf.one_hot(cls, n_classes, dtype=tf.float32) if onehot else cls
            x = normalize(x)
            if class_weights is None:
                return x, y
            return x, y, tf.gather(class_weights, cls)

        return tf.data.Dataset.range((n + b - 1) // b).map(batch)

    ds = tf.data.Dataset.from_generator(groups, output_signature=spec)
    # one group read ahead of the one being batched, and a few batches ahead of the step
    ds = ds.prefetch(1).flat_map(batches)
    if fixed_batches(feed):
        n_batches = sum(-(-feed.group_windows(g) // b) for g in feed.groups(epoch))
    else:
        ds = ds.rebatch(b)
        n_batches = -(-feed.epoch_windows() // b)
    return ds.apply(tf.data.experimental.assert_cardinality(n_batches)).prefetch(4)


def fixed_batches(feed: Feed) -> bool:
    """Whether batches cut group by group come to as many in every epoch: each group rounds its
    last batch up, so only where the groups are the same each epoch (mix 1, blocks unshuffled,
    validation)."""
    return feed.plan.mix == 1 or not feed.plan.shuffle or not feed.training


def _normalizer(feed: Feed) -> Any:
    """The run's standardisation (chunkfit.train.normalize) in TensorFlow ops, for the input
    graph, whatever the process's Keras backend."""
    norm = feed.normalizer
    if norm.mode == "none":
        return lambda x: x
    eps = float(norm.epsilon)
    if norm.mode == "global":
        mean = tf.constant(np.asarray(norm.mean, np.float32))
        scale = tf.maximum(tf.constant(np.asarray(norm.std, np.float32)), eps)
        return lambda x: (x - mean) / scale

    def window(x: tf.Tensor) -> tf.Tensor:
        mean = tf.reduce_mean(x, axis=-2, keepdims=True)
        var = tf.reduce_mean(tf.square(x - mean), axis=-2, keepdims=True)
        return (x - mean) * tf.math.rsqrt(var + eps)

    return window
