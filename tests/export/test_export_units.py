"""The pure parts of export: names and paths per format, the C source, the layer named in a
converter's op path, and the sidecar's facts of a per-sample (picker) model."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from chunkfit.config import WindowSpec
from chunkfit.export.carray import c_name, c_source
from chunkfit.export.failures import layer_of
from chunkfit.export.formats import target
from chunkfit.export.write import run_facts
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
