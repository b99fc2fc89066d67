"""The JAX engine's compiled step: a batch's windows gathered from raw samples, then the model's
train step.

A group of blocks crosses into JAX as its raw samples (float32, padded to one length for the
run) and its shuffled window offsets and class indices, never as a (windows x window) array.
Each batch is one ``jax.jit`` call: its windows gathered from the samples, standardised, one-hot
labelled and class-weighted (``batch_of``), then the model's own stateless ``train_step``
(Keras's, or the model's override), so XLA fuses the gather with the first layer. The model's
state (weights, optimizer slots, metric totals) goes in and comes out of each call, donated, so
it is updated in place. Full batches share one compiled step for the run; a short last batch
compiles one of its own per size (the batch size is in the shapes, as in Keras's own fit).

An element's batches run in one of two ways (``--jax-loop``, chosen by timing both when
``auto``: chunkfit.train.jax.loopchoice): ``dispatch``, one compiled call per batch from Python,
JAX dispatching ahead while the steps run; or ``scan``, the element's batches looped inside one
compiled call (``lax.scan``), which spares the per-call dispatch. On a CPU the scan runs a small
model's steps slower than the calls one by one (XLA on the CPU runs a loop's body slower); where a
step is shorter than its dispatch (a GPU) the loop is the faster.

Evaluation is the same with ``test_step``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from ..normalize import Normalizer

if TYPE_CHECKING:
    import keras

    from ..augment import Augmenter


def gather(samples: Any, offsets: Any, window: int) -> Any:
    """The windows ``samples[o : o + window]`` of ``offsets``: float32 [len(offsets), window,
    channels]."""
    import jax.numpy as jnp

    return samples[offsets[:, None] + jnp.arange(window, dtype=offsets.dtype)]


def batch_of(
    samples: Any,
    offsets: Any,
    labels: Any,
    *,
    window: int,
    n_classes: int,
    normalizer: Normalizer,
    class_weights: tuple[float, ...] | None,
    augment: Augmenter | None = None,
    step: Any = None,
    targets: int = 0,
) -> tuple[Any, ...]:
    """One batch as a train step takes it, ``(x, y[, sample_weight])`` (see the module
    docstring); with ``augment``, augmented as train step ``step`` (chunkfit.train.augment); with
    ``targets`` (a picker's), the windows' last ``targets`` columns are ``y``."""
    import jax
    import jax.numpy as jnp

    if targets:
        windows = gather(samples, offsets, window)
        return normalizer.apply(windows[..., :-targets]), windows[..., -targets:]
    x = normalizer.apply(gather(samples, offsets, window))
    if augment is not None:
        x, labels = augment(x, labels, step)
    y = jax.nn.one_hot(labels, n_classes, dtype=jnp.float32)
    if class_weights is None:
        return x, y
    return x, y, jnp.asarray(class_weights, jnp.float32)[labels]


class Steps:
    """The compiled training and evaluation steps of ``model``; see the module docstring."""

    def __init__(
        self,
        model: keras.Model,
        *,
        window: int,
        n_classes: int,
        batch_size: int,
        normalizer: Normalizer,
        class_weights: tuple[float, ...] | None,
        augment: Augmenter | None = None,
        targets: int = 0,
    ) -> None:
        import jax

        batch = partial(
            batch_of, window=window, n_classes=n_classes, normalizer=normalizer, targets=targets
        )
        # The optimizer's step count, in the state a train step takes: augmentation's draws are
        # keyed by it (chunkfit.train.augment).
        counter = (
            0
            if augment is None
            else [v is model.optimizer.iterations for v in model.optimizer.variables].index(True)
        )

        # Class weights weigh training only, as Keras's ``class_weight`` does; augmentation too.
        def train_batch(samples: Any, offsets: Any, labels: Any, state: Any) -> tuple[Any, ...]:
            step = None if augment is None else state[2][counter]
            return batch(
                samples, offsets, labels, class_weights=class_weights, augment=augment, step=step
            )

        def test_batch(samples: Any, offsets: Any, labels: Any, state: Any) -> tuple[Any, ...]:
            return batch(samples, offsets, labels, class_weights=None)

        self._train = jax.jit(
            partial(self._single, model.train_step, train_batch), donate_argnums=0
        )
        self._test = jax.jit(partial(self._single, model.test_step, test_batch), donate_argnums=0)
        looped = partial(self._scan, batch_size=batch_size)
        self._train_scan = jax.jit(
            partial(looped, model.train_step, train_batch),
            donate_argnums=0,
            static_argnames="batches",
        )
        self._test_scan = jax.jit(
            partial(looped, model.test_step, test_batch),
            donate_argnums=0,
            static_argnames="batches",
        )

    @staticmethod
    def _single(
        step: Callable[..., Any],
        batch: Callable[..., tuple[Any, ...]],
        state: Any,
        samples: Any,
        offsets: Any,
        labels: Any,
    ) -> Any:
        logs, state = step(state, batch(samples, offsets, labels, state))
        return state, logs

    @staticmethod
    def _scan(
        step: Callable[..., Any],
        batch: Callable[..., tuple[Any, ...]],
        state: Any,
        samples: Any,
        offsets: Any,
        labels: Any,
        first: Any,
        *,
        batch_size: int,
        batches: int,
    ) -> Any:
        """``batches`` full batches in turn, inside one call: the group's offsets and classes stay
        on the device whole, and each batch is sliced from them from window ``first`` on."""
        import jax

        def body(state: Any, k: Any) -> tuple[Any, Any]:
            at = first + k * batch_size
            o = jax.lax.dynamic_slice_in_dim(offsets, at, batch_size)
            y = jax.lax.dynamic_slice_in_dim(labels, at, batch_size)
            logs, state = step(state, batch(samples, o, y, state))
            return state, logs

        state, logs = jax.lax.scan(body, state, jax.numpy.arange(batches, dtype=offsets.dtype))
        return state, jax.tree.map(lambda v: v[-1], logs)

    def train(
        self, state: Any, samples: Any, offsets: np.ndarray, labels: np.ndarray
    ) -> tuple[Any, Any]:
        """The batches ``offsets[k]``, ``labels[k]`` in turn, one compiled step each: (state, last
        logs)."""
        return self._run(self._train, state, samples, offsets, labels)

    def test(
        self, state: Any, samples: Any, offsets: np.ndarray, labels: np.ndarray
    ) -> tuple[Any, Any]:
        return self._run(self._test, state, samples, offsets, labels)

    def train_scan(
        self, state: Any, samples: Any, offsets: Any, labels: Any, first: int, batches: int
    ) -> tuple[Any, Any]:
        """``batches`` full batches of a group from window ``first``, in one compiled call (compiled
        once per number of batches): ``offsets`` and ``labels`` are the group's, on the device."""
        return self._train_scan(state, samples, offsets, labels, first, batches=batches)

    def test_scan(
        self, state: Any, samples: Any, offsets: Any, labels: Any, first: int, batches: int
    ) -> tuple[Any, Any]:
        return self._test_scan(state, samples, offsets, labels, first, batches=batches)

    @staticmethod
    def _run(
        step: Any, state: Any, samples: Any, offsets: np.ndarray, labels: np.ndarray
    ) -> tuple[Any, Any]:
        logs = None
        for o, y in zip(offsets, labels, strict=True):  # JAX dispatches ahead while the steps run
            state, logs = step(state, samples, o, y)
        return state, logs


def scan_sizes(batches: int, steps: int) -> tuple[list[int], int]:
    """How the scan runs ``batches`` full batches of an element of up to ``steps``: ([batches] for a
    full element, else powers of two down to MIN_SCAN, so that a few compiled lengths serve every
    group's last element), and how many batches are left over for one call each."""
    if batches == steps:
        return [steps], 0
    sizes, size = [], 1 << (max(batches, 1).bit_length() - 1)
    while size >= MIN_SCAN:
        if batches >= size:
            sizes.append(size)
            batches -= size
        size >>= 1
    return sizes, batches


MIN_SCAN = 16  # shorter runs of batches are called one by one: fewer compiled lengths


def train_state(model: keras.Model) -> tuple[list[Any], ...]:
    """The model's state as ``train_step`` takes it, read from its Keras variables."""
    return (
        [v.value for v in model.trainable_variables],
        [v.value for v in model.non_trainable_variables],
        [v.value for v in model.optimizer.variables],
        [v.value for v in model.metrics_variables],
    )


def test_state(model: keras.Model) -> tuple[list[Any], ...]:
    """The model's state as ``test_step`` takes it."""
    return (
        [v.value for v in model.trainable_variables],
        [v.value for v in model.non_trainable_variables],
        [v.value for v in model.metrics_variables],
    )


def put_state(model: keras.Model, state: tuple[list[Any], ...]) -> None:
    """Write a train (four lists) or test (three) state back into the model's Keras variables."""
    groups = [model.trainable_variables, model.non_trainable_variables]
    groups += [model.optimizer.variables] if len(state) == 4 else []
    groups += [model.metrics_variables]
    for variables, values in zip(groups, state, strict=True):
        for var, value in zip(variables, values, strict=True):
            var.assign(value)


def python_logs(logs: dict[str, Any]) -> dict[str, Any]:
    """Logs as Python floats (what callbacks get), waiting for the element to finish (one
    transfer)."""
    import jax

    logs = jax.device_get(logs)
    return {k: float(np.asarray(v)) if np.ndim(v) == 0 else np.asarray(v) for k, v in logs.items()}
