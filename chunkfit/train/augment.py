"""Augmentation of training batches inside the compiled train step, one code for every engine.

``Augmenter`` is written with ``keras.ops`` and ``keras.random`` only, so the TensorFlow step
(chunkfit.train.tensorflow.pipeline.batch_of, and the replicas' step) and the JAX step
(chunkfit.train.jax.steps.batch_of) run the same transforms, traced into their compiled steps. It
acts on a batch's windows once they are gathered and standardised (``--normalize``), before the
one-hot labels and class weights are made from its (possibly changed) class indices, so class
weights weigh each window by the class it ends up with. Validation, evaluate, predict and follow
never call it, and nothing of it is in the saved model.

Each window of the batch, independently, in this order (see ``AugmentSpec`` for the flag):

- ``mix=P``: a window of class 0 (no event) gets, with probability P, the waveform of a window of
  another class drawn from the same batch added to it (that window less its own mean per channel),
  and takes that window's class. A batch without such windows is left as it is.
- ``gain=G``: multiplied by a factor drawn uniformly in [1 - G, 1 + G].
- ``flip``: multiplied by -1 with probability 1/2.
- ``offset=O``: a level drawn uniformly in [-O, O] added to every sample (per channel), in the
  units the model sees (standard deviations of the training split under ``--normalize global``).
- ``shift=S``: rolled in time by a whole number of samples drawn uniformly in [-S, S]; the samples
  pushed out at one end come back at the other, so every sample, and every event, stays inside the
  window and the label is unchanged (refused for ``--label last``, whose label is one sample's).
- ``noise=D``: Gaussian noise added whose standard deviation is drawn uniformly between 0 and the
  window's own standard deviation (per channel) times 10^(-D/20): the signal-to-noise ratio is D dB
  or better.

The draws are stateless: each is a function of the run's seed, the transform, and the optimizer's
step count (its ``iterations``, the number of batches trained so far), which a checkpoint restores.
So the batch of a given (epoch, group, step) is augmented alike in a run resumed after a kill as in
one that ran through; the engines give the same transforms different draws (their random number
generators differ).
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from ..config import AugmentSpec

# Each transform draws from a stream of its own, so turning one on does not change another's draws.
_STREAMS = ("mix", "pick", "gain", "flip", "offset", "shift", "noise")


class _Key(keras.random.SeedGenerator):
    """A fixed seed tensor, passed where ``keras.random`` takes a ``SeedGenerator``: Keras's
    random functions take an integer or a generator, and a generator's state is a variable that
    moves; this one returns the same (stream, step) key each time, inside a compiled step."""

    def __init__(self, key: Any) -> None:  # no state variable: nothing to track or save
        self.key = key

    def next(self, ordered: bool = True) -> Any:
        return self.key


class Augmenter:
    """The transforms of ``spec``, drawn from ``seed``; see the module docstring."""

    def __init__(self, spec: AugmentSpec, seed: int) -> None:
        self.spec = spec
        # one 31-bit seed per stream, the same on every backend
        self._seeds = {
            s: (seed * 7919 + 104729 * (i + 1)) % (2**31 - 1) for i, s in enumerate(_STREAMS)
        }

    def __call__(self, x: Any, labels: Any, step: Any) -> tuple[Any, Any]:
        """The augmented windows ``x`` (float32 [batch, window, channels]) and their class indices
        (int [batch]), for the train step numbered ``step`` (an integer tensor)."""
        spec = self.spec
        b = ops.shape(x)[0]
        one = (b, 1, 1)
        if spec.mix > 0:
            x, labels = self._mix(x, labels, step)
        if spec.gain > 0:
            x = x * self._uniform("gain", step, one, 1.0 - spec.gain, 1.0 + spec.gain)
        if spec.flip:
            sign = ops.where(self._uniform("flip", step, one) < 0.5, -1.0, 1.0)
            x = x * ops.cast(sign, x.dtype)
        if spec.offset > 0:
            shape = (b, 1, ops.shape(x)[2])
            x = x + self._uniform("offset", step, shape, -spec.offset, spec.offset)
        if spec.shift > 0:
            x = self._roll(x, step)
        if spec.noise is not None:
            std = ops.std(x, axis=1, keepdims=True) * (10.0 ** (-spec.noise / 20.0))
            scale = std * self._uniform("noise", step, (b, 1, ops.shape(x)[2]))
            x = x + scale * keras.random.normal(ops.shape(x), seed=self._key("noise", step))
        return x, labels

    def _key(self, stream: str, step: Any) -> _Key:
        # JAX's keys are uint32; TensorFlow's stateless ops take int32 (int64 would be folded)
        dtype = "uint32" if keras.backend.backend() == "jax" else "int32"
        seed = ops.convert_to_tensor(self._seeds[stream], dtype=dtype)
        return _Key(ops.stack([seed, ops.cast(step, dtype)]))

    def _uniform(
        self, stream: str, step: Any, shape: Any, low: float = 0.0, high: float = 1.0
    ) -> Any:
        return keras.random.uniform(shape, low, high, seed=self._key(stream, step))

    def _mix(self, x: Any, labels: Any, step: Any) -> tuple[Any, Any]:
        """Negative windows (class 0) with an event window of the batch added, drawn uniformly
        among the batch's events, and labelled with its class."""
        b = ops.shape(x)[0]
        index = ops.arange(b)
        event = ops.not_equal(labels, 0)
        n = ops.sum(ops.cast(event, "int32"))
        # the batch's event windows first, each group in batch order: distinct keys, no ties
        order = ops.argsort(ops.where(event, index, index + b))
        draw = ops.cast(self._uniform("pick", step, (b,)) * ops.cast(n, "float32"), "int32")
        partner = ops.take(order, ops.minimum(draw, ops.maximum(n - 1, 0)))
        chosen = ops.logical_and(
            ops.logical_and(ops.logical_not(event), n > 0),
            self._uniform("mix", step, (b,)) < self.spec.mix,
        )
        wave = x - ops.mean(x, axis=1, keepdims=True)
        added = ops.take(wave, partner, axis=0)
        x = ops.where(chosen[:, None, None], x + added, x)
        labels = ops.where(chosen, ops.take(labels, partner), labels)
        return x, labels

    def _roll(self, x: Any, step: Any) -> Any:
        """Each window rolled by its own whole number of samples in [-shift, shift]."""
        s, (b, w, c) = self.spec.shift, ops.shape(x)
        d = ops.floor(self._uniform("shift", step, (b, 1), -s, s + 1.0))
        at = ops.mod(ops.arange(w)[None, :] - ops.cast(d, "int32"), w)
        return ops.take_along_axis(x, ops.broadcast_to(at[:, :, None], (b, w, c)), axis=1)


def augmenter_for(spec: AugmentSpec, seed: int) -> Augmenter | None:
    """The run's augmenter, or None when ``spec`` turns nothing on."""
    return Augmenter(spec, seed) if spec.on else None
