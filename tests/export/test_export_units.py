"""The pure parts of export: names and paths per format, the C source, the layer named in a
converter's op path, the sidecar's facts of a per-sample (picker) model, a SavedModel folder put in
place, a full disk's one line, and an s3:// run located as asked."""

from __future__ import annotations

import errno
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from support import tree

from chunkfit.config import WindowSpec
from chunkfit.errors import DiskFullError
from chunkfit.export import write
from chunkfit.export.carray import c_name, c_source
from chunkfit.export.failures import layer_of
from chunkfit.export.formats import target
from chunkfit.export.meta import RunFacts, TensorInfo
from chunkfit.export.write import _publish, disk_full, reachable_threshold, run_facts
from chunkfit.score.exported import ExportedPredictor, Runtime
from chunkfit.score.runs import RunSpec


@pytest.mark.parametrize(
    ("fmt", "quantize", "name"),
    [
        ("litert", None, "model.tflite"),
        ("litert", "int8", "model-int8.tflite"),
        ("litert", "float16", "model-float16.tflite"),
        ("onnx", None, "model.onnx"),
        ("saved_model", None, "saved_model"),
        ("c-array", None, "model-int8.c"),
    ],
)
def test_each_export_has_its_default_name(fmt: str, quantize: str | None, name: str) -> None:
    assert target(fmt, quantize).default_name == name


def test_a_c_array_is_always_int8() -> None:
    assert target("c-array", None).quantize == "int8"


def test_a_file_sidecar_lies_beside_it_and_a_saved_model_s_inside_it() -> None:
    assert target("onnx", None).sidecar(Path("a/m.onnx")) == Path("a/m.onnx.json")
    assert target("saved_model", None).sidecar(Path("a/sm")) == Path("a/sm/chunkfit.json")


def test_the_c_source_is_what_xxd_i_writes_below_the_metadata() -> None:
    data = bytes(range(26))
    text = c_source(data, "m_tflite", {"window": 16, "run": {"big": 1}})
    body = text[text.index("const unsigned char") :]
    assert body.splitlines() == [
        "const unsigned char m_tflite[] = {",
        "  " + ", ".join(f"0x{b:02x}" for b in range(12)) + ",",
        "  " + ", ".join(f"0x{b:02x}" for b in range(12, 24)) + ",",
        "  0x18, 0x19",
        "};",
        "const unsigned int m_tflite_len = 26;",
    ]
    assert '"window": 16' in text and '"big"' not in text


def test_the_c_name_is_the_file_name_as_xxd_spells_it() -> None:
    assert c_name("model-int8.c") == "model_int8_tflite"
    assert re.fullmatch(r"_\w+", c_name("1st.c"))


def test_the_innermost_layer_of_an_op_path_is_named() -> None:
    layers = {"detector": "Functional", "bessel": "BesselLayer"}
    assert layer_of("detector_1/bessel_1/bessel_i0e/Op", layers) == "layer 'bessel' (BesselLayer)"


def test_a_picker_s_event_score_is_the_only_output_channel() -> None:
    import keras

    inp = keras.Input((32, 1))
    model = keras.Model(inp, keras.layers.Conv1D(1, 1, activation="sigmoid")(inp))
    spec = RunSpec("run", WindowSpec(window=32), [0, 1], ["x"], 1, {}, "", {"model": "picker"})
    facts = run_facts(model, spec)
    assert (facts.output_kind, facts.positive, facts.model) == ("per-sample", 0, "picker")


def _facts(threshold: float) -> RunFacts:
    return RunFacts(
        model="baseline-cnn",
        trained_on="tensorflow",
        window=16,
        stride=1,
        channels=["x"],
        n_channels=1,
        rate=None,
        classes=[0, 1],
        positive=1,
        threshold=threshold,
        label="any",
        output_kind="window",
        run={},
    )


def test_an_int8_output_gets_the_highest_threshold_it_can_reach() -> None:
    out = TensorInfo("scores", (None, 2), "int8", scale=1 / 256, zero_point=-128)
    top = 255 / 256  # a softmax's int8 output stops there
    facts, note = reachable_threshold(_facts(0.99998), out)
    assert top - 1 / 256 < facts.threshold < top  # windows at the top score fire, one below not
    assert note is not None and "0.99998" in note
    kept, none = reachable_threshold(_facts(0.9), out)
    assert kept.threshold == 0.9 and none is None
    float_out = TensorInfo("scores", (None, 2), "float32")
    assert reachable_threshold(_facts(0.99998), float_out) == (_facts(0.99998), None)


SAVED_MODEL = target("saved_model", None)


def _export_folder(path: Path, text: str) -> Path:
    path.mkdir()
    (path / "chunkfit.json").write_text(text)
    return path


def test_a_stale_aside_folder_does_not_stop_a_saved_model_replacing_the_last(
    tmp_path: Path,
) -> None:
    out = _export_folder(tmp_path / "sm", "old")
    tmp = _export_folder(tmp_path / ".sm.chunkfit-tmp-7", "new")
    _export_folder(tmp_path / ".sm.chunkfit-tmp-7-old", "left by a killed export")
    _publish(tmp, tmp, out, SAVED_MODEL)
    assert tree(tmp_path) == {"sm": None, "sm/chunkfit.json": b"new"}


def test_a_saved_model_that_cannot_take_the_last_one_s_place_puts_it_back(
    tmp_path: Path,
) -> None:
    out = _export_folder(tmp_path / "sm", "old")
    gone = tmp_path / ".sm.chunkfit-tmp-7"  # the new folder is not there: its rename fails
    with pytest.raises(FileNotFoundError):
        _publish(gone, gone, out, SAVED_MODEL)
    assert tree(tmp_path) == {"sm": None, "sm/chunkfit.json": b"old"}


def test_a_full_disk_while_writing_is_one_line() -> None:
    with pytest.raises(DiskFullError) as caught, disk_full(Path("d.tflite")):
        raise OSError(errno.ENOSPC, "No space left on device")
    assert str(caught.value) == (
        "d.tflite: disk full (No space left on device); nothing was written; free some space "
        "and export again"
    )


def test_another_write_error_keeps_its_traceback() -> None:
    with pytest.raises(PermissionError), disk_full(Path("d.tflite")):
        raise PermissionError(errno.EACCES, "Permission denied")


def test_an_s3_run_is_located_with_unsafe(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    asked: list[bool] = []

    def locate(run: str, *, unsafe: bool = False) -> SimpleNamespace:
        asked.append(unsafe)
        return SimpleNamespace(path=tmp_path)

    monkeypatch.setattr(write, "locate_run", locate)
    assert write._run_folder("s3://bucket/run", "d.tflite", True) == tmp_path
    assert asked == [True]


def test_a_uint8_output_s_highest_score_is_read_from_its_own_type() -> None:
    runtime = Runtime(
        lambda x: x, 8, 1, (2,), None, out_quant=(1 / 256, 0), out_dtype=np.dtype(np.uint8)
    )
    assert ExportedPredictor(runtime, 4).ceiling == 255 / 256
