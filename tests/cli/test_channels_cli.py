"""``--channels`` in real subprocesses: a run used on a recording whose channel has another name."""

from __future__ import annotations

from pathlib import Path

import pytest
from scoring_support import Trained, sensor_signal
from support import run_cli

pytestmark = pytest.mark.slow

EVENTS = list(range(30, 1_500, 61))


@pytest.fixture(scope="module")
def sensor(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store ingested from a CSV whose one column is ``sensor`` (the run's channel is ``x``)."""
    root = tmp_path_factory.mktemp("sensor")
    values = sensor_signal(1_500, EVENTS, seed=3)[:, 0]
    (root / "sensor.csv").write_text("sensor\n" + "".join(f"{v:.6f}\n" for v in values))
    (root / "events.txt").write_text("".join(f"{e}\n" for e in EVENTS))
    result = run_cli(
        "ingest", root / "sensor.zarr", root / "sensor.csv", "--rate", "1", "--events",
        root / "events.txt",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return root / "sensor.zarr"


def test_evaluate_with_channels_says_so_on_its_first_line(runs: Trained, sensor: Path) -> None:
    result = run_cli("evaluate", runs.run, sensor, "--channels", "x=sensor", "--plot",
                     sensor.parent / "eval.png")  # fmt: skip
    assert (result.returncode, result.stdout.splitlines()[0]) == (
        0,
        "channels     store sensor -> run x (--channels)",
    )


def test_follow_maps_one_channel_on_each_side_by_itself(
    runs: Trained, sensor: Path, tmp_path: Path
) -> None:
    result = run_cli(
        "predict", runs.run, sensor, "--follow", "--idle", "0.5", "--out", tmp_path / "s.zarr"
    )
    assert (result.returncode, result.stdout.splitlines()[0]) == (
        0,
        "channels store sensor -> run x (one channel on each side)",
    )
    assert (tmp_path / "s.zarr").is_dir()


def test_predict_with_a_channel_the_store_lacks_is_one_line(
    runs: Trained, sensor: Path, tmp_path: Path
) -> None:
    result = run_cli("predict", runs.run, sensor, "--channels", "x=y", "--out", tmp_path / "s.zarr")
    assert (result.returncode, result.stderr) == (
        2,
        f"chunkfit: error: {sensor}: --channels names ['y'], not channels of this store "
        "['sensor']\n",
    )
