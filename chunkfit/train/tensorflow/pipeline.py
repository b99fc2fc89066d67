"""Handing a block (or a group of blocks) to TensorFlow: raw samples in, windows gathered where they
are used.

A block crosses into TensorFlow as three float32/int32 tensors (its raw samples, the shuffled window
offsets and their class indices), never as a (windows x window) array. On a CPU the windows of each
training element are copied out of the raw samples in the input pipeline, by numpy, while the step
before trains (``train_dataset``'s ``window``; ``host_windows``): TensorFlow's gather copies a
window sample by sample, numpy copies it as one row of a strided view of the samples, several times
faster, and the step then runs about as fast as on a constant batch. On a GPU the compiled step
gathers the windows of each batch itself (``chunkfit.train.tensorflow.stepper.Stepper``), from the
samples on the device. The samples are padded to one length for the whole run (``to_tensors``'
``capacity``), so that XLA compiles the step once. Evaluation batches are gathered in the input
pipeline too, for ``model.evaluate``. A block costs about (chunk + window) x channels x 4 bytes, and
the elements in flight a few times ``ELEMENT_BYTES`` of windows (chunkfit.train.steps).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ...core.blocks import BlockData

if TYPE_CHECKING:
    import tensorflow as tf

    from ..augment import Augmenter


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


def to_tensors(data: BlockData, capacity: int | None = None) -> BlockTensors:
    """Copy a block into TensorFlow-owned memory once; the numpy buffers can then be dropped.

    With ``capacity``, the samples are padded with zeros to that many rows (no window reaches the
    padding), so that every group of a run has one shape.
    """
    import tensorflow as tf

    samples = data.samples
    if capacity is not None and capacity > samples.shape[0]:
        samples = np.zeros((capacity, *samples.shape[1:]), dtype=np.float32)
        samples[: data.samples.shape[0]] = data.samples
    return BlockTensors(
        n_windows=int(data.offsets.shape[0]),
        n_blocks=len(data.blocks),
        samples=tf.constant(samples, dtype=tf.float32),
        offsets=tf.constant(data.offsets),
        labels=tf.constant(data.labels),
    )


def train_element_spec(
    batch_size: int, window: int | None = None, n_channels: int = 1
) -> tuple[tf.TypeSpec, ...]:
    """The element spec of every ``train_dataset`` with this batch size (and ``window``):
    window offsets, or with ``window`` the windows themselves [batches, batch_size, window,
    channels], and class indices [batches, batch_size], and the real windows of the last batch."""
    import tensorflow as tf

    index = tf.TensorSpec([None, batch_size], tf.int32)
    first = (
        index
        if window is None
        else tf.TensorSpec([None, batch_size, window, n_channels], tf.float32)
    )
    return (first, index, tf.TensorSpec([], tf.int32))


def samples_spec(n_channels: int) -> tf.TensorSpec:
    """The spec of a block's raw samples, as the compiled train step takes them."""
    import tensorflow as tf

    return tf.TensorSpec([None, n_channels], tf.float32)


def windows_at(samples: Any, offsets: Any, window: int) -> Any:
    """The windows ``samples[o : o + window]`` of ``offsets`` (any shape: the windows' shape is
    offsets' shape + [window, channels])."""
    import tensorflow as tf

    return tf.gather(samples, offsets[..., None] + tf.range(window, dtype=offsets.dtype))


def host_windows(samples: Any, window: int) -> Callable[[Any], Any]:
    """A function of the input pipeline's graph: offsets (any shape) in, their windows of
    ``samples`` (a CPU tensor [samples, channels]) out, shaped offsets' shape + [window, channels],
    each copied by numpy as one row of a strided view (see the module docstring)."""
    import tensorflow as tf

    shape = [window, int(samples.shape[-1])]

    def windows(offsets: Any) -> Any:
        # One module-level function for every block: TensorFlow's registry of numpy functions holds
        # each function the graphs of a run name (a function of this block's would keep its
        # samples).
        out = tf.numpy_function(_rows, [samples, offsets, window], tf.float32, stateful=False)
        return tf.ensure_shape(out, [*offsets.shape, *shape])

    return windows


def _rows(samples: np.ndarray, offsets: np.ndarray, window: np.ndarray) -> np.ndarray:
    """The windows of ``offsets``: rows of the [starts, window, channels] view of ``samples`` (no
    copy until they are indexed)."""
    rows = np.lib.stride_tricks.sliding_window_view(samples, int(window), axis=0).transpose(0, 2, 1)
    return rows[offsets]


def batch_of(
    windows: Any,
    labels: Any,
    *,
    n_classes: int,
    normalize: Callable[[Any], Any] | None = None,
    class_weights: Any = None,
    augment: Augmenter | None = None,
    step: Any = None,
    targets: int = 0,
) -> tuple[Any, ...]:
    """One batch as a train step takes it, ``(x, y[, sample_weight])``: the ``windows``
    (standardised by ``normalize``, then with ``augment`` augmented as train step ``step``:
    chunkfit.train.augment), the one-hot ``labels`` and, with ``class_weights`` (a tensor,
    one weight per class index), each window's weight. With ``targets`` (a picker's), the windows'
    last ``targets`` columns are ``y``, per sample, and the labels and weights are not used."""
    import tensorflow as tf

    if targets:
        x, y = windows[..., :-targets], windows[..., -targets:]
        return (x if normalize is None else normalize(x)), y
    x = windows if normalize is None else normalize(windows)
    if augment is not None:
        x, labels = augment(x, labels, step)
    y = tf.one_hot(labels, n_classes, dtype=tf.float32)
    return (x, y) if class_weights is None else (x, y, tf.gather(class_weights, labels))


