"""What ``chunkfit export`` refuses, in one line and before anything is written: a path that is not
a run, a format or quantisation it cannot write, an ``--out`` it must not touch, a missing extra,
and a model the format cannot hold (nothing left at ``--out``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from export_support import UNCONVERTIBLE, export, tiny_store, train
from support import error_line, run_without, tree


@pytest.fixture
def fake_run(tmp_path: Path) -> Path:
    """A folder with a run.json: enough for the checks made before the model loads."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"store": {"path": str(tmp_path / "gone.zarr")}}))
    return run


@pytest.fixture(scope="module")
def unconvertible(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of a model with a layer using an op that neither LiteRT nor ONNX has."""
    folder = tmp_path_factory.mktemp("export-refusals")
    (folder / "export_refusals_bessel.py").write_text(UNCONVERTIBLE)
    return train(folder, tiny_store(folder), "run", "--model", "export_refusals_bessel:build")


def test_a_path_that_is_not_a_run_folder_is_refused(tmp_path: Path) -> None:
    result = export(tmp_path / "nowhere")
    assert (result.returncode, error_line(result)) == (
        2,
        f"chunkfit: error: {tmp_path / 'nowhere'}: not a run folder (no run.json); pass the "
        "folder chunkfit train --out wrote",
    )


def test_an_unknown_format_is_refused(fake_run: Path) -> None:
    result = export(fake_run, "--format", "tflite")
    assert (result.returncode, error_line(result)) == (
        2,
        "chunkfit: error: --format must be one of litert, onnx, saved_model, c-array (received "
        "'tflite')",
    )


def test_int8_onnx_is_refused(fake_run: Path) -> None:
    result = export(fake_run, "--format", "onnx", "--quantize", "int8")
    assert (result.returncode, error_line(result)) == (
        2,
        "chunkfit: error: --quantize int8 is not supported for --format onnx; export the float "
        "model, or use --format litert for int8 and float16",
    )


def test_a_quantized_saved_model_is_refused(fake_run: Path) -> None:
    result = export(fake_run, "--format", "saved_model", "--quantize", "float16")
    assert (result.returncode, error_line(result)) == (
        2,
        "chunkfit: error: --quantize float16 does not apply to --format saved_model (a "
        "SavedModel is the float model); use --format litert to quantise",
    )


def test_a_float16_c_array_is_refused(fake_run: Path) -> None:
    result = export(fake_run, "--format", "c-array", "--quantize", "float16")
    assert (result.returncode, error_line(result)) == (
        2,
        "chunkfit: error: --format c-array writes the int8 LiteRT model for a microcontroller; "
        "drop --quantize float16 (c-array is always --quantize int8)",
    )


def test_a_store_without_int8_is_refused(fake_run: Path) -> None:
    result = export(fake_run, "--store", "s.zarr")
    assert (result.returncode, error_line(result)) == (
        2,
        "chunkfit: error: --store gives the windows --quantize int8 calibrates on; drop --store, "
        "or add --quantize int8",
    )


def test_an_out_named_for_another_format_is_refused(fake_run: Path) -> None:
    result = export(fake_run, "--format", "litert", "--out", "detector.onnx")
    assert (result.returncode, error_line(result)) == (
        2,
        "chunkfit: error: --out detector.onnx: a litert file ends in .tflite; rename it (e.g. "
        "detector.tflite)",
    )


def test_an_existing_out_is_refused_and_kept(fake_run: Path) -> None:
    (fake_run / "model.tflite").write_bytes(b"mine")
    result = export(fake_run)
    assert (result.returncode, error_line(result)) == (
        1,
        f"chunkfit: error: {fake_run / 'model.tflite'}: already exists; pass --overwrite to "
        "replace it",
    )
    assert (fake_run / "model.tflite").read_bytes() == b"mine"


def test_int8_without_the_training_store_is_refused_before_loading(fake_run: Path) -> None:
    (fake_run / "model.keras").write_bytes(b"")  # never loaded: the store is checked first
    result = export(fake_run, "--quantize", "int8")
    gone = fake_run.parent / "gone.zarr"
    assert (result.returncode, error_line(result)) == (
        2,
        "chunkfit: error: --quantize int8 calibrates on the run's training windows, and the store "
        f"run.json names ({gone}) is not there; pass --store with the store {fake_run} trained on",
    )


@pytest.mark.parametrize(
    ("fmt", "module", "package"),
    [("onnx", "tf2onnx", "tf2onnx"), ("litert", "ai_edge_litert", "ai-edge-litert")],
)
def test_a_format_without_the_export_extra_names_it(
    fake_run: Path, fmt: str, module: str, package: str
) -> None:
    result = run_without(module, ["export", str(fake_run), "--format", fmt], fake_run.parent)
    assert (result.returncode, error_line(result)) == (
        2,
        f"chunkfit: error: --format {fmt} needs the {package} package; install it with pip "
        "install 'chunkfit[export]'",
    )


BESSEL = "op BesselI0e in layer 'bessel' (BesselLayer)"


def test_a_layer_litert_cannot_hold_is_named_and_nothing_is_left(
    unconvertible: Path, tmp_path: Path
) -> None:
    result = export(unconvertible, "--out", tmp_path / "d.tflite")
    assert (result.returncode, error_line(result)) == (
        1,
        f"chunkfit: error: the model cannot be exported to LiteRT: {BESSEL} is not among "
        "LiteRT's built-in ops; rewrite that layer with built-in Keras layers, or use --format "
        "saved_model",
    )
    assert tree(tmp_path) == {}


def test_a_layer_onnx_cannot_hold_is_named_and_nothing_is_left(
    unconvertible: Path, tmp_path: Path
) -> None:
    result = export(unconvertible, "--format", "onnx", "--out", tmp_path / "d.onnx")
    assert (result.returncode, error_line(result)) == (
        1,
        f"chunkfit: error: the model cannot be exported to ONNX: {BESSEL} has no ONNX "
        "equivalent; rewrite that layer with built-in Keras layers, or use --format saved_model",
    )
    assert tree(tmp_path) == {}


def _model_in(run: Path) -> Path:
    (run / "model.keras").write_bytes(b"the trained model")
    return run


def test_overwrite_never_replaces_the_run_folder(fake_run: Path) -> None:
    before = tree(_model_in(fake_run))
    result = export(fake_run, "--format", "saved_model", "--out", fake_run, "--overwrite")
    assert (result.returncode, error_line(result)) == (
        2,
        f"chunkfit: error: {fake_run}: is the run folder or holds it; pick another --out",
    )
    assert tree(fake_run) == before


def test_overwrite_never_replaces_the_folder_holding_the_run(fake_run: Path) -> None:
    before = tree(_model_in(fake_run).parent)
    result = export(fake_run, "--format", "saved_model", "--out", ".", "--overwrite")
    assert (result.returncode, error_line(result)) == (
        2,
        f"chunkfit: error: {fake_run.parent.resolve()}: is the run folder or holds it; pick "
        "another --out",
    )
    assert tree(fake_run.parent) == before


def test_overwrite_never_replaces_a_folder_that_is_not_a_saved_model(
    fake_run: Path, tmp_path: Path
) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("mine")
    result = export(fake_run, "--format", "saved_model", "--out", notes, "--overwrite")
    assert (result.returncode, error_line(result)) == (
        1,
        f"chunkfit: error: {notes}: a folder that is not a SavedModel export; pick another --out",
    )
    assert tree(notes) == {"todo.txt": b"mine"}
