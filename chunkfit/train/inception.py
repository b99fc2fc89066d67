"""The ``inception-time`` built-in: an InceptionTime-style classifier sized for a CPU.

InceptionTime (Ismail Fawaz et al., 2020) stacks inception modules: a 1x1 bottleneck convolution,
three parallel convolutions of long, medium and short kernels beside a max-pooling branch, then
batch normalisation and ReLU; a residual shortcut spans every three modules; global average
pooling and softmax end it. The paper's kernels (40, 20, 10) suit windows of hundreds of samples;
here the longest kernel scales with the window (``inception_kernels``), and depth 6 with 16
filters keeps a training step affordable on a few CPU cores.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import keras

DEPTH = 6
FILTERS = 16


def inception_kernels(window: int) -> tuple[int, int, int]:
    """The three kernel lengths of a module for ``window``: the longest a quarter of the window,
    between 4 and 40 samples, then a half and a quarter of it (at least 1).

    Example: window 200 -> (40, 20, 10); window 104 -> (26, 13, 6); window 20 -> (5, 2, 1).
    """
    longest = min(40, max(4, window // 4))
    return longest, max(1, longest // 2), max(1, longest // 4)


def _module(x: Any, kernels: tuple[int, int, int], filters: int) -> Any:
    from keras import layers

    neck = layers.Conv1D(filters, 1, padding="same", use_bias=False)(x) if x.shape[-1] > 1 else x
    branches = [layers.Conv1D(filters, k, padding="same", use_bias=False)(neck) for k in kernels]
    pooled = layers.MaxPooling1D(3, strides=1, padding="same")(x)
    branches.append(layers.Conv1D(filters, 1, padding="same", use_bias=False)(pooled))
    h = layers.Concatenate(axis=-1)(branches)
    return layers.Activation("relu")(layers.BatchNormalization()(h))


def _shortcut(block_in: Any, out: Any) -> Any:
    from keras import layers

    s = layers.Conv1D(int(out.shape[-1]), 1, padding="same", use_bias=False)(block_in)
    s = layers.BatchNormalization()(s)
    return layers.Activation("relu")(layers.Add()([s, out]))


def inception_time(
    window: int, n_channels: int, n_classes: int, depth: int = DEPTH, filters: int = FILTERS
) -> keras.Model:
    """InceptionTime-style network: ``depth`` inception modules of ``filters`` per branch, a
    residual shortcut every 3, global average pooling, softmax over ``n_classes``."""
    import keras
    from keras import layers

    kernels = inception_kernels(window)
    x = keras.Input((window, n_channels))
    h, block_in = x, x
    for d in range(depth):
        h = _module(h, kernels, filters)
        if d % 3 == 2:
            h = block_in = _shortcut(block_in, h)
    pooled = layers.GlobalAveragePooling1D()(h)
    y = layers.Dense(n_classes, activation="softmax")(pooled)
    return keras.Model(x, y, name="inception_time")
