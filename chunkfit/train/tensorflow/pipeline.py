"""Handing a block (or a group of blocks) to TensorFlow: raw samples in, batches of windows gathered inside the input graph.

A block crosses into TensorFlow as three float32/int32 tensors (its raw samples, the shuffled window
offsets and their class indices), never as a (windows x window) array. Each batch is gathered from
the raw samples by one ``tf.gather`` in the tf.data graph (a training element holds several
batches, gathered at once, for ``chunkfit.train.tensorflow.stepper.Stepper``), so a block costs about
(chunk + window) x channels x 4 bytes instead of chunk x window x channels x 4.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..blocks import BlockData

if TYPE_CHECKING:
    import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class BlockTensors:
    """A block converted to TensorFlow tensors (done in the prefetch thread), with the dataset of
    its training elements when it is trained (see ``block_dataset``)."""

    n_windows: int
    n_blocks: int
    samples: tf.Tensor
    offsets: tf.Tensor
    labels: tf.Tensor
    dataset: tf.data.Dataset | None = None


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


# Training elements hold up to MAX_STEPS batches and, unless asked for more, at most ELEMENT_BYTES of
# windows. On baseline-cnn (2 cores) 256 batches per element trained 4-7% faster than 64: each
# element costs a compiled call of its own and a pass through Keras's loop.
MAX_STEPS = 256
ELEMENT_BYTES = 16 << 20


def batch_bytes(batch_size: int, window: int, n_channels: int, n_classes: int = 0) -> int:
    """Bytes of one batch of gathered float32 windows (and of its one-hot labels)."""
    return batch_size * (window * n_channels + n_classes) * 4


def element_steps(batch_size: int, window: int, n_channels: int) -> int:
    """Default batches per training element: MAX_STEPS, or fewer when they would exceed ELEMENT_BYTES."""
    return max(1, min(MAX_STEPS, ELEMENT_BYTES // batch_bytes(batch_size, window, n_channels)))


def step_batches(n_windows: int, batch_size: int, steps: int) -> list[int]:
    """Batches in each element of a training dataset of ``n_windows`` (see ``block_dataset``)."""
    full, short = divmod(n_windows, batch_size)
    groups, rest = divmod(full, steps)
    return [steps] * groups + ([rest] if rest else []) + ([1] if short else [])


def train_element_spec(window: int, n_channels: int, batch_size: int, n_classes: int,
                       weighted: bool = False) -> tuple[tf.TypeSpec, ...]:
    """The element spec of every training dataset of ``block_dataset`` with these sizes (and class weights)."""
    import tensorflow as tf

    x = tf.TensorSpec([None, batch_size, window, n_channels], tf.float32)
    y = tf.TensorSpec([None, batch_size, n_classes], tf.float32)
    w = (tf.TensorSpec([None, batch_size], tf.float32),) if weighted else ()
    return (x, y, *w, tf.TensorSpec([], tf.int32))


def block_dataset(
    block: BlockTensors, *, window: int, batch_size: int, n_classes: int, steps: int | None = None,
    normalize: Callable[[Any], Any] | None = None, class_weights: list[float] | None = None,
) -> tf.data.Dataset:
    """The block's windows (float32 [b, window, channels]) and one-hot labels (float32 [b, classes]).

    With ``steps`` None every element is one batch, for ``model.evaluate``. Else every element
    holds up to ``steps`` batches for ``Stepper``: ``(x [k, batch_size, ...], y [k, batch_size,
    classes], last)``, whole groups of ``steps`` full batches, then the remaining full batches,
    then the short last batch alone, padded to ``batch_size``; ``last`` is how many windows the
    element's last batch really holds. ``normalize`` (chunkfit.train.normalize) is applied to the
    gathered windows. With ``class_weights`` (one per class index), training elements carry each
    window's weight after its labels, ``(x, y, w, last)``: Keras's ``class_weight`` as the
    ``sample_weight`` of every batch.
    """
    import tensorflow as tf

    span = tf.range(window, dtype=tf.int32)
    samples = block.samples
    b, per = batch_size, 1 if steps is None else steps
    # Training elements keep the batch size in their shape: a train step traced for unknown batch
    # sizes ran baseline-cnn 10-15% slower. Evaluation batches have unknown sizes, so that every
    # block matches the test function Keras traced for the first one, short batch or not.
    shape = [None] if steps is None else [None, b]

    def windows(offsets: tf.Tensor, labels: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        offsets = tf.raw_ops.PlaceholderWithDefault(input=offsets, shape=shape)
        labels = tf.raw_ops.PlaceholderWithDefault(input=labels, shape=shape)
        x = tf.gather(samples, offsets[..., None] + span)
        if normalize is not None:
            x = normalize(x)
        return x, tf.one_hot(labels, n_classes, dtype=tf.float32)

    weights = None if class_weights is None or steps is None else tf.constant(class_weights, tf.float32)

    def element(o: tf.Tensor, y: tf.Tensor, last: tf.Tensor) -> tuple[tf.Tensor, ...]:
        if weights is None:
            return (*windows(o, y), last)
        labels = tf.raw_ops.PlaceholderWithDefault(input=y, shape=shape)
        return (*windows(o, y), tf.gather(weights, labels), last)

    # Offsets arrive grouped, one dataset element per batch (or per group of batches): slicing
    # single windows and batching them again costs tf.data ~15% of a baseline-cnn training step.
    full, short = divmod(block.n_windows, b)
    groups, rest = divmod(full, per)
    offsets, labels = block.offsets, block.labels
    if short and steps is not None:  # the short batch is padded with copies of window 0
        pad = tf.zeros([b - short], dtype=offsets.dtype)
        offsets, labels = tf.concat([offsets, pad], 0), tf.concat([labels, pad], 0)
    # (elements, batches each, windows each batch) and the windows of each element's last batch
    parts = [((groups, per, b), b), ((1, rest, b), b), ((1, 1, short if steps is None else b), short)]
    ds, lo = None, 0
    for dims, last in parts:
        hi = lo + math.prod(dims)
        if hi > lo and last:
            if steps is None:
                grid = (dims[0] * dims[1], dims[2])
                part = tf.data.Dataset.from_tensor_slices((tf.reshape(offsets[lo:hi], grid), tf.reshape(labels[lo:hi], grid)))
            else:
                part = tf.data.Dataset.from_tensor_slices(
                    (tf.reshape(offsets[lo:hi], dims), tf.reshape(labels[lo:hi], dims), tf.fill([dims[0]], last))
                )
            ds = part if ds is None else ds.concatenate(part)
        lo = hi
    assert ds is not None, "a block holds at least one window"
    if steps is None:
        ds = ds.map(windows)
    else:
        ds = ds.map(element)
    # Nothing here is left for autotuning to tune (one map, a fixed prefetch). With it on, deleting
    # the iterator at the end of a fit call waited 1-4 s for a tf.data thread in about one fit
    # call in ten (measured on 2 cores); with it off, in none of 32.
    options = tf.data.Options()
    options.autotune.enabled = False
    return ds.prefetch(2).with_options(options)
