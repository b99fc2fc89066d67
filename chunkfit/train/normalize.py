"""Inputs in any units: the standardisation a run applies to its windows, and the layer that carries
it.

- ``global`` (the default): per channel, (x - mean) / std, with mean and std of the **training
  split only** (validation ranges are never looked at), streamed from the store in bounded memory;
- ``window``: each window, per channel, minus its own mean and over its own standard deviation
  (robust to gain and offset drifting between recordings);
- ``none``: the raw samples.

Training applies it where the windows are gathered (chunkfit.train.tensorflow.pipeline: inside the
compiled train step; in the input graph for validation), to the user's model
untouched; the saved model is the trained model behind a built-in Keras layer doing the same
(``Normalization`` or ``LayerNormalization`` over time), so ``model.keras`` takes raw signal
anywhere: evaluate, predict, or a user's own ``keras.saving.load_model`` + ``predict``.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import WindowError
from ..store import Store
from ..store.layout import empty_stats, merge_stats

if TYPE_CHECKING:
    import keras

_PIECE = 1 << 20  # samples per read while computing statistics
_TINY = 1e-3  # a flat window's scale floor, as a share of the channel's training std


@dataclasses.dataclass(frozen=True)
class Normalizer:
    """What a run does to every window before the model sees it; see the module docstring.

    ``mean`` and ``std`` are per channel, of the training split (kept for ``window`` too, where they
    set the floor ``epsilon`` under a flat window's variance).
    """

    mode: str
    mean: tuple[float, ...] = ()
    std: tuple[float, ...] = ()

    @property
    def epsilon(self) -> float:
        """Added to a window's variance (``window``) or the smallest std allowed (``global``)."""
        smallest = min((s for s in self.std if s > 0), default=1.0)
        return (
            float(max((_TINY * smallest) ** 2, 1e-12))
            if self.mode == "window"
            else float(max(_TINY * smallest, 1e-12))
        )

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "mean": list(self.mean), "std": list(self.std)}

    def apply(self, x: Any) -> Any:
        """The standardised windows of a float32 tensor [..., window, channels] of the process's
        Keras backend, inside the compiled step that gathers them (every engine's: written with
        ``keras.ops``, which compiles to the same speed as each backend's own ops)."""
        from keras import ops

        if self.mode == "none":
            return x
        if self.mode == "global":
            mean = ops.convert_to_tensor(np.asarray(self.mean, np.float32))
            scale = ops.maximum(
                ops.convert_to_tensor(np.asarray(self.std, np.float32)), self.epsilon
            )
            return (x - mean) / scale
        mean = ops.mean(x, axis=-2, keepdims=True)
        var = ops.mean(ops.square(x - mean), axis=-2, keepdims=True)
        return (x - mean) * ops.rsqrt(var + self.epsilon)

    def wrap(self, model: keras.Model) -> keras.Model:
        """``model`` behind a built-in layer doing ``apply``: the model that takes raw signal."""
        import keras

        if self.mode == "none":
            return model
        window, channels = (
            model.inputs[0].shape[1:] if getattr(model, "inputs", None) else (None, len(self.mean))
        )
        inputs = keras.Input((window, channels), name="raw_signal")
        if self.mode == "global":
            std = np.maximum(np.asarray(self.std, dtype=np.float64), self.epsilon)
            layer = keras.layers.Normalization(
                axis=-1, mean=list(self.mean), variance=list(std**2), name="chunkfit_standardize"
            )
        else:
            layer = keras.layers.LayerNormalization(
                axis=1,
                center=False,
                scale=False,
                epsilon=self.epsilon,
                name="chunkfit_window_standardize",
            )
        return keras.Model(inputs, model(layer(inputs)), name=model.name)


def training_stats(store: Store, ranges: np.ndarray) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and std of the samples in ``ranges`` (the training split), in bounded
    memory."""
    channels = [str(c) for c in range(store.n_channels)]
    stats = empty_stats(channels)
    for a, b in np.asarray(ranges, dtype=np.int64).reshape(-1, 2):
        for lo in range(int(a), int(b), _PIECE):
            merge_stats(stats, channels, store.read(lo, min(int(b), lo + _PIECE)))
    mean = tuple(float(stats[c]["mean"]) for c in channels)
    std = tuple(float(stats[c]["std"]) for c in channels)
    return mean, std


def normalizer_for(mode: str, store: Store, train_ranges: np.ndarray) -> Normalizer:
    """The run's normalizer; refuses a training split whose channels hold no finite value."""
    if mode == "none":
        return Normalizer("none")
    mean, std = training_stats(store, train_ranges)
    bad = [
        store.channels[j]
        for j, (m, s) in enumerate(zip(mean, std, strict=True))
        if not (np.isfinite(m) and np.isfinite(s))
    ]
    if bad:
        raise WindowError(
            f"{store.path}: channel(s) {', '.join(bad)} hold no finite value in the training "
            "split, so they cannot be standardised; re-ingest without NaN (--nan interpolate) or "
            "pass --normalize none"
        )
    return Normalizer(mode, mean, std)
