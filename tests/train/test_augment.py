"""Augmentation inside the train step (chunkfit.train.augment), on each engine's own batch function
applied to a known batch, and in real runs: recorded, off for validation and in the saved model.

The batch: 8 windows of 32 samples x 2 channels, windows 2 and 5 of event classes 1 and 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import keras
import numpy as np
import pytest

import chunkfit
from chunkfit.config import AugmentSpec, FitOptions
from chunkfit.core.windows import any_event_labels
from chunkfit.errors import UsageError
from chunkfit.synth import SynthSpec, balanced_anomalies, synth
from chunkfit.train.augment import Augmenter
from chunkfit.train.normalize import Normalizer

B, W, C = 8, 32, 2
LABELS = np.array([0, 0, 1, 0, 0, 2, 0, 0], np.int32)
WEIGHTS = (1.0, 5.0, 7.0)


def known_batch() -> np.ndarray:
    rng = np.random.default_rng(0)
    return (rng.normal(size=(B, W, C)) + np.arange(B)[:, None, None]).astype(np.float32)


def engine_batch(text: str, step: int = 3, labels: np.ndarray = LABELS) -> tuple[np.ndarray, ...]:
    """(x, one-hot y, weights) of the engine's train batch function for the known batch, augmented
    by ``text`` (``none``: plain) as train step ``step``."""
    spec = AugmentSpec.parse(text)
    augment = Augmenter(spec, seed=11) if spec.on else None
    windows = known_batch()
    if keras.backend.backend() == "jax":
        import jax.numpy as jnp

        from chunkfit.train.jax.steps import batch_of as jax_batch

        samples = windows.reshape(B * W, C)  # window k starts at sample k * W
        out = jax_batch(
            jnp.asarray(samples),
            jnp.arange(B, dtype=jnp.int32) * W,
            jnp.asarray(labels),
            window=W,
            n_classes=3,
            normalizer=Normalizer("none", (0.0,) * C, (1.0,) * C),
            class_weights=WEIGHTS,
            augment=augment,
            step=jnp.asarray(step),
        )
    else:
        import tensorflow as tf

        from chunkfit.train.tensorflow.pipeline import batch_of as tf_batch

        out = tf_batch(
            tf.constant(windows),
            tf.constant(labels),
            n_classes=3,
            class_weights=tf.constant(WEIGHTS),
            augment=augment,
            step=tf.constant(step, tf.int64),
        )
    return tuple(np.asarray(keras.ops.convert_to_numpy(t)) for t in out)


@pytest.mark.backends
def test_the_augmented_batch_differs_from_the_plain_one_in_every_window() -> None:
    plain, augmented = engine_batch("none")[0], engine_batch("noise=20,gain=0.1,flip,shift=4")[0]
    assert np.array_equal(plain, known_batch())
    assert all(not np.allclose(a, p) for a, p in zip(augmented, plain, strict=True))


@pytest.mark.backends
def test_the_same_step_draws_the_same_and_the_next_step_other_values() -> None:
    text = "noise=10,gain=0.2,offset=0.1,flip,shift=4,mix=0.5"
    first, again, later = (
        engine_batch(text, 3)[0],
        engine_batch(text, 3)[0],
        engine_batch(text, 4)[0],
    )
    assert np.array_equal(first, again)
    assert not np.allclose(first, later)


@pytest.mark.backends
def test_flip_multiplies_each_window_by_one_or_minus_one() -> None:
    plain = known_batch()
    signs = {
        s
        for k in range(10)
        for x, p in zip(engine_batch("flip", k)[0], plain, strict=True)
        for s in [1 if np.array_equal(x, p) else -1 if np.array_equal(x, -p) else 0]
    }
    assert signs == {1, -1}


@pytest.mark.backends
def test_gain_scales_each_window_by_one_factor_within_the_range() -> None:
    x, plain = engine_batch("gain=0.1")[0], known_batch()
    factors = (x / plain).reshape(B, -1)
    assert np.allclose(factors, factors[:, :1], rtol=1e-5)
    assert np.all((factors >= 0.9 - 1e-6) & (factors <= 1.1 + 1e-6))


@pytest.mark.backends
def test_offset_adds_one_level_per_window_and_channel_within_the_range() -> None:
    levels = engine_batch("offset=0.5")[0] - known_batch()
    assert np.allclose(levels, levels[:, :1, :], atol=1e-5)
    assert np.all(np.abs(levels) <= 0.5 + 1e-6) and np.ptp(levels) > 0


@pytest.mark.backends
def test_shift_rolls_each_window_by_at_most_the_shift_keeping_every_sample() -> None:
    x, plain = engine_batch("shift=3")[0], known_batch()
    rolls = [
        [d for d in range(-3, 4) if np.array_equal(np.roll(p, d, axis=0), a)]
        for a, p in zip(x, plain, strict=True)
    ]
    assert all(len(r) == 1 for r in rolls)
    assert len({r[0] for r in rolls}) > 1


@pytest.mark.backends
def test_noise_keeps_each_window_at_or_above_the_signal_to_noise_ratio() -> None:
    x, plain = engine_batch("noise=20")[0], known_batch()
    noise, signal = (x - plain).std(axis=1), plain.std(axis=1)
    assert np.all(noise > 0)
    # the noise's standard deviation is drawn up to the window's times 10^(-20/20), measured on
    # 32 samples: allow their spread
    assert np.all(noise <= 1.6 * 0.1 * signal)


@pytest.mark.backends
def test_mix_adds_an_event_window_to_negatives_and_labels_them_with_its_class() -> None:
    x, y, w = engine_batch("mix=1")
    plain = known_batch()
    classes = y.argmax(axis=1)
    assert np.array_equal(x[[2, 5]], plain[[2, 5]]) and list(classes[[2, 5]]) == [1, 2]
    for k in np.flatnonzero(LABELS == 0):
        partner = 2 if classes[k] == 1 else 5
        assert classes[k] in (1, 2)
        wave = plain[partner] - plain[partner].mean(axis=0)
        assert np.allclose(x[k], plain[k] + wave, atol=1e-5)
    # class weights weigh each window by the class it ends up with
    assert np.array_equal(w, np.asarray(WEIGHTS, np.float32)[classes])


@pytest.mark.backends
def test_mix_leaves_a_batch_without_events_as_it_is() -> None:
    none = np.zeros(B, np.int32)
    x, y, _ = engine_batch("mix=1", labels=none)
    assert np.array_equal(x, known_batch()) and np.all(y.argmax(axis=1) == 0)


def test_the_spec_reads_back_from_its_text_and_from_run_json() -> None:
    spec = AugmentSpec.parse("noise=20, gain=0.1,offset=0.05,flip,shift=8,mix=0.2")
    assert str(spec) == "noise=20,gain=0.1,offset=0.05,flip,shift=8,mix=0.2"
    assert AugmentSpec.parse(str(spec)) == spec
    opts = FitOptions.from_keywords(augment=str(spec))
    assert FitOptions.from_dict(json.loads(json.dumps(opts.to_dict()))) == opts


def test_augmentation_is_off_by_default() -> None:
    assert str(FitOptions().augment) == "none" and not FitOptions().augment.on


@pytest.mark.parametrize(
    ("text", "received"),
    [
        ("noise", "'noise'"),
        ("noise=loud", "'noise=loud'"),
        ("blur=2", "'blur=2'"),
        ("gain=1.5", "gain=1.5"),
        ("shift=2.5", "'shift=2.5'"),
        ("mix=2", "mix=2"),
    ],
)
def test_a_bad_spec_is_refused_naming_the_flag_and_the_form(text: str, received: str) -> None:
    with pytest.raises(UsageError, match=r"^--augment takes none or comma-separated") as e:
        FitOptions.from_keywords(augment=text)
    assert str(e.value).endswith(f"(received {received})")


def test_shift_is_refused_for_a_label_read_at_the_last_sample() -> None:
    with pytest.raises(UsageError, match=r"^--augment shift rolls each window.*--label last"):
        FitOptions.from_keywords(augment="shift=4", label="last")


# --- real runs ---------------------------------------------------------------------------------

RUN_WINDOW, SAMPLES = 16, 4_000
HEAVY = "noise=0,gain=0.5,offset=1,flip,shift=4,mix=1"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("augment") / "s.zarr"
    anomalies = balanced_anomalies(SAMPLES, RUN_WINDOW)
    synth(path, SynthSpec(samples=SAMPLES, anomalies=anomalies, seed=1))
    return path


def run(store: Path, out: Path, augment: str) -> Any:
    return chunkfit.fit(
        "baseline-cnn",
        store,
        window=RUN_WINDOW,
        chunk=512,
        batch_size=64,
        epochs=1,
        validation=0.2,
        deterministic=True,
        augment=augment,
        out=out,
    )


@pytest.fixture(scope="module")
def heavy(store: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "heavy"
    run(store, out, HEAVY)
    return out


@pytest.mark.backends
def test_run_json_records_the_augmentation_and_its_seed(heavy: Path) -> None:
    about = json.loads((heavy / "run.json").read_text())["augment"]
    assert (about["spec"], about["seed"], about["mix"]) == (HEAVY, 0, 1.0)


@pytest.mark.backends
def test_augmentation_changes_what_trains(store: Path, heavy: Path, tmp_path: Path) -> None:
    plain = run(store, tmp_path / "plain", "none").model
    augmented = keras.saving.load_model(heavy / "model.keras")
    assert not all(
        np.array_equal(a, b)
        for a, b in zip(plain.get_weights(), augmented.get_weights(), strict=True)
    )


@pytest.mark.backends
def test_validation_and_the_saved_model_see_windows_unaugmented(store: Path, heavy: Path) -> None:
    record = json.loads((heavy / "run.json").read_text())
    model = keras.saving.load_model(heavy / "model.keras")  # Keras alone, no chunkfit code
    with chunkfit.open_store(store) as s:
        a, b = record["split"]["validation_ranges"][0]
        x, events = s.read(a, b), s.events_in(a, b) - a
    starts = np.arange(b - a - RUN_WINDOW + 1)
    windows = np.stack([x[i : i + RUN_WINDOW] for i in starts])
    labels = any_event_labels(starts, RUN_WINDOW, events)
    probs = model.predict(windows, verbose=0)
    assert np.array_equal(probs, model.predict(windows, verbose=0))  # nothing random inside
    accuracy = float(np.mean(np.argmax(probs, axis=1) == labels))
    assert accuracy == pytest.approx(record["epochs"][-1]["val_accuracy"], abs=1e-4)
