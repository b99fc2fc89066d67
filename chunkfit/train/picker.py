"""The ``picker`` built-in: a 1-D U-Net that outputs an event probability for every sample.

In the manner of PhaseNet (Zhu and Beroza, 2019): convolutions of kernel 7 with batch norm and ReLU,
``levels`` down-sampling steps by 2 (strided convolutions, more filters at each), as many
up-sampling steps back, each concatenated with the encoder's output of its length (the skip
connections), and a 1x1 convolution with a sigmoid: float32 [batch, window, 1]. The window is
zero-padded at its end to a multiple of 2**levels and the output cropped back to it.
It trains on per-sample targets made from the markers (chunkfit.core.picks.pick_targets).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import keras

# Built-ins that score every sample of the window (chunkfit.core.picks), not the window as a whole.
PICKERS = frozenset({"picker"})
FILTERS = (8, 12, 16, 24, 32)
KERNEL = 7


def picker_levels(window: int) -> int:
    """Down-sampling steps for ``window``: about log2(window / 8), between 1 and 4.

    Example: window 32 -> 2; 200 -> 4; 12 -> 1.
    """
    return min(len(FILTERS) - 1, max(1, int(math.log2(max(window, 8) / 8))))


def _conv(x: Any, filters: int, strides: int = 1) -> Any:
    from keras import layers

    h = layers.Conv1D(filters, KERNEL, strides=strides, padding="same", use_bias=False)(x)
    return layers.Activation("relu")(layers.BatchNormalization()(h))


def picker(window: int, n_channels: int, n_classes: int = 2) -> keras.Model:
    """The dense picker: [batch, window, channels] in, [batch, window, 1] event probabilities out.

    ``n_classes`` is taken for the built-ins' signature; a picker scores one class, the event.
    """
    import keras
    from keras import layers

    levels = picker_levels(window)
    size = -(-window // 2**levels) * 2**levels
    x = keras.Input((window, n_channels))
    h = layers.ZeroPadding1D((0, size - window))(x) if size > window else x
    h = _conv(h, FILTERS[0])
    skips = []
    for level in range(levels):
        skips.append(h)
        h = _conv(h, FILTERS[level + 1], strides=2)
        h = _conv(h, FILTERS[level + 1])
    for level in reversed(range(levels)):
        h = layers.UpSampling1D(2)(h)
        h = _conv(h, FILTERS[level])
        h = _conv(layers.Concatenate()([h, skips[level]]), FILTERS[level])
    y = layers.Conv1D(1, 1, activation="sigmoid")(h)
    if size > window:
        y = layers.Cropping1D((0, size - window))(y)
    return keras.Model(x, y, name="picker")


def pick_width_of(model: Any, opts: Any) -> int | None:
    """The target width a run trains ``model`` on when it is a picker (``opts.pick_width``, else
    chunkfit.core.picks.DEFAULT_PICK_WIDTH); None for a classifier."""
    from ..core.picks import DEFAULT_PICK_WIDTH

    if not (isinstance(model, str) and model in PICKERS):
        return None
    return opts.pick_width if opts.pick_width is not None else DEFAULT_PICK_WIDTH
