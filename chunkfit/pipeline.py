"""Handing a block (or a group of blocks) to TensorFlow: raw samples in, batches of windows gathered inside the input graph.

A block crosses into TensorFlow as three float32/int32 tensors (its raw samples, the shuffled window
offsets and their class indices), never as a (windows x window) array. Each batch is gathered from
the raw samples by one ``tf.gather`` in the tf.data graph (a training element holds several
batches, gathered at once, for ``chunkfit.stepper.Stepper``), so a block costs about
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


def step_batches(n_windows: int, batch_size: int, steps: int) -> list[int]:
    """Batches in each element of a training dataset of ``n_windows`` (see ``block_dataset``)."""
    full, short = divmod(n_windows, batch_size)
    groups, rest = divmod(full, steps)
    return [steps] * groups + ([rest] if rest else []) + ([1] if short else [])


def block_dataset(
    block: BlockTensors, *, window: int, batch_size: int, n_classes: int, steps: int | None = None
) -> tf.data.Dataset:
    """The block's windows (float32 [b, window, channels]) and one-hot labels (float32 [b, classes]).

    With ``steps`` None every element is one batch, for ``model.evaluate``; else every element
    holds up to ``steps`` batches ([k, b, ...]) for ``Stepper``: whole groups of ``steps`` full
    batches, then the remaining full batches, then the short last batch alone.
    """
    import tensorflow as tf

    span = tf.range(window, dtype=tf.int32)
    samples = block.samples
    shape = [None] if steps is None else [None, None]

    def gather(offsets: tf.Tensor, labels: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        # Unknown sizes whether or not this block ends in a short batch, so every block matches
        # the train function Keras traced for the first one (no retracing).
        offsets = tf.raw_ops.PlaceholderWithDefault(input=offsets, shape=shape)
        labels = tf.raw_ops.PlaceholderWithDefault(input=labels, shape=shape)
        x = tf.gather(samples, offsets[..., None] + span)
        return x, tf.one_hot(labels, n_classes, dtype=tf.float32)

    # Offsets arrive grouped, one dataset element per batch (or per group of batches): slicing
    # single windows and batching them again costs tf.data ~15% of a baseline-cnn training step.
    b, per = batch_size, 1 if steps is None else steps
    full, short = divmod(block.n_windows, b)
    groups, rest = divmod(full, per)
    parts = [(0, groups * per * b, (groups, per, b)), (groups * per * b, full * b, (1, rest, b)),
             (full * b, block.n_windows, (1, 1, short))]
    ds = None
    for lo, hi, dims in parts:
        if hi > lo:
            grid = dims if steps is not None else (dims[0] * dims[1], dims[2])
            part = tf.data.Dataset.from_tensor_slices(
                (tf.reshape(block.offsets[lo:hi], grid), tf.reshape(block.labels[lo:hi], grid))
            )
            ds = part if ds is None else ds.concatenate(part)
    assert ds is not None, "a block holds at least one window"
    return ds.map(gather).prefetch(2)
