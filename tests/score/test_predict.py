"""predict(): scores aligned to sample index, NaN where no window starts, detections CSV, bounded
memory."""

from __future__ import annotations

import csv
import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import zarr
from scoring_support import (
    STRIDE,
    WINDOW,
    Trained,
    Windows,
    all_windows,
    keras_model,
    listing,
    merge_runs,
)
from support import SUFFIX, make_store, write_csv

import chunkfit
from chunkfit.config import IngestOptions
from chunkfit.errors import (
    IncompatibleError,
    ModelError,
    RunError,
    StoreExistsError,
    UsageError,
    WindowError,
)
from chunkfit.synth import SynthSpec, synth

pytestmark = pytest.mark.slow


def read_scores(path: Path) -> np.ndarray:
    if path.suffix == ".zarr":
        return np.asarray(zarr.open_group(str(path), mode="r")["scores"][:])
    with h5py.File(path, "r") as f:
        return np.asarray(f["scores"][:])


@dataclasses.dataclass(frozen=True)
class Prediction:
    scores: np.ndarray
    windows: Windows
    report: chunkfit.PredictReport
    events_csv: Path
    stride: int


@pytest.fixture(
    scope="module",
    params=[("zarr", 1), ("hdf5", 1), ("zarr", STRIDE), ("hdf5", STRIDE)],
    ids=["zarr-stride-1", "hdf5-stride-1", f"zarr-stride-{STRIDE}", f"hdf5-stride-{STRIDE}"],
)
def prediction(
    request: pytest.FixtureRequest,
    runs: Trained,
    segmented: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Prediction:
    """predict() in blocks of 200 windows, and every window scored directly by the model."""
    backend, stride = request.param
    run = runs.run if stride == 1 else runs.strided
    folder = tmp_path_factory.mktemp("scores")
    out = folder / f"scores{SUFFIX[backend]}"
    report = chunkfit.predict(
        run, segmented, out, events_out=folder / "events.csv", chunk=200, batch_size=64
    )
    return Prediction(
        read_scores(out),
        all_windows(keras_model(run), segmented, WINDOW, stride),
        report,
        folder / "events.csv",
        stride,
    )


def test_scores_have_one_value_per_sample(prediction: Prediction) -> None:
    assert prediction.scores.shape == (2200,) and prediction.scores.dtype == np.float32


def test_score_at_each_window_start_is_the_models_probability_for_that_window(
    prediction: Prediction,
) -> None:
    np.testing.assert_allclose(
        prediction.scores[prediction.windows.starts], prediction.windows.probs[:, 1], atol=1e-6
    )


def test_scores_are_nan_exactly_where_no_window_starts(prediction: Prediction) -> None:
    has_window = np.zeros(2200, dtype=bool)
    has_window[prediction.windows.starts] = True
    np.testing.assert_array_equal(np.isnan(prediction.scores), ~has_window)


def test_the_last_window_minus_one_samples_of_each_segment_are_nan(prediction: Prediction) -> None:
    tails = np.r_[1000 - WINDOW + 1 : 1000, 1000:1010, 2200 - WINDOW + 1 : 2200]
    assert np.isnan(prediction.scores[tails]).all()


def test_report_counts_every_window(prediction: Prediction) -> None:
    assert prediction.report.windows == prediction.windows.starts.size


def read_detections(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_events_csv_holds_one_row_per_event_of_positive_windows(prediction: Prediction) -> None:
    w = prediction.windows
    runs = merge_runs(
        w.starts, w.segments, w.probs[:, 1], WINDOW, prediction.stride, prediction.report.threshold
    )
    expected = [(r.start, r.end, round(r.peak_score, 6), r.peak, r.segment) for r in runs]
    rows = read_detections(prediction.events_csv)
    got = [
        (
            int(r["start_sample"]),
            int(r["end_sample"]),
            float(r["peak_score"]),
            int(r["peak_sample"]),
            int(r["segment"]),
        )
        for r in rows
    ]
    assert got == expected


def test_detections_use_the_threshold_the_run_chose_on_its_validation_split(
    prediction: Prediction, runs: Trained
) -> None:
    run = runs.run if prediction.stride == 1 else runs.strided
    chosen = json.loads((run / "run.json").read_text())["threshold"]
    assert prediction.report.threshold == chosen["value"] != 0.5
    assert prediction.report.threshold_source == "chosen on the run's validation split (event-f1)"


def test_a_threshold_given_replaces_the_runs(
    runs: Trained, segmented: Path, tmp_path: Path
) -> None:
    report = chunkfit.predict(runs.run, segmented, tmp_path / "s.zarr", threshold=0.7)
    assert (report.threshold, report.threshold_source) == (0.7, "--threshold")


def test_events_csv_gives_times_in_seconds_at_the_store_rate(prediction: Prediction) -> None:
    rows = read_detections(prediction.events_csv)
    assert all(
        float(r[f"{k}_s"]) == int(r[f"{k}_sample"]) for r in rows for k in ("start", "end", "peak")
    )


def test_report_counts_the_detections_written(prediction: Prediction) -> None:
    assert prediction.report.detections == len(read_detections(prediction.events_csv)) > 0


# -- bounded memory -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def long_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("long") / "long.zarr"
    synth(path, SynthSpec(samples=24_000, anomalies=800, seed=5))
    return path


@pytest.mark.parametrize("chunk", [500, 2_000, 5_000])
def test_scores_are_bit_identical_whatever_the_block_size(
    runs: Trained, long_store: Path, tmp_path: Path, chunk: int
) -> None:
    chunkfit.predict(runs.run, long_store, tmp_path / "small.zarr", chunk=chunk)
    chunkfit.predict(runs.run, long_store, tmp_path / "whole.zarr", chunk=24_000)
    np.testing.assert_array_equal(
        read_scores(tmp_path / "small.zarr"), read_scores(tmp_path / "whole.zarr")
    )


def test_scores_of_other_batch_sizes_agree_within_1e6(
    runs: Trained, long_store: Path, tmp_path: Path
) -> None:
    chunkfit.predict(runs.run, long_store, tmp_path / "b64.zarr", batch_size=64)
    chunkfit.predict(runs.run, long_store, tmp_path / "b1024.zarr", batch_size=1024)
    np.testing.assert_allclose(
        read_scores(tmp_path / "b64.zarr"), read_scores(tmp_path / "b1024.zarr"), rtol=0, atol=1e-6
    )


# -- stores without events or labels; gaps from a time column --------------------------------------


def test_store_ingested_from_a_plain_csv_is_scored(runs: Trained, tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    source = write_csv(
        tmp_path / "log.csv",
        np.sin(np.arange(500))[:, None] + rng.normal(0, 0.2, (500, 1)),
        names=["x"],
    )
    chunkfit.ingest(tmp_path / "log.zarr", [str(source)], IngestOptions(rate=250.0))
    report = chunkfit.predict(
        runs.run, tmp_path / "log.zarr", tmp_path / "scores.h5", events_out=tmp_path / "ev.csv"
    )
    assert (report.windows, np.isnan(read_scores(tmp_path / "scores.h5")).sum()) == (
        500 - WINDOW + 1,
        WINDOW - 1,
    )


def test_gap_in_the_time_column_leaves_nan_at_the_end_of_each_segment(
    runs: Trained, tmp_path: Path
) -> None:
    rng = np.random.default_rng(9)
    times = np.r_[np.arange(300), 400 + np.arange(200)] / 100.0  # one second missing after row 299
    source = write_csv(tmp_path / "log.csv", rng.normal(size=(500, 1)), names=["x"], times=times)
    chunkfit.ingest(tmp_path / "log.zarr", [str(source)], IngestOptions(time_column="t"))
    chunkfit.predict(runs.run, tmp_path / "log.zarr", tmp_path / "scores.zarr")
    expected = np.zeros(500, dtype=bool)
    expected[300 - WINDOW + 1 : 300] = expected[500 - WINDOW + 1 :] = True
    np.testing.assert_array_equal(np.isnan(read_scores(tmp_path / "scores.zarr")), expected)


def test_scores_are_written_over_an_existing_output_with_overwrite(
    runs: Trained, segmented: Path, tmp_path: Path
) -> None:
    (tmp_path / "scores.h5").write_bytes(b"old")
    chunkfit.predict(runs.run, segmented, tmp_path / "scores.h5", overwrite=True)
    assert read_scores(tmp_path / "scores.h5").shape == (2200,)


def test_scores_array_records_the_run_and_window_settings(
    runs: Trained, segmented: Path, tmp_path: Path
) -> None:
    chunkfit.predict(runs.strided, segmented, tmp_path / "scores.zarr")
    attrs = zarr.open_group(str(tmp_path / "scores.zarr"), mode="r").attrs["chunkfit_scores"]
    assert (attrs["window"], attrs["stride"], attrs["class"]) == (WINDOW, STRIDE, 1)


# -- bad input: refused, nothing written -----------------------------------------------------------


def other_store(path: Path, channels: list[str], samples: int = 200) -> Path:
    return make_store(
        path, np.zeros((samples, len(channels)), np.float32), channels=channels, rate=1.0
    )


REFUSALS: dict[str, tuple[type[Exception], str]] = {
    "run-without-model": (RunError, r"run folder has no model\.keras"),
    "missing-run": (RunError, "no such run folder or .keras file"),
    "not-a-keras-file": (
        ModelError,
        r"not a \.keras model \(a \.keras file is a zip archive, this file is not\)",
    ),
    "other-channel-count": (
        IncompatibleError,
        r"channels \['x', 'y'\] differ from the training store's \['x'\]",
    ),
    "channels-naming-no-store-channel": (
        UsageError,
        r"--channels names \['z'\], not channels of this store \['y'\]",
    ),
    "segments-shorter-than-window": (WindowError, "window 16 is longer than every segment"),
    "output-exists": (StoreExistsError, "already exists; pass --overwrite"),
    "events-output-exists": (StoreExistsError, "already exists; pass --overwrite"),
    "output-folder-missing": (RunError, "the output folder does not exist"),
    "output-without-store-suffix": (UsageError, r"the scores path ends in \.zarr"),
    "output-is-the-store": (UsageError, "is the store being scored"),
    "threshold-above-one": (UsageError, r"--threshold must be in \[0, 1\]"),
    "chunk-zero": (UsageError, "--chunk must be a positive integer"),
    "run-json-of-another-model": (
        ModelError,
        "run.json describes windows of 20 samples .* the model takes 16 samples",
    ),
}


def refusal_case(name: str, runs: Trained, store: Path, tmp: Path) -> dict[str, Any]:
    """Keyword arguments of predict() for one bad input, built in ``tmp``."""
    args: dict[str, Any] = {"run": runs.run, "store": store, "out": tmp / "scores.zarr"}
    if name == "run-without-model":
        (tmp / "empty-run").mkdir()
        args["run"] = tmp / "empty-run"
    elif name == "missing-run":
        args["run"] = tmp / "nope"
    elif name == "not-a-keras-file":
        (tmp / "fake.keras").write_text("not a model")
        args["run"] = tmp / "fake.keras"
    elif name == "other-channel-count":
        args["store"] = other_store(tmp / "two.zarr", ["x", "y"])
    elif name == "channels-naming-no-store-channel":
        args.update(store=other_store(tmp / "y.zarr", ["y"]), channels="x=z")
    elif name == "segments-shorter-than-window":
        args["store"] = other_store(tmp / "short.zarr", ["x"], samples=WINDOW - 1)
    elif name == "output-exists":
        (tmp / "scores.zarr").mkdir()
    elif name == "events-output-exists":
        (tmp / "events.csv").write_text("mine")
        args["events_out"] = tmp / "events.csv"
    elif name == "output-folder-missing":
        args["out"] = tmp / "missing" / "scores.zarr"
    elif name == "output-without-store-suffix":
        args["out"] = tmp / "scores.csv"
    elif name == "output-is-the-store":
        args["store"] = other_store(tmp / "mine.zarr", ["x"])
        args.update(out=args["store"], overwrite=True)
    elif name == "threshold-above-one":
        args["threshold"] = 1.5
    elif name == "chunk-zero":
        args["chunk"] = 0
    elif name == "run-json-of-another-model":
        shutil.copytree(runs.run, tmp / "edited")
        meta = json.loads((tmp / "edited" / "run.json").read_text())
        meta["config"]["windows"]["window"] = 20
        (tmp / "edited" / "run.json").write_text(json.dumps(meta))
        args["run"] = tmp / "edited"
    return args


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_bad_input_is_refused(name: str, runs: Trained, segmented: Path, tmp_path: Path) -> None:
    args = refusal_case(name, runs, segmented, tmp_path)
    kind, message = REFUSALS[name]
    with pytest.raises(kind, match=message):
        chunkfit.predict(**args)


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_bad_input_writes_nothing(
    name: str, runs: Trained, segmented: Path, tmp_path: Path
) -> None:
    args = refusal_case(name, runs, segmented, tmp_path)
    before = listing(tmp_path)
    with pytest.raises(chunkfit.ChunkfitError):
        chunkfit.predict(**args)
    assert listing(tmp_path) == before


@pytest.mark.parametrize(
    ("chunk", "batch", "expected"),
    [(2_000, 1_024, 1_024), (24_000, 1_024, 23_552), (100, 1_024, 1_024), (4_096, 1_024, 4_096)],
)
def test_scoring_blocks_hold_whole_batches(chunk: int, batch: int, expected: int) -> None:
    from chunkfit.core.scoring import scoring_chunk

    assert scoring_chunk(chunk, batch) == expected
