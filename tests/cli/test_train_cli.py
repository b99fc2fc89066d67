"""``chunkfit train`` end to end in real subprocesses, on the shipped ECG log."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path

import numpy as np
import pytest
from support import REPO, error_line, make_store, run_cli

from chunkfit.core.blocks import plan_blocks

CORES = len(os.sched_getaffinity(0))

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ecg_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """data/ecg208.csv and its R-peak markers, ingested by the CLI."""
    store = tmp_path_factory.mktemp("ecg") / "ecg.zarr"
    result = run_cli(
        "ingest",
        store,
        REPO / "data" / "ecg208.csv",
        "--time-column",
        "time_s",
        "--events",
        REPO / "data" / "ecg208_events.txt",
    )
    assert result.returncode == 0, result.stderr
    return store


Ran = tuple[subprocess.CompletedProcess[str], Path]


def ecg_training(store: Path, base: Path) -> Ran:
    out = base / "ecg-run"
    return run_cli(
        "train",
        store,
        "--epochs",
        "2",
        "--chunk",
        "20000",
        "--stride",
        "2",
        "--out",
        out,
        timeout=300,
    ), out


def training_without_a_store(store: Path, base: Path) -> Ran:
    shutil.copytree(store, base / "sensor.zarr")
    return run_cli("train", "--epochs", "1", "--stride", "16", "--out", "r", cwd=base), base


def training_on_the_store_in_chunkfit_toml(store: Path, base: Path) -> Ran:
    shutil.copytree(store, base / "data" / "heart.zarr")
    (base / "chunkfit.toml").write_text('store = "data/heart.zarr"\n')
    return run_cli("train", "--epochs", "1", "--stride", "16", "--out", "r", cwd=base), base


def training_a_model_with_three_outputs(store: Path, base: Path) -> Ran:
    (base / "three.py").write_text(
        "import keras\n"
        "def model(window, n_channels):\n"
        "    return keras.Sequential([keras.Input((window, n_channels)), keras.layers.Flatten(),\n"
        "                             keras.layers.Dense(3, activation='softmax')], name='three')\n"
    )
    return run_cli("train", store, "--model", "three:model", "--out", "r", cwd=base), base


def training_on_every_core(store: Path, base: Path) -> Ran:
    out = base / "run"
    return run_cli(
        "train",
        store,
        "--epochs",
        "1",
        "--chunk",
        "20000",
        "--stride",
        "8",
        "--compute-threads",
        "0",
        "--out",
        out,
        "--verbose",
        timeout=300,
    ), out


def training_with_tensorboard(store: Path, base: Path) -> Ran:
    return run_cli(
        "train",
        store,
        "--epochs",
        "2",
        "--chunk",
        "5000",
        "--stride",
        "4",
        "--out",
        base / "run",
        "--tensorboard",
        base / "tb",
        timeout=300,
    ), base


@pytest.fixture(scope="module")
def launched(
    ecg_store: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Future[Ran]]]:
    """Every command of the module that loads TensorFlow, each in a folder of its own, two at a time
    in threads (a TensorFlow import and a small model's training keep about one core busy each)."""
    jobs: dict[str, Callable[[Path, Path], Ran]] = {
        "ecg": ecg_training,
        "sensor-zarr": training_without_a_store,
        "chunkfit-toml": training_on_the_store_in_chunkfit_toml,
        "three-outputs": training_a_model_with_three_outputs,
        "every-core": training_on_every_core,
        "tensorboard": training_with_tensorboard,
    }
    with ThreadPoolExecutor(max_workers=2) as pool:
        yield {
            name: pool.submit(partial(job, ecg_store), tmp_path_factory.mktemp(name))
            for name, job in jobs.items()
        }


@pytest.fixture(scope="module")
def ecg_run(launched: dict[str, Future[Ran]]) -> Ran:
    return launched["ecg"].result()


def test_train_on_the_ecg_log_succeeds_quietly(
    ecg_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    result, _ = ecg_run
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


def test_train_prints_one_line_per_epoch_and_the_run_folder(
    ecg_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    result, out = ecg_run
    compile_line, *lines = result.stdout.splitlines()
    # a run this short trains without XLA, on the threads of the rule (a built-in model: each batch
    # in halves side by side, on 2 cores or more); --verbose says why
    threads = "every core" if CORES < 2 else f"{CORES // 2} threads? x 2 halves of each batch"
    assert re.fullmatch(
        rf"TensorFlow, train step without XLA, {threads}; --verbose says why", compile_line
    ), compile_line
    # the loss, then the validation split's event class figures (at the epoch's threshold)
    for epoch, line in zip((1, 2), lines[:2], strict=True):
        assert re.fullmatch(
            rf"epoch {epoch}/2  loss [\d.]+  val: event F1 [\d.]+  PR-AUC [\d.]+  "
            r"false alarms/h [\d.,e+-]+",
            line,
        ), line
    assert lines[2] == lines[2].rstrip() and re.fullmatch(
        r"threshold [\d.e+-]+ chosen on the validation split \(event-f1\)", lines[2]
    ), lines[2]
    assert re.fullmatch(
        r"  events: found \d+/\d+, precision [\d.]+, recall [\d.]+, F1 [\d.]+, "
        r"false alarms \d+ \([\d.e+-]+/h\)",
        lines[3],
    ), lines[3]
    assert re.fullmatch(
        r"  windows: PR-AUC [\d.]+, precision [\d.]+, recall [\d.]+, F1 [\d.]+", lines[4]
    ), lines[4]
    assert lines[5:] == [
        "trained baseline-cnn for 2 epoch(s)",
        f"run folder {out}: model.keras, history.csv, run.json, curves.png",
    ]


def test_verbose_train_prints_every_figure_and_why_the_engine_chose_its_step(
    launched: dict[str, Future[Ran]],
) -> None:
    result, _ = launched["every-core"].result()
    compile_line, epoch_line, *_ = result.stdout.splitlines()
    assert re.fullmatch(
        r"train step without XLA, chosen by autotune: a run of \d+ training calls of up to \d+ "
        r"batches is too short to try XLA; TensorFlow on every core, chosen by --compute-threads; "
        r"--jit on\|off, --compute-threads N to choose",
        compile_line,
    ), compile_line
    assert epoch_line.startswith("epoch 1/1  ") and epoch_line.endswith(" windows/s")
    names = [part.split(" ")[0] for part in epoch_line.split("  ")[1:-1]]
    lead = ["pr_auc", "precision", "recall", "f1", "loss", "accuracy"]
    # the event class first, accuracy last; validation adds the events at the epoch's threshold
    events = ["val_threshold", "val_event_f1", "val_false_alarms_per_hour"]
    assert names == [*lead, *(f"val_{n}" for n in lead[:4]), *events, "val_loss", "val_accuracy"]


def test_train_writes_the_run_folder(
    ecg_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    _, out = ecg_run
    assert sorted(p.name for p in out.iterdir()) == [
        "curves.png",
        "history.csv",
        "model.keras",
        "run.json",
    ]
    assert len((out / "history.csv").read_text().splitlines()) == 3


def test_run_json_describes_the_ecg_run(
    ecg_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    _, out = ecg_run
    run = json.loads((out / "run.json").read_text())
    assert run["config"]["windows"] == {
        "window": 104,
        "stride": 2,
        "label": "any-event",
        "margin": 0,
    }
    assert run["store"]["identity"]["n_samples"] == 108_000
    assert run["split"]["validation_ranges"] == [[97200, 108000]]
    assert [e["epoch"] for e in run["epochs"]] == [0, 1]
    assert run["epochs"][-1]["val_accuracy"] > 0.8
    # unmeasured, a built-in model: each batch in halves, half the cores each (one core: every
    # core, 0)
    if CORES < 2:
        assert run["threads"]["intra_op"] == run["threads"]["inter_op"] == 0
        assert run["threads"]["by"].startswith("the rule: every core")
    else:
        assert (
            run["threads"]["intra_op"],
            run["threads"]["inter_op"],
            run["threads"]["halves"],
        ) == (CORES // 2, 2, 2)
        assert run["threads"]["by"].startswith(
            "the rule for built-in models: each batch in halves side by side"
        )


def test_train_without_a_store_uses_sensor_zarr_in_the_current_directory(
    launched: dict[str, Future[Ran]],
) -> None:
    result, where = launched["sensor-zarr"].result()
    assert result.returncode == 0, result.stderr
    assert json.loads((where / "r" / "run.json").read_text())["store"]["path"] == str(
        where / "sensor.zarr"
    )


def test_train_without_a_store_uses_the_store_named_in_chunkfit_toml(
    launched: dict[str, Future[Ran]],
) -> None:
    result, where = launched["chunkfit-toml"].result()
    assert result.returncode == 0, result.stderr
    assert json.loads((where / "r" / "run.json").read_text())["store"]["path"] == str(
        where / "data" / "heart.zarr"
    )


# -- one clear line before any training ------------------------------------------------------------


def test_no_store_given_or_found_is_one_error_line(tmp_path: Path) -> None:
    result = run_cli("train", cwd=tmp_path)
    assert error_line(result) == (
        "chunkfit: error: no STORE given, and the current directory has neither chunkfit.toml nor "
        "sensor.zarr; name the store: chunkfit train STORE"
    )


def test_window_longer_than_every_segment_is_one_error_line(
    ecg_store: Path, tmp_path: Path
) -> None:
    result = run_cli("train", ecg_store, "--window", "200000", "--out", tmp_path / "r")
    assert error_line(result) == (
        f"chunkfit: error: {ecg_store}: window must be at most the longest segment (received "
        "window=200000, longest segment=108000 samples); use a smaller --window"
    )
    assert not (tmp_path / "r").exists()


def test_chunk_smaller_than_the_batch_is_one_error_line(ecg_store: Path) -> None:
    result = run_cli("train", ecg_store, "--chunk", "100")
    assert error_line(result) == (
        "chunkfit: error: chunk must be at least the batch size (received chunk=100, "
        "batch_size=128); raise --chunk or lower --batch-size"
    )


def test_store_with_neither_events_nor_labels_is_one_error_line(tmp_path: Path) -> None:
    store = make_store(tmp_path / "bare.zarr", np.zeros((1000, 1), dtype=np.float32))
    result = run_cli("train", store)
    assert error_line(result) == (
        f"chunkfit: error: {store}: label rule any-event needs event markers, but the store has "
        "none"
    )


def test_model_with_the_wrong_output_size_is_one_error_line(
    launched: dict[str, Future[Ran]],
) -> None:
    result, where = launched["three-outputs"].result()
    assert error_line(result) == (
        "chunkfit: error: model 'three' outputs shape (3) per window, but the labels have 2 "
        "classes; its last layer needs 2 units"
    )
    assert not (where / "r").exists()


def test_unwritable_run_folder_is_one_error_line(ecg_store: Path, tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("")
    result = run_cli("train", ecg_store, "--out", tmp_path / "taken" / "run")
    assert error_line(result) == (
        f"chunkfit: error: {tmp_path / 'taken' / 'run'}: the run folder cannot be written (Not a "
        "directory); use another --out"
    )


def test_nonsense_memory_budget_is_one_error_line(ecg_store: Path) -> None:
    result = run_cli("train", ecg_store, "--memory-budget", "lots")
    assert (
        error_line(result)
        == "chunkfit: error: memory size must look like 1.5GB, 800MB or 2G (received 'lots')"
    )


def test_compute_threads_zero_leaves_tensorflow_its_default_of_every_core(
    launched: dict[str, Future[Ran]],
) -> None:
    result, out = launched["every-core"].result()
    assert result.returncode == 0, result.stderr
    assert json.loads((out / "run.json").read_text())["threads"] == {
        "intra_op": 0,
        "inter_op": 0,
        "by": "--compute-threads",
    }


def test_tensorboard_logs_every_epoch_with_steps_running_on_across_blocks(
    launched: dict[str, Future[Ran]],
) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    result, where = launched["tensorboard"].result()
    assert result.returncode == 0, result.stderr
    train = EventAccumulator(str(where / "tb" / "train"), size_guidance={"tensors": 0})
    train.Reload()
    assert [e.step for e in train.Tensors("epoch_loss")] == [0, 1]
    validation = EventAccumulator(str(where / "tb" / "validation"), size_guidance={"tensors": 0})
    validation.Reload()
    run = json.loads((where / "run" / "run.json").read_text())
    blocks = plan_blocks(np.asarray(run["split"]["train_ranges"]), 104, 4, 5000)
    assert len(blocks) > 4
    batches = []  # one optimizer step per batch; a group of --mix 4 blocks ends in one short batch
    for epoch in run["epochs"]:
        order = epoch["blocks"]
        groups = [order[i : i + 4] for i in range(0, len(order), 4)]
        batches.append(sum(-(-sum(blocks[b].n_windows for b in g) // 128) for g in groups))
    steps = [e.step for e in validation.Tensors("evaluation_loss_vs_iterations")]
    assert steps == [batches[0], batches[0] + batches[1]]


@pytest.fixture(scope="module")
def train_help() -> str:
    result = run_cli("train", "--help")
    assert result.returncode == 0, result.stderr
    return result.stdout


PANELS = ["Data", "Model", "Training", "Rare events", "Speed", "Run folder", "Distribution"]


@pytest.mark.parametrize("panel", PANELS)
def test_train_help_groups_options_in_panels(train_help: str, panel: str) -> None:
    assert f"─ {panel} ─" in train_help


def test_train_help_panels_come_from_data_to_distribution(train_help: str) -> None:
    shown = [
        line.split("─ ", 1)[1].split(" ─", 1)[0]
        for line in train_help.splitlines()
        if line.startswith("╭─ ")
    ]
    assert [panel for panel in shown if panel in PANELS] == PANELS


def test_train_help_shows_the_default_run_folder(train_help: str) -> None:
    assert "[default: (runs/<timestamp>)]" in train_help


def test_train_help_shows_flags_as_flags(train_help: str) -> None:
    assert [
        line for line in train_help.splitlines() if "--deterministic" in line and "<bool>" in line
    ] == []


@pytest.mark.parametrize("command", [(), ("train",), ("evaluate",), ("ingest",), ("launch",)])
def test_every_help_shows_its_flags_as_flags(command: tuple[str, ...]) -> None:
    # --help, and the global --anon and --version, were shown as "--help <bool>"
    result = run_cli(*command, "--help")
    assert result.returncode == 0, result.stderr
    assert "--help" in result.stdout and "<bool>" not in result.stdout


def test_train_help_usage_says_what_an_omitted_store_means(train_help: str) -> None:
    usage = " ".join(train_help.split("Train a Keras model")[0].split())
    assert "[STORE, else chunkfit.toml's store, else ./sensor.zarr]" in usage


def test_a_bad_augmentation_is_one_error_line_naming_the_flag_and_the_form(
    ecg_store: Path, tmp_path: Path
) -> None:
    result = run_cli("train", ecg_store, "--augment", "noise=loud", "--out", tmp_path / "r")
    assert error_line(result) == (
        "chunkfit: error: --augment takes none or comma-separated transforms like "
        "noise=20,gain=0.1,offset=0.05,flip,shift=8,mix=0.2 (received 'noise=loud')"
    )
    assert not (tmp_path / "r").exists()
