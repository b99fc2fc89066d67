"""Handing a block (or a group of blocks) to TensorFlow: raw samples in, batches of windows gathered inside the input graph.

A block crosses into TensorFlow as three float32/int32 tensors (its raw samples, the shuffled window
offsets and their class indices), never as a (windows x window) array. Each batch is gathered from
the raw samples by one ``tf.gather`` in the tf.data graph, so a block costs about
(chunk + window) x channels x 4 bytes instead of chunk x window x channels x 4.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from .blocks import BlockData

if TYPE_CHECKING:
    import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class BlockTensors:
    """A block converted to TensorFlow tensors (done in the prefetch thread)."""

    n_windows: int
    n_blocks: int
    samples: tf.Tensor
    offsets: tf.Tensor
    labels: tf.Tensor


def to_tensors(data: BlockData) -> BlockTensors:
    """Copy a block into TensorFlow-owned memory once; the numpy buffers can then be dropped."""
    import tensorflow as tf

    return BlockTensors(
        n_windows=int(data.offsets.shape[0]),
        n_blocks=len(data.blocks),
        samples=tf.constant(data.samples),
        offsets=tf.constant(data.offsets),
        labels=tf.constant(data.labels),
    )


def block_dataset(block: BlockTensors, *, window: int, batch_size: int, n_classes: int) -> tf.data.Dataset:
    """Batches (windows float32 [b, window, channels], one-hot float32 [b, classes]) in block order."""
    import tensorflow as tf

    span = tf.range(window, dtype=tf.int32)
    samples = block.samples

    def gather(offsets: tf.Tensor, labels: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        # Batches are [None, ...] whether or not this block ends in a short batch, so every
        # block matches the train function Keras traced for the first one (no retracing).
        offsets = tf.raw_ops.PlaceholderWithDefault(input=offsets, shape=[None])
        labels = tf.raw_ops.PlaceholderWithDefault(input=labels, shape=[None])
        x = tf.gather(samples, offsets[:, None] + span)
        return x, tf.one_hot(labels, n_classes, dtype=tf.float32)

    # Offsets arrive pre-batched, one dataset element per batch: slicing single windows and
    # batching them again costs tf.data ~15% of the training step (measured on the baseline-cnn).
    n = block.n_windows
    whole = n - n % batch_size
    ds = tf.data.Dataset.from_tensor_slices(
        (tf.reshape(block.offsets[:whole], (-1, batch_size)), tf.reshape(block.labels[:whole], (-1, batch_size)))
    )
    if whole < n:
        ds = ds.concatenate(tf.data.Dataset.from_tensors((block.offsets[whole:], block.labels[whole:])))
    return ds.map(gather).prefetch(2)
