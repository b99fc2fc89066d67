"""The detections CSV: one row per event with seconds that respect segments, UTC times where the
store knows them, --merge-gap and --min-duration, and predict writing it without --out."""

from __future__ import annotations

import csv
import datetime as dt
from pathlib import Path

import numpy as np
import pytest
from scoring_support import WINDOW, Trained, all_windows, keras_model, merge_runs
from support import error_line, run_cli, write_csv

import chunkfit
from chunkfit.config import IngestOptions
from chunkfit.errors import UsageError

pytestmark = pytest.mark.slow

COLUMNS = "start_s,end_s,peak_s,peak_score,segment,start_sample,end_sample,peak_sample"
NOON = dt.datetime(2024, 5, 1, 12, 0, 0)


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def dated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store at 1 Hz from a CSV with ISO times: 300 samples from noon, then 200 more after a gap
    of 100 s."""
    folder = tmp_path_factory.mktemp("dated")
    seconds = [*range(300), *range(400, 600)]
    rng = np.random.default_rng(4)
    src = write_csv(
        folder / "log.csv",
        rng.normal(size=(500, 1)),
        names=["x"],
        times=[(NOON + dt.timedelta(seconds=s)).isoformat() + "Z" for s in seconds],
    )
    store = folder / "log.zarr"
    chunkfit.ingest(store, [str(src)], IngestOptions(time_column="t"))
    return store


@pytest.fixture(scope="module")
def every_window(runs: Trained, dated: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The detections of ``dated`` at threshold 0: one event spanning each segment."""
    out = tmp_path_factory.mktemp("every") / "det.csv"
    chunkfit.predict(runs.run, dated, events_out=out, threshold=0.0)
    return out


def test_the_header_names_seconds_samples_and_utc_times(every_window: Path) -> None:
    header = every_window.read_text().splitlines()[0]
    assert header == COLUMNS + ",start_utc,end_utc,peak_utc"


def test_an_event_is_one_row_with_its_segment_and_span(every_window: Path) -> None:
    got = [(r["segment"], r["start_sample"], r["end_sample"]) for r in rows(every_window)]
    assert got == [("0", "0", "300"), ("1", "300", "500")]


def test_seconds_after_a_gap_count_the_gap(every_window: Path) -> None:
    second = rows(every_window)[1]
    assert (float(second["start_s"]), float(second["end_s"])) == (400.0, 600.0)


def test_the_peak_is_timed_in_its_segment(every_window: Path) -> None:
    second = rows(every_window)[1]
    peak = int(second["peak_sample"])
    assert 300 <= peak < 500 and float(second["peak_s"]) == peak + 100


def test_utc_times_are_the_segments_start_plus_the_samples(every_window: Path) -> None:
    second = rows(every_window)[1]
    when = NOON + dt.timedelta(seconds=int(second["peak_sample"]) + 100)
    assert (second["start_utc"], second["end_utc"], second["peak_utc"]) == (
        "2024-05-01T12:06:40.000000Z",
        "2024-05-01T12:10:00.000000Z",
        when.isoformat(timespec="microseconds") + "Z",
    )


def test_a_store_without_times_has_no_utc_columns(
    runs: Trained, segmented: Path, tmp_path: Path
) -> None:
    chunkfit.predict(runs.run, segmented, events_out=tmp_path / "d.csv", threshold=0.0)
    assert (tmp_path / "d.csv").read_text().splitlines()[0] == COLUMNS


def test_predict_writes_only_the_detections_without_out(
    runs: Trained, dated: Path, tmp_path: Path
) -> None:
    result = run_cli("predict", runs.run, dated, "--events-out", "d.csv", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.csv"]
    assert result.stdout.splitlines()[-1] == (
        f"scored 470 windows; {len(rows(tmp_path / 'd.csv'))} detection(s) in d.csv"
    )


def test_predict_without_any_output_is_refused(runs: Trained, dated: Path) -> None:
    result = run_cli("predict", runs.run, dated)
    assert error_line(result) == (
        "chunkfit: error: predict writes the scores (--out), the detections (--events-out) or "
        "both; give one"
    )


def test_merge_gap_and_min_duration_give_the_events_of_the_brute_force(
    runs: Trained, segmented: Path, tmp_path: Path
) -> None:
    report = chunkfit.predict(
        runs.run, segmented, events_out=tmp_path / "d.csv", merge_gap=20.0, min_duration=30.0
    )
    w = all_windows(keras_model(runs.run), segmented, WINDOW, 1)
    expected = merge_runs(w.starts, w.segments, w.probs[:, 1], WINDOW, 1, report.threshold, 20, 30)
    got = [
        (int(r["start_sample"]), int(r["end_sample"]), int(r["peak_sample"]), int(r["segment"]))
        for r in rows(tmp_path / "d.csv")
    ]
    assert got == [(e.start, e.end, e.peak, e.segment) for e in expected]


def test_merge_gap_on_a_store_without_a_rate_is_refused(runs: Trained, tmp_path: Path) -> None:
    src = write_csv(tmp_path / "x.csv", np.zeros((100, 1)), names=["x"])
    chunkfit.ingest(tmp_path / "s.zarr", [str(src)])
    with pytest.raises(UsageError, match="--merge-gap is in seconds and the store has no sample"):
        chunkfit.predict(runs.run, tmp_path / "s.zarr", events_out=tmp_path / "d.csv", merge_gap=1)
    assert not (tmp_path / "d.csv").exists()


def test_a_negative_min_duration_is_refused(runs: Trained, dated: Path, tmp_path: Path) -> None:
    result = run_cli(
        "predict", runs.run, dated, "--events-out", "d.csv", "--min-duration", "-1", cwd=tmp_path
    )
    assert error_line(result) == (
        "chunkfit: error: --min-duration must be a number of seconds, 0 or more (received -1.0)"
    )
