"""chunkfit.train.tensorflow.stepper.Stepper on chunkfit.train.tensorflow.pipeline.train_dataset,
against plain model.fit on the same windows."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf

from chunkfit.core.blocks import BlockData
from chunkfit.train.models import build_model, compile_model
from chunkfit.train.steps import element_steps, step_batches
from chunkfit.train.tensorflow.pipeline import (
    eval_dataset,
    host_windows,
    to_tensors,
    train_dataset,
    train_element_spec,
    windows_at,
)
from chunkfit.train.tensorflow.stepper import Stepper, _deferrable

WINDOW, BATCH = 12, 16


class _LossOnly(keras.Sequential):
    """A model with its own train_step, whose logs are not its metric results."""

    def train_step(self, data: Any) -> Any:
        return {"loss": super().train_step(data)["loss"]}


class _LastBatchMean(keras.metrics.Metric):
    """A user's metric that does not add up across batches: the event class's mean prediction on the
    last batch it saw."""

    def __init__(self, name: str = "last_batch_mean", **kwargs: Any) -> None:
        super().__init__(name=name, **kwargs)
        self.value = self.add_variable(shape=(), initializer="zeros", name="value")

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        self.value.assign(keras.ops.mean(y_pred[:, 1]))

    def result(self) -> Any:
        return self.value


def _block(n_windows: int, seed: int = 0) -> BlockData:
    rng = np.random.default_rng(seed)
    samples = rng.normal(size=(n_windows + WINDOW - 1, 1)).astype(np.float32)
    offsets = rng.permutation(n_windows).astype(np.int32)
    labels = rng.integers(0, 2, n_windows).astype(np.int32)
    return BlockData((), samples, offsets, labels)


def _twins(custom: bool) -> tuple[keras.Model, keras.Model]:
    keras.utils.set_random_seed(1)
    ours = build_model("baseline-cnn", WINDOW, 1, 2)
    theirs = keras.models.clone_model(ours)
    theirs.set_weights(ours.get_weights())
    if custom:
        ours, theirs = (_LossOnly(m.layers, name="loss_only") for m in (ours, theirs))
    for model in (ours, theirs):
        compile_model(model, optimizer=None, lr=None, loss=None, steps_per_execution=1)
    return ours, theirs


@pytest.mark.parametrize(
    "gathered", [False, True]
)  # True: the windows gathered in tf.data, not in the step
@pytest.mark.parametrize("custom", [False, True])
@pytest.mark.parametrize(
    ("n_windows", "steps", "eager"),
    [
        (5 * BATCH + 7, 2, False),
        (3 * BATCH, 2, False),
        (9, 4, False),
        (4 * BATCH + 1, 1, False),
        (
            3 * BATCH + 5,
            2,
            True,
        ),  # Keras's own loop, as under a distribution strategy: Stepper.train_step
    ],
)
def test_stepper_trains_every_batch_as_model_fit_does_short_last_batch_included(
    n_windows: int, steps: int, eager: bool, custom: bool, gathered: bool
) -> None:
    data = _block(n_windows)
    ours, theirs = _twins(custom)
    block = to_tensors(data)
    ds = train_dataset(block, batch_size=BATCH, steps=steps, window=WINDOW if gathered else None)
    assert ds.element_spec == train_element_spec(BATCH, WINDOW if gathered else None)
    stepper = Stepper(ours, window=WINDOW, n_classes=2, gathered=gathered)
    stepper.run_eagerly = eager
    history = stepper.fit(ds, samples=block.samples, epochs=1, verbose=0, shuffle=False)

    windows = np.stack([data.samples[o : o + WINDOW] for o in data.offsets])
    expected = theirs.fit(
        windows,
        keras.utils.to_categorical(data.labels, 2),
        batch_size=BATCH,
        shuffle=False,
        verbose=0,
    )
    batches = -(-n_windows // BATCH)
    assert (
        int(ours.optimizer.iterations.numpy())
        == int(theirs.optimizer.iterations.numpy())
        == batches
    )
    for a, b in zip(ours.get_weights(), theirs.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    if (
        not custom
    ):  # a custom train_step's logs are those of its last batch, under Keras's fit as here
        # Keras's own metrics, updated once per element of several batches: the same as batch by
        # batch.
        assert _deferrable(ours, 2)
        results = {k: float(v) for k, v in ours.get_metrics_result().items()}
        assert (
            set(results)
            == set(expected.history)
            == {"loss", "pr_auc", "precision", "recall", "accuracy"}
        )
        for name, values in expected.history.items():
            assert results[name] == pytest.approx(values[-1], rel=1e-5), name
    assert history is None or isinstance(history, keras.callbacks.History)


@pytest.mark.parametrize("gathered", [False, True])
def test_a_metric_of_the_users_own_is_updated_batch_by_batch_as_model_fit_does(
    gathered: bool,
) -> None:
    """Keras's own metrics are updated once per element (they add up); a user's metric might not,
    and is updated after each batch: its last-batch value is fit's, not the element's."""
    data = _block(6 * BATCH, seed=5)
    ours, theirs = _twins(custom=False)
    for model in (ours, theirs):
        model.compile(
            optimizer="adam",
            loss="categorical_crossentropy",
            metrics=[_LastBatchMean(), "accuracy"],
        )
    block = to_tensors(data)
    stepper = Stepper(ours, window=WINDOW, n_classes=2, gathered=gathered)
    stepper.fit(
        train_dataset(block, batch_size=BATCH, steps=3, window=WINDOW if gathered else None),
        samples=block.samples,
        epochs=1,
        verbose=0,
        shuffle=False,
    )
    assert not _deferrable(ours, 2)

    windows = np.stack([data.samples[o : o + WINDOW] for o in data.offsets])
    expected = theirs.fit(
        windows,
        keras.utils.to_categorical(data.labels, 2),
        batch_size=BATCH,
        shuffle=False,
        verbose=0,
    )
    results = {k: float(v) for k, v in ours.get_metrics_result().items()}
    for name in ("loss", "last_batch_mean", "accuracy"):
        assert results[name] == pytest.approx(expected.history[name][-1], rel=1e-5), name


def test_training_elements_keep_the_batch_size_in_their_shape_and_pad_the_short_batch() -> None:
    n_windows = 2 * BATCH + 5
    data = _block(n_windows)
    ds = train_dataset(to_tensors(data), batch_size=BATCH, steps=4)
    offsets_spec, labels_spec, _ = ds.element_spec
    assert offsets_spec.shape.as_list() == labels_spec.shape.as_list() == [None, BATCH]
    elements = list(ds)
    assert [(int(o.shape[0]), int(last)) for o, _, last in elements] == [(2, BATCH), (1, 5)]
    assert [int(o.shape[0]) for o, _, _ in elements] == step_batches(n_windows, BATCH, 4)
    offsets = np.concatenate([o.numpy().ravel() for o, _, _ in elements])
    labels = np.concatenate([y.numpy().ravel() for _, y, _ in elements])
    np.testing.assert_array_equal(offsets[:n_windows], data.offsets)
    np.testing.assert_array_equal(labels[:n_windows], data.labels)
    assert not offsets[n_windows:].any()  # padded with window 0, which the short step leaves out


def test_evaluation_batches_have_unknown_sizes_and_no_padding() -> None:
    ds = eval_dataset(to_tensors(_block(BATCH + 3)), window=WINDOW, batch_size=BATCH, n_classes=2)
    assert ds.element_spec[0].shape.as_list() == [None, WINDOW, 1]
    assert [int(x.shape[0]) for x, _ in ds] == [BATCH, 3]


def test_samples_padded_to_a_capacity_keep_their_values_and_add_zeros() -> None:
    data = _block(40)
    padded = to_tensors(data, capacity=100).samples.numpy()
    assert padded.shape == (100, 1)
    np.testing.assert_array_equal(padded[: data.samples.shape[0]], data.samples)
    assert not padded[data.samples.shape[0] :].any()
    assert to_tensors(data, capacity=10).samples.shape == data.samples.shape  # never cut


def test_the_windows_the_input_pipeline_copies_are_those_the_step_gathers() -> None:
    rng = np.random.default_rng(6)
    samples = tf.constant(rng.normal(size=(300, 3)).astype(np.float32))
    offsets = tf.constant(rng.integers(0, 300 - WINDOW + 1, (4, 5)).astype(np.int32))
    copied = host_windows(samples, WINDOW)(offsets)
    assert copied.shape == (4, 5, WINDOW, 3)
    np.testing.assert_array_equal(copied.numpy(), windows_at(samples, offsets, WINDOW).numpy())
    last = host_windows(samples, WINDOW)(tf.constant([300 - WINDOW]))  # the last window there is
    np.testing.assert_array_equal(last.numpy()[0], samples.numpy()[-WINDOW:])


@pytest.mark.usefixtures("no_op_determinism")
@pytest.mark.parametrize(
    ("jit", "gathered"), [(False, False), (True, False), (False, True), (True, True)]
)
def test_padded_samples_class_weights_and_standardisation_train_as_model_fit_with_class_weight(
    jit: bool, gathered: bool
) -> None:
    """What a run hands the step: samples padded to the run's capacity, windows (gathered in the
    step, or in the input pipeline) standardised and weighted by class inside the step; as Keras's
    fit on the standardised windows with class_weight."""
    n_windows = 4 * BATCH + 9
    data = _block(n_windows, seed=3)
    ours, theirs = _twins(custom=False)
    block = to_tensors(data, capacity=data.samples.shape[0] + 500)
    weights = [0.5, 3.0]
    stepper = Stepper(
        ours,
        window=WINDOW,
        n_classes=2,
        jit=jit,
        normalize=lambda x: (x - 0.25) / 2.0,
        class_weights=weights,
        gathered=gathered,
    )
    stepper.fit(
        train_dataset(block, batch_size=BATCH, steps=3, window=WINDOW if gathered else None),
        samples=block.samples,
        epochs=1,
        verbose=0,
        shuffle=False,
    )

    windows = (np.stack([data.samples[o : o + WINDOW] for o in data.offsets]) - 0.25) / 2.0
    expected = theirs.fit(
        windows,
        keras.utils.to_categorical(data.labels, 2),
        batch_size=BATCH,
        shuffle=False,
        class_weight={0: weights[0], 1: weights[1]},
        verbose=0,
    )
    for a, b in zip(ours.get_weights(), theirs.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    results = {k: float(v) for k, v in ours.get_metrics_result().items()}
    for name, values in expected.history.items():  # weighted metrics, updated once per element
        assert results[name] == pytest.approx(values[-1], rel=1e-4), name


@pytest.mark.parametrize(
    ("batch", "window", "channels", "expected"),
    [
        (128, 104, 1, 256),  # the original question's problem: 13 MB of windows per element
        (128, 1000, 16, 2),  # 8 MB a batch: two batches
        (4096, 4096, 8, 1),  # one batch over the limit is still one batch
    ],
)
def test_default_steps_per_element_stay_within_the_element_size(
    batch: int, window: int, channels: int, expected: int
) -> None:
    assert element_steps(batch, window, channels) == expected


class _Counting(Stepper):
    def __init__(self, model: keras.Model) -> None:
        super().__init__(model, window=WINDOW, n_classes=2)
        self.traces = {"whole": 0, "short": 0}

    def _train_whole(self, one_step: Any, *parts: Any) -> Any:
        self.traces["whole"] += 1  # runs once per trace of the compiled step
        return super()._train_whole(one_step, *parts)

    def _train_kept(self, one_step: Any, *parts: Any) -> Any:  # the loop for Keras's own metrics
        self.traces["whole"] += 1
        return super()._train_kept(one_step, *parts)

    def _train_short(self, *parts: Any) -> Any:
        self.traces["short"] += 1
        return super()._train_short(*parts)


@pytest.mark.parametrize("prepared", [False, True])
def test_blocks_of_other_sizes_and_short_batches_reuse_the_compiled_steps(prepared: bool) -> None:
    """Each compiled step is traced once, for the first block (or by ``prepare``, before any
    data)."""
    ours, _ = _twins(custom=False)
    stepper = _Counting(ours)
    if prepared:
        before = [w.copy() for w in ours.get_weights()]
        stepper.prepare(train_element_spec(BATCH), 1)
        assert stepper.traces == {"whole": 1, "short": 0}
        assert int(ours.optimizer.iterations.numpy()) == 0
        assert all(np.array_equal(a, b) for a, b in zip(before, ours.get_weights(), strict=True))
    for n_windows in (3 * BATCH + 2, 5 * BATCH + 11, 2 * BATCH, 7):
        block = to_tensors(_block(n_windows, seed=n_windows))
        ds = train_dataset(block, batch_size=BATCH, steps=2)
        assert ds.element_spec == train_element_spec(BATCH)
        stepper.fit(ds, samples=block.samples, epochs=1, verbose=0, shuffle=False)
    assert stepper.traces == {"whole": 1, "short": 1}
    assert int(ours.optimizer.iterations.numpy()) == 4 + 6 + 2 + 1


@pytest.mark.usefixtures("no_op_determinism")
@pytest.mark.parametrize("custom", [False, True])
def test_the_xla_step_trains_every_batch_as_model_fit_does(custom: bool) -> None:
    """``jit``: the full batches' step under XLA; same weights and logs as fit, to XLA's
    rounding."""
    n_windows = 5 * BATCH + 7
    data = _block(n_windows)
    ours, theirs = _twins(custom)
    block = to_tensors(data)
    stepper = Stepper(ours, window=WINDOW, n_classes=2, jit=True)
    stepper.fit(
        train_dataset(block, batch_size=BATCH, steps=2),
        samples=block.samples,
        epochs=1,
        verbose=0,
        shuffle=False,
    )
    assert list(stepper._wholes) == [True]  # only the XLA loop was built and ran
    windows = np.stack([data.samples[o : o + WINDOW] for o in data.offsets])
    expected = theirs.fit(
        windows,
        keras.utils.to_categorical(data.labels, 2),
        batch_size=BATCH,
        shuffle=False,
        verbose=0,
    )
    assert int(ours.optimizer.iterations.numpy()) == -(-n_windows // BATCH)
    for a, b in zip(ours.get_weights(), theirs.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    if not custom:
        results = {k: float(v) for k, v in ours.get_metrics_result().items()}
        assert results["loss"] == pytest.approx(expected.history["loss"][-1], rel=1e-4)
