"""A URL where chunkfit takes a local path is refused in one line, never taken for a folder named
``s3:`` in the current directory (object storage is not supported yet)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import REPO, error_line, run_cli

from chunkfit.errors import UsageError
from chunkfit.ingest import ingest
from chunkfit.store import open_store

CSV = str(REPO / "data" / "ecg208.csv")

CASES = {
    "ingest-store": (["ingest", "s3://bkt/s.zarr", CSV], "s3://bkt/s.zarr: s3:// URLs are not supported for stores"),
    "ingest-source": (["ingest", "local.zarr", "s3://bkt/log.csv"], "s3://bkt/log.csv: s3:// URLs are not supported for sources"),
    "ingest-events": (["ingest", "local.zarr", CSV, "--events", "gs://bkt/ev.txt"], "gs://bkt/ev.txt: gs:// URLs are not supported for --events"),
    "info": (["info", "s3://bkt/s.zarr"], "s3://bkt/s.zarr: s3:// URLs are not supported for stores"),
    "train-store": (["train", "s3://bkt/s.zarr"], "s3://bkt/s.zarr: s3:// URLs are not supported for stores"),
    "train-out": (["train", "local.zarr", "--out", "s3://bkt/runs/a"], "s3://bkt/runs/a: s3:// URLs are not supported for run folders"),
    "predict-run": (["predict", "s3://bkt/runs/a", "local.zarr", "--out", "o.zarr"], "s3://bkt/runs/a: s3:// URLs are not supported for runs"),
    "evaluate-run": (["evaluate", "https://host/runs/a", "local.zarr"], "https://host/runs/a: https:// URLs are not supported for runs"),
    "synth": (["synth", "s3://bkt/s.zarr"], "s3://bkt/s.zarr: s3:// URLs are not supported for stores"),
}


@pytest.mark.parametrize("case", CASES)
def test_url_is_refused_in_one_line_and_nothing_is_written(tmp_path: Path, case: str) -> None:
    args, expected = CASES[case]
    line = error_line(run_cli(*args, cwd=tmp_path))
    assert line == f"chunkfit: error: {expected}; give a local path (copy the data from object storage first)"
    assert list(tmp_path.iterdir()) == []


def test_open_store_refuses_a_url() -> None:
    with pytest.raises(UsageError, match=r"^s3://bkt/s\.zarr: s3:// URLs are not supported for stores"):
        open_store("s3://bkt/s.zarr")


def test_ingest_refuses_a_url_store_given_as_a_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match=r"^s3:/bkt/s\.zarr: s3:// URLs are not supported for stores"):
        ingest(Path("s3://bkt/s.zarr"), [CSV])
    assert list(tmp_path.iterdir()) == []


def test_windows_drive_letter_is_still_a_path(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        open_store("C:/data/s.zarr")