def train_dataset(
    block: BlockTensors, *, batch_size: int, steps: int, window: int | None = None
) -> tf.data.Dataset:
    """The block's training elements for ``Stepper``: ``(offsets [k, batch_size], classes [k,
    batch_size], last)``, whole groups of ``steps`` full batches, then the remaining full batches,
    then the short last batch alone, padded to ``batch_size`` with window 0; ``last`` is how many
    windows the element's last batch really holds. Elements keep the batch size in their shape: a
    train step traced for unknown batch sizes runs slower. With ``window``, an
    element holds the windows of its offsets instead, gathered in tf.data's thread (a core the train
    step does not use; see chunkfit.train.tensorflow.engine).

    Example: 2 * 128 + 5 windows, batch 128, steps 4 -> elements of 2 batches (last 128) and of 1
    (last 5).
    """
    import tensorflow as tf

    b = batch_size
    full, short = divmod(block.n_windows, b)
    groups, rest = divmod(full, steps)
    offsets, labels = block.offsets, block.labels
    gather = None if window is None else host_windows(block.samples, window)
    if short:
        pad = tf.zeros([b - short], dtype=offsets.dtype)
        offsets, labels = tf.concat([offsets, pad], 0), tf.concat([labels, pad], 0)
    parts = [((groups, steps, b), b), ((1, rest, b), b), ((1, 1, b), short)]
    ds = _sliced(
        parts,
        lambda lo, hi, shape, last: (
            tf.reshape(offsets[lo:hi], shape),
            tf.reshape(labels[lo:hi], shape),
            tf.fill([shape[0]], last),
        ),
    )

    def any_length(o: tf.Tensor, y: tf.Tensor, last: tf.Tensor) -> tuple[tf.Tensor, ...]:
        # one spec for every block, whatever its parts (else Keras retraces its train function per
        # block)
        o = tf.raw_ops.PlaceholderWithDefault(input=o, shape=[None, b])
        if gather is not None:
            o = gather(o)
        return (o, tf.raw_ops.PlaceholderWithDefault(input=y, shape=[None, b]), last)

    return _finish(ds.map(any_length))


def eval_dataset(
    block: BlockTensors,
    *,
    window: int,
    batch_size: int,
    n_classes: int,
    normalize: Callable[[Any], Any] | None = None,
    targets: int = 0,
) -> tf.data.Dataset:
    """The block's windows (float32 [b, window, channels], standardised by ``normalize``) and
    one-hot labels (float32 [b, classes]), a batch per element, for ``model.evaluate``. Batches have
    unknown sizes, so that every block matches the test function Keras traced for the first one."""
    import tensorflow as tf

    gather, b = host_windows(block.samples, window), batch_size
    full, short = divmod(block.n_windows, b)

    def windows(offsets: tf.Tensor, labels: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        offsets = tf.raw_ops.PlaceholderWithDefault(input=offsets, shape=[None])
        labels = tf.raw_ops.PlaceholderWithDefault(input=labels, shape=[None])
        return batch_of(
            gather(offsets), labels, n_classes=n_classes, normalize=normalize, targets=targets
        )

    parts = [((full, b), b), ((1, short), short)]
    ds = _sliced(
        parts,
        lambda lo, hi, shape, last: (
            tf.reshape(block.offsets[lo:hi], shape),
            tf.reshape(block.labels[lo:hi], shape),
        ),
    )
    return _finish(ds.map(windows))


def _sliced(
    parts: Sequence[tuple[tuple[int, ...], int]],
    slices: Callable[[int, int, tuple[int, ...], int], tuple[Any, ...]],
) -> tf.data.Dataset:
    """The parts that hold windows, one after the other: each part is (shape of its offsets, windows
    of its elements' last batch), cut from the offsets in order by ``slices(lo, hi, shape, last)``.
    Offsets arrive grouped, a dataset element per batch (or group of batches): slicing single
    windows and batching them again costs tf.data a sizeable share of a small model's step."""
    import tensorflow as tf

    ds, lo = None, 0
    for shape, last in parts:
        hi = lo + math.prod(shape)
        if hi > lo and last:
            part = tf.data.Dataset.from_tensor_slices(slices(lo, hi, shape, last))
            ds = part if ds is None else ds.concatenate(part)
        lo = hi
    assert ds is not None, "a block holds at least one window"
    return ds


def _finish(ds: tf.data.Dataset) -> tf.data.Dataset:
    """A fixed prefetch, and nothing left for tf.data's autotuning: with it on, deleting the
    iterator at the end of a fit call sometimes waited seconds for a tf.data thread; with it off,
    never."""
    import tensorflow as tf

    options = tf.data.Options()
    options.autotune.enabled = False
    return ds.prefetch(2).with_options(options)
