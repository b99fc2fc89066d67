"""Helpers of the export tests: a tiny store and run trained through the CLI, exports, and the
device side: each exported file run in its own runtime in a fresh interpreter without chunkfit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
from support import run_cli

from chunkfit.synth import SynthSpec, balanced_anomalies, synth

WINDOW = 16
SAMPLES = 2_000

# A module:function model (a custom layer of keras.ops) that every format holds.
FACTORY = """
import keras
from keras import ops


class Softsign(keras.layers.Layer):
    def call(self, x):
        return x / (1.0 + ops.abs(x))


def build(window, n_channels, n_classes):
    inp = keras.Input((window, n_channels))
    x = keras.layers.Conv1D(8, 5, activation="relu")(inp)
    x = Softsign(name="softsign")(x)
    x = keras.layers.GlobalAveragePooling1D()(x)
    return keras.Model(inp, keras.layers.Dense(n_classes, activation="softmax")(x))
"""

# A module:function model whose custom layer uses an op that neither LiteRT's built-in ops nor
# ONNX have (TensorFlow's Bessel function).
UNCONVERTIBLE = """
import keras
import tensorflow as tf


class BesselLayer(keras.layers.Layer):
    def call(self, x):
        return tf.math.special.bessel_i0e(x)


def build(window, n_channels, n_classes):
    inp = keras.Input((window, n_channels))
    x = keras.layers.Flatten()(BesselLayer(name="bessel")(inp))
    return keras.Model(inp, keras.layers.Dense(n_classes, activation="softmax")(x))
"""


def tiny_store(folder: Path) -> Path:
    """A synthetic store (channel ``x``, 1 Hz) with events spread evenly."""
    store = folder / "s.zarr"
    synth(store, SynthSpec(samples=SAMPLES, anomalies=balanced_anomalies(SAMPLES, WINDOW), seed=1))
    return store


def train(folder: Path, store: Path, name: str, *extra: str) -> Path:
    """A run trained for one epoch through the CLI, in ``folder``."""
    result = run_cli(
        "train",
        store,
        "--window",
        str(WINDOW),
        "--epochs",
        "1",
        "--batch-size",
        "64",
        "--out",
        name,
        *extra,
        cwd=folder,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr
    return folder / name


def export(run: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    """``chunkfit export RUN ARGS`` in a subprocess (in the run's parent folder, where a
    module:function model's module lies)."""
    return run_cli("export", run, *args, cwd=run.parent, timeout=900)


def starts(n: int = 48) -> np.ndarray:
    """Window starts spread over the whole store."""
    return np.linspace(0, SAMPLES - WINDOW, n).astype(np.int64)


# The device side: no chunkfit (its import is blocked), the store's signal read with zarr, each
# exported file run by the runtime made for it. A c-array is compiled back to bytes as a firmware
# build would, and run one window at a time (its batch is fixed to 1).
DEVICE = r"""
import json, re, sys, tempfile
sys.modules["chunkfit"] = None
import numpy as np, zarr

store, starts, artifacts = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
signal = zarr.open_array(store, path="signal", mode="r")


def windows(meta):
    w = meta["window"]
    return np.stack([signal[s : s + w] for s in starts]).astype(np.float32)


def quantized(x, q):
    if q["scale"] is None:
        return x
    return np.clip(np.round(x / q["scale"]) + q["zero_point"], -128, 127).astype(q["dtype"])


def real(y, q):
    return y if q["scale"] is None else (y.astype(np.float32) - q["zero_point"]) * q["scale"]


def litert(path, meta, x):
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_path=path)
    i, o = it.get_input_details()[0], it.get_output_details()[0]
    batch = meta["input"]["shape"][0]
    parts = []
    for k in range(0, len(x), batch or len(x)):
        part = x[k : k + (batch or len(x))]
        it.resize_tensor_input(i["index"], part.shape)
        it.allocate_tensors()
        it.set_tensor(i["index"], quantized(part, meta["input"]))
        it.invoke()
        parts.append(real(it.get_tensor(o["index"]), meta["output"]))
    details = {"input": str(np.dtype(i["dtype"])), "output": str(np.dtype(o["dtype"])),
               "input_q": list(i["quantization"]), "output_q": list(o["quantization"])}
    return np.concatenate(parts), details


def c_array(path, meta, x):
    text = open(path).read()
    body = text[text.index("{", text.index("[] =")) + 1 : text.index("};")]
    data = bytes(int(b, 16) for b in re.findall(r"0x([0-9a-f]{2})", body))
    length = int(re.search(r"_len = (\d+);", text).group(1))
    assert len(data) == length, (len(data), length)
    tmp = tempfile.NamedTemporaryFile(suffix=".tflite", delete=False)
    tmp.write(data)
    tmp.close()
    return litert(tmp.name, meta, x)


def onnx(path, meta, x):
    import onnxruntime as ort

    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return session.run(None, {meta["input"]["name"]: x})[0], {}


def saved_model(path, meta, x):
    import tensorflow as tf

    serve = tf.saved_model.load(path).signatures["serving_default"]
    out = serve(**{meta["input"]["name"]: tf.constant(x)})
    return out[meta["output"]["name"]].numpy(), {}


RUNTIMES = {"litert": litert, "c-array": c_array, "onnx": onnx, "saved_model": saved_model}
results = {}
for path, sidecar in artifacts:
    meta = json.load(open(sidecar))
    scores, details = RUNTIMES[meta["format"]](path, meta, windows(meta))
    results[path] = {"scores": scores.tolist(), **details}
print(json.dumps(results))
"""


def on_device(store: Path, artifacts: list[tuple[Path, Path]]) -> dict[str, Any]:
    """Each exported file (with its sidecar) run in its runtime on ``starts()``'s windows, in one
    isolated interpreter (``-I``: no PYTHONPATH, so no checkout of chunkfit either)."""
    result = subprocess.run(
        [
            sys.executable,
            "-I",
            "-c",
            DEVICE,
            str(store),
            json.dumps(starts().tolist()),
            json.dumps([[str(a), str(s)] for a, s in artifacts]),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def keras_scores(run: Path, store: Path) -> np.ndarray:
    """The run's model.keras scoring ``starts()``'s windows through Keras (in this process)."""
    from support import raw_zarr_array

    from chunkfit.score.runs import load_run

    sys.path.insert(0, str(run.parent))  # a module:function model's module, as train found it
    try:
        model, spec = load_run(run)
    finally:
        sys.path.remove(str(run.parent))
    signal = raw_zarr_array(store, "signal")
    x = np.stack([signal[s : s + spec.windows.window] for s in starts()]).astype(np.float32)
    return np.asarray(model.predict(x, verbose=0))


def sidecar_of(artifact: Path) -> Path:
    return artifact / "chunkfit.json" if artifact.is_dir() else Path(f"{artifact}.json")
