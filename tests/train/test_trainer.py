"""chunkfit.fit with real TensorFlow on tiny stores: callbacks across blocks, exact epoch logs,
determinism, and every bad input refused before training."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import keras
import numpy as np
import pytest
from scoring_support import merge_runs, most_pairs

import chunkfit
from chunkfit import BlockSpec, FitOptions, SplitSpec, StoreWriter, WindowSpec
from chunkfit.core.metrics import BinaryMetrics
from chunkfit.core.windows import any_event_labels
from chunkfit.errors import IncompatibleError, RunError, UsageError, WindowError
from chunkfit.synth import SynthSpec, balanced_anomalies, synth
from chunkfit.train.metrics import compiled_metrics

pytestmark = pytest.mark.slow

WINDOW = 16
SAMPLES = 4_000


@pytest.fixture(scope="session")
def tiny_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The original question's problem, small: about half the windows hold an event."""
    path = tmp_path_factory.mktemp("stores") / "tiny.zarr"
    synth(path, SynthSpec(samples=SAMPLES, anomalies=balanced_anomalies(SAMPLES, WINDOW), seed=1))
    return path


def quick(**overrides: Any) -> dict[str, Any]:
    """Keyword arguments for a fast fit on ``tiny_store``: several blocks per epoch."""
    return {
        "window": WINDOW,
        "chunk": 512,
        "batch_size": 64,
        "epochs": 2,
        "validation": 0.2,
        **overrides,
    }


class Recorder(keras.callbacks.Callback):
    """Remembers every callback event it sees."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, Any]] = []

    def on_train_begin(self, logs: Any = None) -> None:
        self.events.append(("train_begin", None))

    def on_train_end(self, logs: Any = None) -> None:
        self.events.append(("train_end", None))

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self.events.append(("epoch_begin", epoch))

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.events.append(("epoch_end", (epoch, dict(logs or {}))))

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.events.append(("batch_end", batch))

    def kinds(self, kind: str) -> list[Any]:
        return [v for k, v in self.events if k == kind]


@pytest.fixture(scope="module")
def early_stopped(tiny_store: Path) -> tuple[Any, list[tuple[int | None, int, str]], list[str]]:
    """One fit of up to six epochs that EarlyStopping ends after two: its history, every group the
    trainer loaded (epoch or None for validation, group, thread name), and the loader threads
    still alive the moment the fit returned."""
    from chunkfit.train.loop import Trainer

    loads: list[tuple[int | None, int, str]] = []
    load = Trainer._load

    def recorded(self: Trainer, group: Any, epoch: int | None, k: int) -> Any:
        loads.append((epoch, k, threading.current_thread().name))
        return load(self, group, epoch, k)

    stop = keras.callbacks.EarlyStopping(monitor="loss", min_delta=10.0, patience=0)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Trainer, "_load", recorded)
        history = chunkfit.fit("baseline-cnn", tiny_store, **quick(epochs=6), callbacks=[stop])
    alive = [t.name for t in threading.enumerate() if t.name.startswith("chunkfit-prefetch")]
    return history, loads, alive


@pytest.mark.backends
def test_early_stopping_really_stops_the_run(early_stopped: tuple[Any, Any, Any]) -> None:
    history, _, _ = early_stopped
    assert history.epoch == [0, 1]


@pytest.fixture(scope="module")
def recorded(tiny_store: Path) -> Recorder:
    """What a callback saw of one quick fit of three epochs (the tests below only read it)."""
    rec = Recorder()
    chunkfit.fit("baseline-cnn", tiny_store, **quick(epochs=3), callbacks=[rec])
    return rec


@pytest.mark.backends
def test_callbacks_see_real_epoch_numbers_once_each(recorded: Recorder) -> None:
    assert [k for k, _ in recorded.events if k != "batch_end"] == [
        "train_begin",
        "epoch_begin",
        "epoch_end",
        "epoch_begin",
        "epoch_end",
        "epoch_begin",
        "epoch_end",
        "train_end",
    ]
    assert [e for e, _ in recorded.kinds("epoch_end")] == [0, 1, 2]


@pytest.mark.backends
def test_epoch_logs_hold_training_and_validation_metrics(recorded: Recorder) -> None:
    lead = ["pr_auc", "precision", "recall", "f1", "loss", "accuracy"]
    events = [
        "val_threshold",
        "val_event_f1",
        "val_false_alarms_per_hour",
    ]  # the store has event markers
    assert set(recorded.kinds("epoch_end")[0][1]) == {*lead, *(f"val_{n}" for n in lead), *events}


@pytest.mark.backends
def test_batch_numbers_run_on_across_blocks_of_an_epoch(tiny_store: Path) -> None:
    rec = Recorder()
    history = chunkfit.fit(
        "baseline-cnn", tiny_store, **quick(epochs=1, steps_per_execution=1), callbacks=[rec]
    )
    steps = history.params["steps"]
    assert rec.kinds("batch_end") == list(range(steps))


@pytest.mark.backends
def test_batch_numbers_of_multi_batch_steps_name_each_steps_last_batch(tiny_store: Path) -> None:
    """With 3 batches per step, a callback sees the number of each step's last batch: one event
    per step, numbers running on across blocks up to the epoch's last batch."""
    from chunkfit.core.blocks import plan_blocks
    from chunkfit.core.windows import plan_split
    from chunkfit.train.steps import step_batches

    rec = Recorder()
    history = chunkfit.fit(
        "baseline-cnn", tiny_store, **quick(epochs=1, steps_per_execution=3, mix=1), callbacks=[rec]
    )
    with chunkfit.open_store(tiny_store) as s:
        split = plan_split(s.segments, WindowSpec(WINDOW), SplitSpec(0.2))
    blocks = plan_blocks(split.train, WINDOW, 1, 512)
    seen = rec.kinds("batch_end")
    assert len(seen) == sum(len(step_batches(b.n_windows, 64, 3)) for b in blocks)
    assert seen[-1] == history.params["steps"] - 1
    gaps = np.diff([-1, *seen])
    assert set(gaps.tolist()) <= {1, 2, 3} and (gaps == 3).sum() > len(gaps) / 2


