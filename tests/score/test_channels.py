"""A run used on another instrument: ``channels=`` maps the store's channels to the run's.

The mapped store holds the training store's columns under other names (and in another order);
its scores must be bit-identical to those of the store the run knows, at the run's own threshold.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr
from scoring_support import Trained, sensor_signal
from support import make_store

import chunkfit
from chunkfit.errors import IncompatibleError, UsageError
from chunkfit.score.channels import channel_map

pytestmark = pytest.mark.slow

N = 3_000
EVENTS = list(range(40, N, 97))


def scores(path: Path) -> np.ndarray:
    return np.asarray(zarr.open_group(str(path), mode="r")["scores"][:])


def two_channels() -> np.ndarray:
    """ch0: the synthetic problem's signal; ch1: another signal the model also reads."""
    rng = np.random.default_rng(5)
    x = sensor_signal(N, EVENTS, seed=4)[:, 0]
    y = np.cos(np.arange(N) / 3.0).astype(np.float32) + rng.normal(0, 0.3, N).astype(np.float32)
    return np.stack([x, y], axis=1)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A run trained on channels ch0, ch1 (a .npy log's names), its store, and the same columns
    stored as ``a`` (ch1) and ``b`` (ch0): another instrument's names and order."""
    root = tmp_path_factory.mktemp("channels")
    data = two_channels()
    own = make_store(root / "own.zarr", data, events=EVENTS, rate=1.0, channels=["ch0", "ch1"])
    other = make_store(
        root / "other.zarr", data[:, ::-1].copy(), events=EVENTS, rate=1.0, channels=["a", "b"]
    )
    chunkfit.fit(
        "baseline-cnn",
        own,
        window=16,
        chunk=512,
        batch_size=64,
        epochs=1,
        validation=0.1,
        out=root / "run",
    )
    return root / "run", own, other


def test_pairs_by_name_score_as_the_runs_own_channels(
    pair: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    run, own, other = pair
    chunkfit.predict(run, own, tmp_path / "own.zarr")
    report = chunkfit.predict(run, other, tmp_path / "other.zarr", channels="ch0=b,ch1=a")
    assert report.channels == "store b, a -> run ch0, ch1 (--channels)"
    np.testing.assert_array_equal(scores(tmp_path / "other.zarr"), scores(tmp_path / "own.zarr"))


def test_a_plain_list_names_the_store_channels_in_the_runs_order(
    pair: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    run, own, other = pair
    chunkfit.predict(run, own, tmp_path / "own.zarr")
    chunkfit.predict(run, other, tmp_path / "other.zarr", channels=["b", "a"])
    np.testing.assert_array_equal(scores(tmp_path / "other.zarr"), scores(tmp_path / "own.zarr"))


def test_the_order_given_is_the_order_read(pair: tuple[Path, Path, Path], tmp_path: Path) -> None:
    """The columns in the store's own order are another input: the mapping is what changed it."""
    run, own, other = pair
    chunkfit.predict(run, own, tmp_path / "own.zarr")
    chunkfit.predict(run, other, tmp_path / "other.zarr", channels="a,b")
    assert not np.array_equal(scores(tmp_path / "other.zarr"), scores(tmp_path / "own.zarr"))


def test_evaluate_with_a_mapping_keeps_the_runs_threshold(pair: tuple[Path, Path, Path]) -> None:
    run, _, other = pair
    result = chunkfit.evaluate(run, other, channels={"ch0": "b", "ch1": "a"})
    assert (result["channels"], result["threshold_source"]) == (
        "store b, a -> run ch0, ch1 (--channels)",
        "chosen on the run's validation split (event-f1)",
    )


def test_other_names_without_a_mapping_are_refused_with_the_way_to_map_them(
    pair: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    run, _, other = pair
    with pytest.raises(IncompatibleError, match=r"or map them with --channels RUN=STORE"):
        chunkfit.predict(run, other, tmp_path / "s.zarr")


def test_one_channel_on_each_side_maps_by_itself(runs: Trained, tmp_path: Path) -> None:
    with chunkfit.open_store(runs.store) as s:
        data, segments = s.read(0, s.n_samples), [(int(a), int(b)) for a, b in s.segments]
    renamed = make_store(
        tmp_path / "renamed.zarr", data, segments=segments, rate=1.0, channels=["sensor"]
    )
    chunkfit.predict(runs.run, runs.store, tmp_path / "own.zarr")
    report = chunkfit.predict(runs.run, renamed, tmp_path / "renamed-scores.zarr")
    assert report.channels == "store sensor -> run x (one channel on each side)"
    np.testing.assert_array_equal(
        scores(tmp_path / "renamed-scores.zarr"), scores(tmp_path / "own.zarr")
    )


# -- the mapping itself ----------------------------------------------------------------------------


def test_same_names_need_no_line() -> None:
    assert channel_map(["x", "y"], 2, ["x", "y"], None, where="s").line is None


def test_pairs_must_cover_every_run_channel() -> None:
    with pytest.raises(UsageError, match=r"received no store channel for \['y'\]"):
        channel_map(["x", "y"], 2, ["a", "b"], "x=a", where="s")


def test_a_list_of_another_length_is_refused() -> None:
    with pytest.raises(UsageError, match="lists 1 store channel"):
        channel_map(["x", "y"], 2, ["a", "b"], "a", where="s")


def test_pairs_mixed_with_names_are_refused() -> None:
    with pytest.raises(UsageError, match="give every channel as RUN=STORE, or none"):
        channel_map(["x", "y"], 2, ["a", "b"], "x=a,b", where="s")


def test_a_keras_file_takes_a_plain_list() -> None:
    assert channel_map(None, 2, ["a", "b", "c"], "c,a", where="s").order == [2, 0]
