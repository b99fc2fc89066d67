"""A URL where chunkfit takes a local path is refused in one line, never taken for a folder named
``s3:`` in the current directory: every scheme but ``s3://`` (tests/store/test_s3_*.py), and ``s3://``
where chunkfit reads local files only (sources, events)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import REPO, error_line, run_cli

from chunkfit.errors import UsageError
from chunkfit.ingest import ingest
from chunkfit.store import open_store

CSV = str(REPO / "data" / "ecg208.csv")

LOCAL = "give a local path (copy the data from object storage first)"
OR_S3 = "give a local path or an s3:// URL"
CASES = {
    "ingest-store": (
        ["ingest", "gs://bkt/s.zarr", CSV],
        f"gs://bkt/s.zarr: gs:// URLs are not supported for stores; {OR_S3}",
    ),
    "ingest-source": (
        ["ingest", "local.zarr", "s3://bkt/log.csv"],
        f"s3://bkt/log.csv: s3:// URLs are not supported for sources; {LOCAL}",
    ),
    "ingest-events": (
        ["ingest", "local.zarr", CSV, "--events", "gs://bkt/ev.txt"],
        f"gs://bkt/ev.txt: gs:// URLs are not supported for --events; {LOCAL}",
    ),
    "info": (
        ["info", "https://host/s.zarr"],
        f"https://host/s.zarr: https:// URLs are not supported for stores; {OR_S3}",
    ),
    "train-store": (
        ["train", "gs://bkt/s.zarr"],
        f"gs://bkt/s.zarr: gs:// URLs are not supported for stores; {OR_S3}",
    ),
    "train-out": (
        ["train", "local.zarr", "--out", "gs://bkt/runs/a"],
        f"gs://bkt/runs/a: gs:// URLs are not supported for run folders; {OR_S3}",
    ),
    "predict-run": (
        ["predict", "gs://bkt/runs/a", "local.zarr", "--out", "o.zarr"],
        f"gs://bkt/runs/a: gs:// URLs are not supported for runs; {OR_S3}",
    ),
    "evaluate-run": (
        ["evaluate", "https://host/runs/a", "local.zarr"],
        f"https://host/runs/a: https:// URLs are not supported for runs; {OR_S3}",
    ),
    "predict-events-out": (
        [
            "predict",
            "s3://bkt/runs/a",
            "s3://bkt/s.zarr",
            "--out",
            "s3://bkt/o.zarr",
            "--events-out",
            "s3://bkt/e.csv",
        ],
        f"s3://bkt/e.csv: s3:// URLs are not supported for --events-out; {LOCAL}",
    ),
    "synth": (
        ["synth", "gs://bkt/s.zarr"],
        f"gs://bkt/s.zarr: gs:// URLs are not supported for stores; {OR_S3}",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_url_is_refused_in_one_line_and_nothing_is_written(tmp_path: Path, case: str) -> None:
    args, expected = CASES[case]
    line = error_line(run_cli(*args, cwd=tmp_path))
    assert line == f"chunkfit: error: {expected}"
    assert list(tmp_path.iterdir()) == []


def test_open_store_refuses_a_gs_url() -> None:
    with pytest.raises(
        UsageError, match=r"^gs://bkt/s\.zarr: gs:// URLs are not supported for stores"
    ):
        open_store("gs://bkt/s.zarr")


def test_ingest_refuses_a_url_store_given_as_a_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        UsageError, match=r"^s3:/bkt/s\.zarr: s3:// URLs are not supported for stores"
    ):
        ingest(Path("s3://bkt/s.zarr"), [CSV])
    assert list(tmp_path.iterdir()) == []


def test_windows_drive_letter_is_still_a_path(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        open_store("C:/data/s.zarr")