@pytest.mark.parametrize(
    ("n", "steps", "expected"),
    [
        (640, 4, [4, 4, 2]),
        (700, 4, [4, 4, 2, 1]),
        (640, 1, [1] * 10),
        (63, 4, [1]),
        (256, 4, [4]),
    ],
)
def test_step_batches_group_full_batches_then_the_short_one(
    n: int, steps: int, expected: list[int]
) -> None:
    from chunkfit.train.steps import step_batches

    assert step_batches(n, 64, steps) == expected


@pytest.fixture(scope="module")
def quick_fit(tiny_store: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """One quick fit (two epochs, the default normalisation) into a run folder: the folder and the
    History, which the tests below only read."""
    out = tmp_path_factory.mktemp("quick") / "run"
    history = chunkfit.fit("baseline-cnn", tiny_store, **quick(), out=out)
    return out, history


@pytest.fixture(scope="module")
def quick_run(quick_fit: tuple[Path, Any]) -> Path:
    return quick_fit[0]


def test_csv_logger_in_the_run_folder_has_one_row_per_epoch(quick_run: Path) -> None:
    rows = (quick_run / "history.csv").read_text().splitlines()
    lead = ["pr_auc", "precision", "recall", "f1", "loss", "accuracy"]
    events = ["val_threshold", "val_event_f1", "val_false_alarms_per_hour"]
    assert rows[0].split(",") == [
        "epoch",
        *lead,
        *(f"val_{n}" for n in lead[:4]),
        *events,
        "val_loss",
        "val_accuracy",
    ]
    assert [r.split(",")[0] for r in rows[1:]] == ["0", "1"]


def test_run_folder_holds_model_history_metadata_and_curves(quick_run: Path) -> None:
    assert sorted(p.name for p in quick_run.iterdir()) == [
        "curves.png",
        "history.csv",
        "model.keras",
        "run.json",
    ]


def test_run_json_records_config_split_and_per_epoch_figures(quick_run: Path) -> None:
    run = json.loads((quick_run / "run.json").read_text())
    used = {"chunk_used", "steps_per_execution_used"}
    assert (
        FitOptions.from_dict({k: v for k, v in run["config"].items() if k not in used}).blocks.chunk
        == 512
    )
    assert (
        run["config"]["steps_per_execution"] is None
        and run["config"]["steps_per_execution_used"] == 256
    )
    assert run["split"]["train_ranges"] == [[0, 3184]] and run["split"]["validation_ranges"] == [
        [3200, 4000]
    ]
    assert [e["epoch"] for e in run["epochs"]] == [0, 1]
    assert run["finished"] and run["peak_rss_bytes"] > 0 and run["windows_per_s"] > 0
    assert run["store"]["identity"]["n_samples"] == SAMPLES


def windows_of(
    store_path: Path, ranges: list[list[int]], classes: int = 2
) -> tuple[np.ndarray, np.ndarray]:
    """Materialised windows and one-hot any-event labels of ``ranges``, in order."""
    with chunkfit.open_store(store_path) as store:
        xs, ys = [], []
        for a, b in ranges:
            x = store.read(a, b)
            starts = np.arange(a, b - WINDOW + 1)
            xs.append(np.stack([x[s - a : s - a + WINDOW] for s in starts]))
            ys.append(any_event_labels(starts, WINDOW, store.events))
    return np.concatenate(xs), keras.utils.to_categorical(np.concatenate(ys), classes)


@pytest.mark.backends
@pytest.mark.parametrize(
    ("steps", "class_weight", "loop"),
    [
        (1, "none", "auto"),
        (3, "none", "auto"),
        (1, "0:1,1:3", "auto"),
        (3, "balanced", "auto"),
        (3, "none", "scan"),
        (40, "balanced", "scan"),
    ],
)
def test_epoch_logs_equal_one_model_fit_over_the_materialised_windows(
    tiny_store: Path,
    tmp_path: Path,
    steps: int,
    class_weight: str,
    loop: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Unshuffled, with blocks a multiple of the batch, block-wise training is one fit call,
    also when each step of the block's fit runs several batches (3: groups of 3, then 1), and with
    class weights as Keras's own ``class_weight``. On JAX, ``auto`` with one batch per call runs the
    loop trial (both loops train), and ``scan`` loops every element (40: each group's one element
    is shorter than 40 batches, so it runs in power-of-two lengths)."""
    if loop == "scan" and keras.backend.backend() != "jax":
        pytest.skip("--jax-loop is the JAX engine's (this test runs again on JAX)")
    from chunkfit.train.jax import loopchoice

    monkeypatch.setattr(
        loopchoice, "TRIAL_SECONDS", 0.0
    )  # the loop trial in this short run, both loops training
    keras.utils.set_random_seed(3)
    ours = chunkfit.build_model("baseline-cnn", WINDOW, 1, 2)
    reference = keras.models.clone_model(ours)
    reference.set_weights(ours.get_weights())
    options = FitOptions(
        windows=WindowSpec(WINDOW),
        split=SplitSpec(0.2),
        blocks=BlockSpec(chunk=256, shuffle_blocks=False, shuffle_windows=False),
        batch_size=64,
        epochs=2,
        steps_per_execution=steps,
        normalize="none",
        class_weight=class_weight,
        # TensorFlow: model.fit's step op for op, without XLA or the fused Adam kernel (both round
        # otherwise); JAX: XLA, as its fit
        jit="off" if keras.backend.backend() == "tensorflow" else "auto",
        jax_loop=loop,
    )
    history = chunkfit.fit(ours, tiny_store, options=options, out=tmp_path / "run")
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    split = run["split"]
    weights = run["class_weight"]["weights"]
    assert (weights is None) == (class_weight == "none")
    reference.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss="categorical_crossentropy",
        metrics=compiled_metrics(2),
    )
    x, y = windows_of(tiny_store, split["train_ranges"])
    vx, vy = windows_of(tiny_store, split["validation_ranges"])
    keras_weights = None if weights is None else {int(c): w for c, w in weights.items()}
    expected = reference.fit(
        x,
        y,
        batch_size=64,
        epochs=2,
        shuffle=False,
        validation_data=(vx, vy),
        verbose=0,
        class_weight=keras_weights,
    )
    for name, values in expected.history.items():
        np.testing.assert_allclose(history.history[name], values, rtol=1e-5, err_msg=name)


@pytest.mark.backends
def test_balanced_class_weights_are_n_over_k_times_the_class_count(
    tiny_store: Path, tmp_path: Path
) -> None:
    chunkfit.fit(
        "baseline-cnn", tiny_store, **quick(epochs=1), class_weight="balanced", out=tmp_path / "run"
    )
    cw = json.loads((tmp_path / "run" / "run.json").read_text())["class_weight"]
    n = {int(c): k for c, k in cw["train_windows"].items()}
    total = sum(n.values())
    assert cw["weights"] == {str(c): pytest.approx(total / (2 * k)) for c, k in n.items()}


def test_auto_class_weights_stay_off_when_no_class_is_rare(quick_run: Path) -> None:
    assert json.loads((quick_run / "run.json").read_text())["class_weight"]["weights"] is None


@pytest.mark.parametrize("text", ["heavy", "0:1,1", "1:-2", "a:b"])
def test_class_weights_that_cannot_be_read_are_refused(text: str) -> None:
    with pytest.raises(
        UsageError, match="--class-weight must be auto, balanced, none or CLASS:WEIGHT pairs"
    ):
        FitOptions(class_weight=text)


@pytest.mark.backends
def test_deterministic_runs_with_one_seed_give_identical_weights(tiny_store: Path) -> None:
    weights = []
    for _ in range(2):
        history = chunkfit.fit("baseline-cnn", tiny_store, **quick(seed=7, deterministic=True))
        weights.append(history.model.get_weights())
    assert all(np.array_equal(a, b) for a, b in zip(*weights, strict=True))


@pytest.mark.backends
def test_reduce_lr_on_plateau_acts_on_whole_epochs(tiny_store: Path) -> None:
    plateau = keras.callbacks.ReduceLROnPlateau(
        monitor="loss", min_delta=10.0, patience=1, factor=0.5
    )
    model = chunkfit.build_model("baseline-cnn", WINDOW, 1, 2)
    chunkfit.fit(model, tiny_store, **quick(epochs=2), callbacks=[plateau])
    assert float(model.optimizer.learning_rate) == pytest.approx(5e-4)


def test_tensorboard_batch_steps_keep_increasing_across_blocks_and_epochs(
    tiny_store: Path, tmp_path: Path
) -> None:
    import tensorflow as tf
    from tensorflow.core.util import event_pb2

    board = keras.callbacks.TensorBoard(str(tmp_path / "tb"), update_freq=1)
    history = chunkfit.fit(
        "baseline-cnn", tiny_store, **quick(epochs=2, steps_per_execution=1), callbacks=[board]
    )
    steps = []
    for path in sorted((tmp_path / "tb" / "train").glob("events.out.tfevents.*")):
        for record in tf.data.TFRecordDataset(str(path)):
            event = event_pb2.Event.FromString(record.numpy())
            steps += [event.step for v in event.summary.value if v.tag == "batch_loss"]
    assert steps == list(range(1, 2 * history.params["steps"] + 1))


@pytest.mark.backends
def test_a_callback_stopping_inside_an_epoch_ends_the_run_after_validation(
    tiny_store: Path,
) -> None:
    class StopAtBatch(keras.callbacks.Callback):
        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if batch == 10:
                self.model.stop_training = True

    history = chunkfit.fit(
        "baseline-cnn",
        tiny_store,
        **quick(epochs=3, steps_per_execution=1),
        callbacks=[StopAtBatch()],
    )
    assert history.epoch == [0] and "val_loss" in history.history


@pytest.mark.backends
def test_the_next_epochs_first_group_is_read_while_the_epoch_validates_and_once(
    tiny_store: Path, monkeypatch: pytest.MonkeyPatch, early_stopped: tuple[Any, Any, Any]
) -> None:
    from chunkfit.train.loop import Trainer

    loads: list[tuple[int | None, int, str]] = []
    started = {epoch: threading.Event() for epoch in range(3)}
    load = Trainer._load

    def recorded(self: Trainer, group: Any, epoch: int | None, k: int) -> Any:
        loads.append((epoch, k, threading.current_thread().name))
        if epoch is not None and k == 0:
            started[epoch].set()
        return load(self, group, epoch, k)

    class Check(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.read_before_begin: list[bool] = []

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            if (
                epoch
            ):  # read in the loader thread while the epoch before validated: long started by now
                self.read_before_begin.append(started[epoch].wait(timeout=60))

    monkeypatch.setattr(Trainer, "_load", recorded)
    check = Check()
    chunkfit.fit("baseline-cnn", tiny_store, **quick(epochs=3), callbacks=[check])
    assert check.read_before_begin == [True, True]
    trained = [(e, k) for e, k, _ in loads if e is not None]
    assert len(trained) == len(set(trained)) and {e for e, _ in trained} == {
        0,
        1,
        2,
    }  # each group read once
    assert all(name.startswith("chunkfit-prefetch") for *_, name in loads)

    # A run that stops after an epoch leaves no loader thread behind with the group it read ahead.
    stopped, stopped_loads, alive = early_stopped
    assert stopped.epoch == [0, 1] and (2, 0) in [(e, k) for e, k, _ in stopped_loads]
    assert not alive


@pytest.fixture(scope="session")
def labelled_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three per-sample classes (-1, 0, 5) in runs of 40 samples, two segments."""
    path = tmp_path_factory.mktemp("stores") / "labelled.h5"
    rng = np.random.default_rng(2)
    classes = np.repeat(rng.choice([-1, 0, 5], size=100), 40).astype(np.int32)
    x = (classes[:, None] + rng.normal(0, 0.3, (4000, 2))).astype(np.float32)
    with StoreWriter(
        path, channels=["a", "b"], sample_rate=50.0, has_labels=True, append=False
    ) as w:
        w.write(x, labels=classes)
        w.add_segment(0, 2500)
        w.add_segment(2500, 4000)
        w.commit()
    return path


@pytest.mark.backends
@pytest.mark.parametrize("rule", ["last", "majority"])
def test_per_sample_labels_train_a_model_with_one_output_per_class(
    labelled_store: Path, rule: str
) -> None:
    model = chunkfit.build_model("baseline-cnn", WINDOW, 2, 3)
    history = chunkfit.fit(model, labelled_store, **quick(label=rule))
    assert len(history.history["val_accuracy"]) == 2


# -- bad input, refused before any training --------------------------------------------------------


def test_window_longer_than_every_segment_is_refused(tiny_store: Path) -> None:
    with pytest.raises(
        WindowError, match=r"window must be at most the longest segment \(received window=5000"
    ):
        chunkfit.fit("baseline-cnn", tiny_store, **quick(window=5000))


def test_chunk_smaller_than_the_batch_is_refused(tiny_store: Path) -> None:
    with pytest.raises(
        WindowError,
        match=r"chunk must be at least the batch size \(received chunk=32, batch_size=64\)",
    ):
        chunkfit.fit("baseline-cnn", tiny_store, **quick(chunk=32))


def test_store_with_neither_events_nor_labels_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bare.zarr"
    with StoreWriter(path, channels=["x"], sample_rate=1.0, has_labels=False, append=False) as w:
        w.write(np.zeros((500, 1), dtype=np.float32))
        w.add_segment(0, 500)
        w.commit()
    with pytest.raises(WindowError, match="any-event needs event markers, but the store has none$"):
        chunkfit.fit("baseline-cnn", path, **quick())


def test_model_taking_other_windows_is_refused(tiny_store: Path) -> None:
    model = chunkfit.build_model("baseline-cnn", 32, 1, 2)
    with pytest.raises(
        IncompatibleError, match=r"takes inputs shaped \(32, 1\), but the windows are \(16, 1\)"
    ):
        chunkfit.fit(model, tiny_store, **quick())


def test_model_with_the_wrong_number_of_outputs_is_refused(tiny_store: Path) -> None:
    model = chunkfit.build_model("baseline-cnn", WINDOW, 1, 3)
    with pytest.raises(
        IncompatibleError, match="outputs shape \\(3\\) per window, but the labels have 2 classes"
    ):
        chunkfit.fit(model, tiny_store, **quick())


def test_run_folder_that_cannot_be_created_is_refused(tiny_store: Path, tmp_path: Path) -> None:
    (tmp_path / "plain-file").write_text("")
    with pytest.raises(RunError, match="the run folder cannot be written"):
        chunkfit.fit("baseline-cnn", tiny_store, **quick(), out=tmp_path / "plain-file" / "run")


def test_run_folder_holding_a_run_is_not_overwritten(tiny_store: Path, tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run.json").write_text("{}")
    with pytest.raises(RunError, match="already holds a run"):
        chunkfit.fit("baseline-cnn", tiny_store, **quick(), out=tmp_path / "run")


def test_memory_budget_below_the_process_size_is_refused(tiny_store: Path) -> None:
    with pytest.raises(UsageError, match="below what the process already uses"):
        chunkfit.fit("baseline-cnn", tiny_store, **quick(memory_budget=10 << 20))


def test_memory_budget_sets_the_chunk(tiny_store: Path, tmp_path: Path) -> None:
    chunkfit.fit(
        "baseline-cnn", tiny_store, **quick(epochs=1, memory_budget=8 << 30), out=tmp_path / "run"
    )
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["config"]["chunk_used"] > 100_000


class _LossOnly(keras.Sequential):
    """A model with its own train_step whose logs are not its metric results (in the backend's
    signature)."""

    if keras.backend.backend() == "jax":

        def train_step(self, state: Any, data: Any) -> Any:
            logs, state = super().train_step(state, data)
            return {"loss": logs["loss"]}, state

    else:

        def train_step(self, data: Any) -> Any:
            logs = super().train_step(data)
            return {"loss": logs["loss"]}


@pytest.mark.backends
@pytest.mark.parametrize("custom", [False, True])
def test_every_batch_is_one_optimizer_step_with_keras_or_a_custom_train_step(
    tiny_store: Path, custom: bool
) -> None:
    """Several batches per compiled step: each still goes through the model's train_step once."""
    keras.utils.set_random_seed(0)
    model = chunkfit.build_model("baseline-cnn", WINDOW, 1, 2)
    if custom:
        model = _LossOnly(model.layers, name="loss_only")
    history = chunkfit.fit(model, tiny_store, **quick(epochs=2, steps_per_execution=5))
    assert int(model.optimizer.iterations.numpy()) == 2 * history.params["steps"]
    assert np.isfinite(history.history["loss"]).all() and len(history.history["loss"]) == 2


@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Five recordings (segments) of 800 samples, events in each."""
    path = tmp_path_factory.mktemp("stores") / "recordings.zarr"
    rng = np.random.default_rng(4)
    events = np.sort(rng.choice(4_000, 300, replace=False))
    x = (np.sin(np.arange(4_000)) + rng.normal(0, 0.2, 4_000)).astype(np.float32)
    x[events] += 0.5
    with StoreWriter(path, channels=["x"], sample_rate=1.0, has_labels=False, append=False) as w:
        w.write(x[:, None])
        for k in range(5):
            w.add_segment(800 * k, 800 * (k + 1))
        w.add_events(events)
        w.commit()
    return path


@pytest.mark.backends
def test_held_out_recordings_never_train_and_every_other_window_trains_once_per_epoch(
    recordings: Path, tmp_path: Path
) -> None:
    from chunkfit.core.blocks import plan_blocks

    chunkfit.fit(
        "baseline-cnn",
        recordings,
        window=WINDOW,
        chunk=200,
        batch_size=64,
        epochs=2,
        mix=2,
        validation_segments=2,
        seed=3,
        out=tmp_path / "run",
    )
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    held = run["split"]["validation_segments"]
    assert len(held) == 2
    assert run["split"]["validation_ranges"] == [[800 * k, 800 * (k + 1)] for k in held]
    assert sorted(run["split"]["train_ranges"]) == [
        [800 * k, 800 * (k + 1)] for k in range(5) if k not in held
    ]
    blocks = plan_blocks(np.asarray(run["split"]["train_ranges"]), WINDOW, 1, 200)
    assert all(not any(800 * k <= b.start < 800 * (k + 1) for k in held) for b in blocks)
    for epoch in run["epochs"]:
        assert sorted(epoch["blocks"]) == list(range(len(blocks)))
        assert epoch["train_windows"] == 3 * (800 - WINDOW + 1)
    assert run["config"]["split"]["segments"] == 2


# -- inputs in any units ---------------------------------------------------------------------------


def rescaled_copy(source: Path, target: Path, a: float, b: float) -> Path:
    """The same store with every sample ``a * x + b`` (a sensor in other units, with an offset)."""
    with chunkfit.open_store(source) as s:
        x, segments, events = s.read(0, s.n_samples), s.segments, s.events
    with StoreWriter(target, channels=["x"], sample_rate=1.0, has_labels=False, append=False) as w:
        w.write((a * x.astype(np.float64) + b).astype(np.float32))
        for lo, hi in segments.tolist():
            w.add_segment(lo, hi)
        w.add_events(events)
        w.commit()
    return target


@pytest.fixture(scope="module")
def raw_store(tiny_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``tiny_store`` in other units: every sample ``1000 x + 5000``."""
    return rescaled_copy(tiny_store, tmp_path_factory.mktemp("raw") / "raw.zarr", 1000.0, 5000.0)


@pytest.fixture(scope="module")
def raw_fit(raw_store: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """``quick_fit`` on ``raw_store``: the run folder and the History, which the tests only
    read."""
    out = tmp_path_factory.mktemp("raw-run") / "run"
    history = chunkfit.fit("baseline-cnn", raw_store, **quick(), out=out)
    return out, history


@pytest.mark.backends
def test_a_signal_in_other_units_trains_to_the_same_global_validation_figures(
    quick_fit: tuple[Path, Any], raw_fit: tuple[Path, Any]
) -> None:
    (_, plain), (_, scaled) = quick_fit, raw_fit  # both normalised globally, the default
    for name in ("val_loss", "val_accuracy"):
        assert scaled.history[name][-1] == pytest.approx(plain.history[name][-1], abs=0.01)


@pytest.mark.backends
def test_a_signal_in_other_units_trains_to_the_same_per_window_validation_figures(
    tiny_store: Path, raw_store: Path
) -> None:
    plain = chunkfit.fit("baseline-cnn", tiny_store, **quick(epochs=2), normalize="window")
    scaled = chunkfit.fit("baseline-cnn", raw_store, **quick(epochs=2), normalize="window")
    for name in ("val_loss", "val_accuracy"):
        assert scaled.history[name][-1] == pytest.approx(plain.history[name][-1], abs=0.01)


@pytest.mark.backends
def test_the_saved_model_takes_raw_signal_and_scores_it_as_the_run_validated(
    raw_store: Path, raw_fit: tuple[Path, Any]
) -> None:
    raw, (out, _) = raw_store, raw_fit
    run = json.loads((out / "run.json").read_text())
    model = keras.saving.load_model(out / "model.keras")  # Keras alone, no chunkfit code
    with chunkfit.open_store(raw) as s:
        train = np.concatenate([s.read(lo, hi) for lo, hi in run["split"]["train_ranges"]]).astype(
            np.float64
        )
        a, b = run["split"]["validation_ranges"][0]
        x, events = s.read(a, b), s.events_in(a, b) - a
    starts = np.arange(b - a - WINDOW + 1)
    windows = np.stack([x[i : i + WINDOW] for i in starts])
    labels = any_event_labels(starts, WINDOW, events)
    probs = model.predict(windows, verbose=0)
    last = run["epochs"][-1]
    accuracy = float(np.mean(np.argmax(probs, axis=1) == labels))
    assert accuracy == pytest.approx(last["val_accuracy"], abs=1e-4)
    # the event class's figures, at 0.5 as Keras's Precision/Recall(class_id=1) count them
    hit = probs[:, 1] > 0.5
    tp, fp, fn = (
        int((hit & (labels == 1)).sum()),
        int((hit & (labels == 0)).sum()),
        int((~hit & (labels == 1)).sum()),
    )
    assert last["val_precision"] == pytest.approx(tp / (tp + fp) if tp + fp else 0.0, abs=1e-4)
    assert last["val_recall"] == pytest.approx(tp / (tp + fn), abs=1e-4)
    assert last["val_f1"] == pytest.approx(2 * tp / (2 * tp + fp + fn), abs=1e-4)
    # Keras's PR-AUC interpolates between 200 thresholds: near, not equal to, the exact figure
    exact = BinaryMetrics()
    exact.update(labels == 1, probs[:, 1])
    assert last["val_pr_auc"] == pytest.approx(exact.pr_auc(), abs=0.02)
    assert run["normalization"]["mode"] == "global"
    # the statistics of the training split alone
    assert run["normalization"]["mean"][0] == pytest.approx(train.mean(), rel=1e-9)
    assert run["normalization"]["std"][0] == pytest.approx(train.std(), rel=1e-6)


@pytest.mark.backends
def test_each_epoch_logs_the_event_f1_and_false_alarms_at_the_threshold_it_chose(
    tiny_store: Path, quick_fit: tuple[Path, Any]
) -> None:
    out, history = quick_fit
    run = json.loads((out / "run.json").read_text())
    model = keras.saving.load_model(out / "model.keras")
    with chunkfit.open_store(tiny_store) as s:
        ((a, b),) = run["split"]["validation_ranges"]
        x, events, rate = s.read(a, b), s.events_in(a, b) - a, s.sample_rate
    starts = np.arange(b - a - WINDOW + 1)
    score = model.predict(np.stack([x[i : i + WINDOW] for i in starts]), verbose=0)[:, 1]
    last = {k: v[-1] for k, v in history.history.items()}
    threshold = last["val_threshold"]
    assert threshold == run["threshold"]["value"]  # the last epoch's weights are the run's

    def event_f1_and_false_alarms(at: float) -> tuple[float, int]:
        runs = merge_runs(starts, np.zeros_like(starts), score, WINDOW, 1, at)
        found = most_pairs(events.tolist(), [r.peak for r in runs], WINDOW // 2)
        return 2 * found / (events.size + len(runs)), len(runs) - found

    f1, false_alarms = event_f1_and_false_alarms(threshold)
    assert merge_runs(starts, np.zeros_like(starts), score, WINDOW, 1, threshold)  # to count
    assert last["val_event_f1"] == pytest.approx(f1, abs=1e-12)
    if rate:
        assert last["val_false_alarms_per_hour"] == pytest.approx(
            false_alarms / ((b - a) / rate / 3600), rel=1e-9
        )
    else:
        assert last["val_false_alarms"] == false_alarms
    header = (out / "history.csv").read_text().splitlines()[0].split(",")
    assert (
        header.index("val_f1")
        < header.index("val_threshold")
        < header.index("val_event_f1")
        < header.index("val_loss")
    )
    assert len(history.history["val_event_f1"]) == 2


@pytest.mark.backends
def test_threshold_chosen_on_event_f1_does_at_least_as_well_as_the_window_f1_one(
    tiny_store: Path, quick_run: Path
) -> None:
    run = json.loads((quick_run / "run.json").read_text())
    model = keras.saving.load_model(quick_run / "model.keras")
    with chunkfit.open_store(tiny_store) as s:
        ((a, b),) = run["split"]["validation_ranges"]
        x, events = s.read(a, b), s.events_in(a, b) - a
    starts = np.arange(b - a - WINDOW + 1)
    score = model.predict(np.stack([x[i : i + WINDOW] for i in starts]), verbose=0)[:, 1]
    exact = BinaryMetrics()
    exact.update(any_event_labels(starts, WINDOW, events) == 1, score)
    window_rule = exact.choose_threshold("f1")["value"]
    runs = merge_runs(starts, np.zeros_like(starts), score, WINDOW, 1, window_rule)
    found = most_pairs(events.tolist(), [r.peak_start + WINDOW // 2 for r in runs], WINDOW // 2)
    chosen = run["threshold"]
    assert chosen["rule"] == "event-f1"
    assert chosen["event_f1"] >= 2 * found / (events.size + len(runs))


@pytest.mark.backends
def test_unnormalised_raw_units_are_what_none_trains_on(tiny_store: Path, tmp_path: Path) -> None:
    chunkfit.fit(
        "baseline-cnn", tiny_store, **quick(epochs=1), normalize="none", out=tmp_path / "run"
    )
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["normalization"] == {"mode": "none", "mean": [], "std": []}
    model = keras.saving.load_model(tmp_path / "run" / "model.keras")
    assert not any("standardize" in layer.name for layer in model.layers)


def test_an_unknown_normalisation_is_refused() -> None:
    with pytest.raises(UsageError, match="--normalize must be one of global, window, none"):
        FitOptions(normalize="minmax")


def test_a_validation_split_without_an_event_is_refused_before_training(tmp_path: Path) -> None:
    path = tmp_path / "early.zarr"
    rng = np.random.default_rng(2)
    with StoreWriter(path, channels=["x"], sample_rate=1.0, has_labels=False, append=False) as w:
        w.write(rng.normal(size=(2_000, 1)).astype(np.float32))
        w.add_segment(0, 2_000)
        w.add_events(np.arange(10, 1_500, 37))  # none in the last 10%
        w.commit()
    with pytest.raises(
        WindowError,
        match=r"the validation split \(185 windows\) holds no window with an event, "
        r"so it cannot measure a detector; raise --validation",
    ):
        chunkfit.fit(
            "baseline-cnn", path, window=WINDOW, chunk=512, batch_size=64, out=tmp_path / "run"
        )
    assert not (tmp_path / "run").exists()
