"""DetectionCsv: the rows of window events and of a per-sample model's peaks, in one format."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from chunkfit.core.detect import Detection, point_detections
from chunkfit.core.timeline import Timeline
from chunkfit.score.outputs import DetectionCsv
from chunkfit.store.segtimes import SegmentTime, parse_utc

SEGMENTS = np.array([[0, 100], [100, 200]])
DATED = [SegmentTime(utc_us=parse_utc("2024-05-01T12:00:00Z")), None]


def written(path: Path, timeline: Timeline, detections: list[Detection]) -> list[list[str]]:
    out = DetectionCsv(path, timeline)
    out.write(detections)
    out.close()
    with open(path, newline="") as f:
        return list(csv.reader(f))


def test_a_peak_of_a_per_sample_model_is_a_row_one_sample_long(tmp_path: Path) -> None:
    peaks = point_detections(np.array([150]), np.array([0.75]), SEGMENTS)
    rows = written(tmp_path / "d.csv", Timeline(SEGMENTS, 100.0, [None, None]), peaks)
    assert rows[1] == ["1.500000", "1.510000", "1.500000", "0.750000", "1", "150", "151", "150"]


def test_a_segment_without_a_time_has_empty_utc_cells_in_a_dated_store(tmp_path: Path) -> None:
    rows = written(
        tmp_path / "d.csv",
        Timeline(SEGMENTS, 100.0, DATED),
        [Detection(10, 30, 0.9, 20, 0), Detection(110, 130, 0.8, 120, 1)],
    )
    assert [r[8:] for r in rows] == [
        ["start_utc", "end_utc", "peak_utc"],
        [
            "2024-05-01T12:00:00.100000Z",
            "2024-05-01T12:00:00.300000Z",
            "2024-05-01T12:00:00.200000Z",
        ],
        ["", "", ""],
    ]


def test_a_store_without_a_rate_has_empty_seconds_cells(tmp_path: Path) -> None:
    rows = written(
        tmp_path / "d.csv", Timeline(SEGMENTS, None, [None, None]), [Detection(10, 30, 0.9, 20, 0)]
    )
    assert rows[1] == ["", "", "", "0.900000", "0", "10", "30", "20"]
