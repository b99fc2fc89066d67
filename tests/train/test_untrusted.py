"""Files that may come from someone else: a .npy never unpickles, a .keras file loads in Keras safe
mode unless --unsafe, ``module:function`` is documented as running the user's own code, and a store
whose attributes or arrays are malformed is refused on open and never read past its end.

The hostile files carry a payload that creates a marker file when it runs, so "refused" also means
"its code never ran".
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any

import numpy as np
import pytest
from support import SUFFIX, error_line, make_store, run_cli, tree

import chunkfit
from chunkfit.errors import StoreFormatError

WINDOW = 16


class Payload:
    """Unpickling this object opens (so creates) the marker file: what a hostile pickle could do."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return open, (self.marker, "w")


def hostile_npy(path: Path, marker: Path) -> Path:
    np.save(path, np.array([Payload(marker), 1.0], dtype=object), allow_pickle=True)
    return path


def lambda_model(path: Path, marker: Path) -> Path:
    """A .keras model whose Lambda layer creates ``marker`` whenever its code runs (on load too)."""
    import keras

    code = f"lambda t: (open({str(marker)!r}, 'a').close(), t * 1.0)[1]"
    x = keras.Input((WINDOW, 1))
    h = keras.layers.Lambda(eval(code))(x)  # eval: the marker path must be a constant of the code
    y = keras.layers.Dense(2, activation="softmax")(keras.layers.Flatten()(h))
    keras.Model(x, y).save(path)
    marker.unlink()  # building the model ran the lambda once, here
    return path


def event_store(path: Path) -> Path:
    rng = np.random.default_rng(5)
    x = rng.normal(size=(600, 1)).astype(np.float32)
    return make_store(path, x, events=list(range(7, 600, 25)), rate=10.0, chunk=128, channels=["x"])


# -- .npy ------------------------------------------------------------------------------------------


def test_the_hostile_npy_really_runs_code_when_numpy_unpickles_it(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    np.load(hostile_npy(tmp_path / "evil.npy", marker), allow_pickle=True)
    assert marker.exists()


def test_npy_holding_a_pickle_is_refused_with_one_line(tmp_path: Path) -> None:
    hostile_npy(tmp_path / "evil.npy", tmp_path / "ran")
    result = run_cli("ingest", "s.zarr", "evil.npy", "--rate", "1", cwd=tmp_path)
    expected = (
        "chunkfit: error: evil.npy: the array holds Python objects (dtype object), which load "
        "only by unpickling; chunkfit never unpickles a file: save a plain numeric array"
    )
    assert (result.returncode, error_line(result)) == (1, expected)


def test_npy_holding_a_pickle_never_runs_its_code(tmp_path: Path) -> None:
    hostile_npy(tmp_path / "evil.npy", tmp_path / "ran")
    run_cli("ingest", "s.zarr", "evil.npy", "--rate", "1", cwd=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evil.npy"]


def test_npy_holding_a_pickle_is_refused_by_the_library_too(tmp_path: Path) -> None:
    hostile_npy(tmp_path / "evil.npy", tmp_path / "ran")
    with pytest.raises(chunkfit.ChunkfitError, match="never unpickles"):
        chunkfit.ingest(
            tmp_path / "s.zarr", [str(tmp_path / "evil.npy")], chunkfit.IngestOptions(rate=1.0)
        )


# -- .keras ----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Loaded:
    """One command on the Lambda model, in a folder holding the model, a store and nothing else."""

    result: CompletedProcess[str]
    folder: Path
    before: dict[str, bytes | None]

    @property
    def code_ran(self) -> bool:
        return (self.folder / "ran").exists()


SAFE_MODE = (
    "lambda.keras: refused in Keras safe mode: the file holds Python code (a Lambda layer or "
    "custom function) that runs when it loads; if you trust its author, pass --unsafe"
)
TRAIN = [
    "--window",
    str(WINDOW),
    "--chunk",
    "256",
    "--batch-size",
    "32",
    "--epochs",
    "1",
    "--out",
    "run",
]
COMMANDS = {
    "evaluate": ["evaluate", "lambda.keras", "s.zarr", "--plot", "eval.png"],
    "evaluate-unsafe": ["evaluate", "lambda.keras", "s.zarr", "--plot", "eval.png", "--unsafe"],
    "predict": ["predict", "lambda.keras", "s.zarr", "--out", "scores.zarr"],
    "train": ["train", "s.zarr", "--model", "lambda.keras", *TRAIN],
    "train-unsafe": ["train", "s.zarr", "--model", "lambda.keras", *TRAIN, "--unsafe"],
}


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Loaded]]:
    """Every command once, each in its own folder, three at a time (each loads TensorFlow)."""
    template = event_store(tmp_path_factory.mktemp("lambda-model") / "s.zarr")
    with ThreadPoolExecutor(max_workers=3) as pool:
        started = {}
        for name, args in COMMANDS.items():
            folder = tmp_path_factory.mktemp(name)
            shutil.copytree(template, folder / "s.zarr")
            lambda_model(folder / "lambda.keras", folder / "ran")  # the marker of this folder only
            started[name] = (folder, tree(folder), pool.submit(run_cli, *args, cwd=folder))
        yield {
            name: Loaded(f.result(), folder, before)
            for name, (folder, before, f) in started.items()
        }


@pytest.mark.parametrize("name", ["evaluate", "predict", "train"])
def test_keras_file_with_a_lambda_is_refused_in_safe_mode(
    loaded: dict[str, Loaded], name: str
) -> None:
    assert (loaded[name].result.returncode, error_line(loaded[name].result)) == (
        1,
        f"chunkfit: error: {SAFE_MODE}",
    )


