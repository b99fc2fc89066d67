"""Shared fixtures: the two store backends, small stores and sources written into tmp dirs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from support import REPO, SUFFIX, write_csv


@pytest.fixture(params=["zarr", "hdf5"])
def backend(request: pytest.FixtureRequest) -> str:
    """Each store test runs once per backend."""
    return str(request.param)


@pytest.fixture
def store_path(tmp_path: Path, backend: str) -> Path:
    """A path for a new store of the current backend (not created)."""
    return tmp_path / f"store{SUFFIX[backend]}"


@pytest.fixture
def small_csv(tmp_path: Path) -> Path:
    """Two channels, 300 rows at 100 Hz with a time column."""
    rng = np.random.default_rng(7)
    values = rng.normal(size=(300, 2))
    return write_csv(tmp_path / "small.csv", values, names=["a", "b"], times=np.arange(300) / 100.0)


@pytest.fixture
def ecg_csv() -> Path:
    return REPO / "data" / "ecg208.csv"


@pytest.fixture
def ecg_events() -> Path:
    return REPO / "data" / "ecg208_events.txt"