@pytest.mark.parametrize("name", ["evaluate", "predict", "train"])
def test_refused_keras_file_never_runs_its_code(loaded: dict[str, Loaded], name: str) -> None:
    assert not loaded[name].code_ran


@pytest.mark.parametrize("name", ["evaluate", "predict", "train"])
def test_refused_keras_file_leaves_the_folder_as_it_was(
    loaded: dict[str, Loaded], name: str
) -> None:
    assert tree(loaded[name].folder) == loaded[name].before


@pytest.mark.parametrize("name", ["evaluate-unsafe", "train-unsafe"])
def test_keras_file_with_a_lambda_loads_with_unsafe(loaded: dict[str, Loaded], name: str) -> None:
    # nothing but the verdict's warnings (the tiny store's validation split holds few events)
    errors = [
        line for line in loaded[name].result.stderr.splitlines() if not line.startswith("warning: ")
    ]
    assert (loaded[name].result.returncode, errors) == (0, [])


@pytest.mark.parametrize("name", ["evaluate-unsafe", "train-unsafe"])
def test_unsafe_runs_the_code_in_the_file(loaded: dict[str, Loaded], name: str) -> None:
    assert loaded[name].code_ran


def test_train_from_a_lambda_model_with_unsafe_saves_the_trained_model(
    loaded: dict[str, Loaded],
) -> None:
    assert (loaded["train-unsafe"].folder / "run" / "model.keras").is_file()


# -- module:function -------------------------------------------------------------------------------


def test_train_help_says_module_function_runs_your_own_code() -> None:
    result = run_cli("train", "--help")
    words = " ".join(re.sub(r"[│╭╮╰╯─]", " ", result.stdout).split())
    assert (
        "module:function (imports that module and calls that function: it runs your own Python "
        "code)" in words
    )


def test_train_help_offers_unsafe_for_keras_files() -> None:
    words = " ".join(re.sub(r"[│╭╮╰╯─]", " ", run_cli("train", "--help").stdout).split())
    assert "--unsafe Load a --model .keras file outside Keras safe mode" in words


# -- stores ----------------------------------------------------------------------------------------


def _edit_zarr_meta(path: Path, name: str, **changes: object) -> None:
    meta = path / name / "zarr.json"
    doc = json.loads(meta.read_text())
    doc.update(changes)
    meta.write_text(json.dumps(doc))


def test_zarr_store_claiming_more_samples_than_its_chunks_hold_is_not_read_past_them(
    tmp_path: Path,
) -> None:
    path = event_store(tmp_path / "s.zarr")
    _edit_zarr_meta(path, "signal", shape=[6000, 1])
    with (
        chunkfit.open_store(path) as s,
        pytest.raises(
            StoreFormatError, match=r"chunk signal/c/5/0 \(samples \[640, 768\)\) is missing"
        ),
    ):
        s.read(0, 6000)


def test_zarr_store_claiming_more_samples_still_reads_the_samples_it_has(tmp_path: Path) -> None:
    path = event_store(tmp_path / "s.zarr")
    _edit_zarr_meta(path, "signal", shape=[6000, 1])
    with chunkfit.open_store(path) as s:
        assert s.read(0, 600).shape == (600, 1)


MALFORMED: dict[
    str, tuple[Callable[[dict[str, Any]], None], str | None, np.ndarray | None, str]
] = {
    "labels-of-another-length": (
        lambda a: None,
        "labels",
        np.zeros(10, dtype=np.int32),
        r"labels must be integers of shape \(600,\) \(found \(10,\), int32\)",
    ),
    "segments-of-three-bounds": (
        lambda a: None,
        "segments",
        np.zeros((1, 3), dtype=np.int64),
        r"segments must have shape \[segment, 2\] \(found \(1, 3\)\)",
    ),
    "events-before-the-start": (
        lambda a: None,
        "events",
        np.array([-4, 7], dtype=np.int64),
        "events must be sorted",
    ),
    "channels-not-names": (
        lambda a: a.update(channels=[1]),
        None,
        None,
        r"attribute channels must be a non-empty list of names \(found \[1\]\)",
    ),
    "label-classes-not-integers": (
        lambda a: a.update(label_classes=["a"]),
        None,
        None,
        r"label_classes must be a list of integers \(found \['a'\]\)",
    ),
    "rate-negative": (
        lambda a: a.update(sample_rate=-10.0),
        None,
        None,
        r"sample_rate must be a positive number or null \(found -10.0\)",
    ),
}


def _malformed(
    path: Path, change: Callable[[dict[str, Any]], None], array: str | None, data: np.ndarray | None
) -> Path:
    import h5py
    import zarr

    event_store(path)
    if path.suffix == ".zarr":
        doc = json.loads((path / "zarr.json").read_text())
        change(doc["attributes"]["chunkfit"])
        (path / "zarr.json").write_text(json.dumps(doc))
        if array is not None:
            shutil.rmtree(path / array, ignore_errors=True)
            zarr.open_group(str(path), mode="r+").create_array(array, data=data)
    else:
        with h5py.File(path, "r+") as f:
            attrs = json.loads(f.attrs["chunkfit"])
            change(attrs)
            f.attrs["chunkfit"] = json.dumps(attrs)
            if array is not None:
                if array in f:
                    del f[array]
                f.create_dataset(array, data=data)
    return path


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_store_is_refused_on_open(tmp_path: Path, backend: str, name: str) -> None:
    change, array, data, message = MALFORMED[name]
    path = _malformed(tmp_path / f"s{SUFFIX[backend]}", change, array, data)
    with pytest.raises(StoreFormatError, match=f"not a valid chunkfit store: {message}"):
        chunkfit.open_store(path)
