"""The engine and precision a run trains with, chosen before Keras loads (chunkfit.train.choice):
the rule for short runs, the overrides, an install without jax, the measurement and its cache, and
what run.json records.

Each run is ``chunkfit train`` in a subprocess with a cache folder of its own and without
``KERAS_BACKEND`` unless the test sets it. ``CHUNKFIT_ENGINE_PROBE_WINDOWS=0`` makes a tiny run long
enough to measure, so that where nothing is measured, it is because something else decided.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support import cli_env, error_line, make_store

from chunkfit.train.choice import CACHE_FILE, PROBE_WINDOWS_ENV
from chunkfit.train.precision import bf16_flags

ARGS = ["--window", "16", "--epochs", "1", "--batch-size", "32", "--chunk", "2000"]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(0)
    signal = (np.sin(np.arange(3_000) * 0.1) + 0.1 * rng.normal(size=3_000)).astype(np.float32)
    folder = tmp_path_factory.mktemp("choice")
    return make_store(folder / "s.zarr", signal[:, None], events=list(range(20, 3_000, 97)))


def train(
    store: Path,
    out: Path,
    *args: str,
    cache: Path,
    measure: bool = False,
    backend: str | None = None,
    without: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """``chunkfit train STORE --out OUT ARGS`` with its own cache folder; ``measure``: a tiny run
    counts as long enough to measure; ``backend``: KERAS_BACKEND (else unset); ``without``: a
    module made unimportable in the process."""
    env = cli_env()
    env.pop("KERAS_BACKEND", None)
    env["CHUNKFIT_CACHE_DIR"] = str(cache)
    env["KERAS_HOME"] = str(cache / "keras-home")  # no keras.json of the user's
    if measure:
        env[PROBE_WINDOWS_ENV] = "0"
    if backend is not None:
        env["KERAS_BACKEND"] = backend
    argv = ["train", str(store), "--out", str(out), *ARGS, *args]
    block = f"import sys; sys.modules[{without!r}] = None; " if without else ""
    code = f"{block}from chunkfit.cli import main; main({argv!r})"
    return subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        cwd=out.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def choice_of(out: Path) -> dict[str, Any]:
    run = json.loads((out / "run.json").read_text())
    choice = run["choice"]
    assert (run["engine"], run["precision"]) == (choice["engine"], choice["precision"])
    return dict(run["choice"])


def lines_of(result: subprocess.CompletedProcess[str]) -> list[str]:
    """The run's lines on its engine and precision (one where it was measured or is bfloat16)."""
    assert result.returncode == 0, result.stderr[-3000:]
    return [x for x in (result.stdout + result.stderr).splitlines() if x.startswith("engine: ")]


def line_of(result: subprocess.CompletedProcess[str]) -> str:
    lines = lines_of(result)
    assert len(lines) == 1, result.stdout + result.stderr
    return lines[0]


def test_a_short_run_takes_tensorflow_by_the_rule_without_measuring(
    store: Path, tmp_path: Path
) -> None:
    result = train(store, tmp_path / "run", cache=tmp_path / "cache")
    assert lines_of(result) == []  # the compile line names the engine, as before
    assert choice_of(tmp_path / "run") == {
        "engine": "tensorflow",
        "precision": "float32",
        "engine_by": "the rule: a run of 2,669 windows is too short to measure",
        "precision_by": "the rule: a run of 2,669 windows is too short to measure",
    }
    assert not (tmp_path / "cache" / CACHE_FILE).exists()


def test_backend_flag_decides_the_engine_without_measuring(store: Path, tmp_path: Path) -> None:
    result = train(
        store,
        tmp_path / "run",
        "--backend",
        "jax",
        "--precision",
        "float32",
        cache=tmp_path / "cache",
        measure=True,
    )
    assert lines_of(result) == []
    assert choice_of(tmp_path / "run") == {
        "engine": "jax",
        "precision": "float32",
        "engine_by": "--backend or KERAS_BACKEND",
        "precision_by": "--precision",
    }
    assert not (tmp_path / "cache" / CACHE_FILE).exists()


@pytest.mark.parametrize(
    ("backend", "without", "why"),
    [("tensorflow", None, "--backend or KERAS_BACKEND"), (None, "jax", "jax is not installed")],
    ids=["keras-backend-given", "no-jax-installed"],
)
def test_the_engine_decided_without_measuring(
    store: Path, tmp_path: Path, backend: str | None, without: str | None, why: str
) -> None:
    """KERAS_BACKEND given, or an install without jax: TensorFlow, nothing measured or cached."""
    result = train(
        store,
        tmp_path / "run",
        "--precision",
        "float32",
        cache=tmp_path / "cache",
        measure=True,
        backend=backend,
        without=without,
    )
    assert lines_of(result) == []
    assert choice_of(tmp_path / "run")["engine"] == "tensorflow"
    assert choice_of(tmp_path / "run")["engine_by"] == why
    assert not (tmp_path / "cache" / CACHE_FILE).exists()


def test_a_measured_choice_is_cached_and_the_next_run_reuses_it(
    store: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    first = train(store, tmp_path / "a", "--precision", "float32", cache=cache, measure=True)
    measured = choice_of(tmp_path / "a")
    assert measured["cached"] is False
    assert set(measured["windows_per_s"]) == {"tensorflow/float32", "jax/float32"}
    assert measured["engine_by"].endswith("s") and "measured now in" in measured["engine_by"]
    assert measured["engine"] in line_of(first)
    written = (cache / CACHE_FILE).read_bytes()

    second = train(store, tmp_path / "b", "--precision", "float32", cache=cache, measure=True)
    reused = choice_of(tmp_path / "b")
    assert reused["cached"] is True
    assert reused["windows_per_s"] == measured["windows_per_s"]
    assert reused["engine"] == measured["engine"]
    assert line_of(second).startswith(f"engine: {measured['engine']} (")
    assert "; cached); precision: float32 (--precision)" in line_of(second)
    assert (cache / CACHE_FILE).read_bytes() == written


def test_a_resumed_run_keeps_the_engine_it_started_with(tmp_path: Path) -> None:
    code = (
        "from chunkfit.config import FitOptions\n"
        "from chunkfit.train.choice import choose\n"
        "c = choose('baseline-cnn', FitOptions(), channels=1, classes=2, run_windows=10**12,\n"
        "           resumed={'engine': 'jax', 'precision': 'bfloat16'})\n"
        "import sys\n"
        "print(c.line(), [m for m in ('keras', 'tensorflow', 'jax') if m in sys.modules])\n"
    )
    env = {**cli_env(), "CHUNKFIT_CACHE_DIR": str(tmp_path), "KERAS_HOME": str(tmp_path)}
    env.pop("KERAS_BACKEND", None)
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert result.stdout.strip() == (
        "engine: jax (the engine the resumed run started with); precision: bfloat16 (the "
        "precision the resumed run started with) []"  # chosen before Keras loads
    ), result.stderr
    assert not (tmp_path / CACHE_FILE).exists()


@pytest.mark.backends
def test_a_bfloat16_run_saves_a_float32_model_that_scores(store: Path, tmp_path: Path) -> None:
    env_backend = os.environ.get("KERAS_BACKEND")
    result = train(
        store,
        tmp_path / "run",
        "--precision",
        "bfloat16",
        cache=tmp_path / "cache",
        backend=env_backend,
    )
    assert "precision: bfloat16 (--precision)" in line_of(result)
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["precision"] == "bfloat16"
    check = (
        "import keras, numpy as np\n"
        f"m = keras.saving.load_model({str(tmp_path / 'run' / 'model.keras')!r})\n"
        "print(sorted({str(v.dtype) for v in m.weights}),\n"
        "      sorted({l.dtype_policy.name for l in m._flatten_layers()}),\n"
        "      str(m.predict(np.zeros((2, 16, 1), np.float32), verbose=0).dtype))\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", check], env=cli_env(), capture_output=True, text=True, check=False
    )
    assert loaded.stdout.strip().splitlines()[-1] == "['float32'] ['float32'] float32", (
        loaded.stderr[-2000:]
    )


def test_an_unknown_precision_is_refused_in_one_line(store: Path, tmp_path: Path) -> None:
    result = train(store, tmp_path / "run", "--precision", "half", cache=tmp_path / "cache")
    assert (result.returncode, error_line(result)) == (
        2,
        "chunkfit: error: --precision must be auto, float32 or bfloat16 (received 'half')",
    )


CHOOSE_FROM_CACHE = """
import json, sys
from chunkfit.config import FitOptions
from chunkfit.train import choice
rates, figures = json.loads(sys.argv[1])
spec = choice._spec("baseline-cnn", FitOptions(), 1, 2)
choice._write_cache(choice._cache_key(spec), {"windows_per_s": rates, "validation": figures})
c = choice.choose("baseline-cnn", FitOptions(), channels=1, classes=2, run_windows=10**12)
print(json.dumps([c.engine, c.precision, c.line()]))
"""


def choose_from_cache(
    tmp_path: Path, rates: dict[str, float], figures: dict[str, list[float]]
) -> list[str]:
    """chunkfit.train.choice.choose for a long baseline-cnn run, with this measurement cached."""
    env = {**cli_env(), "CHUNKFIT_CACHE_DIR": str(tmp_path), "KERAS_HOME": str(tmp_path)}
    env.pop("KERAS_BACKEND", None)
    result = subprocess.run(
        [sys.executable, "-c", CHOOSE_FROM_CACHE, json.dumps([rates, figures])],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return list(json.loads(result.stdout))


FAST_BF16 = {
    "tensorflow/float32": 100.0,
    "tensorflow/bfloat16": 150.0,
    "jax/float32": 120.0,
    "jax/bfloat16": 110.0,
}
CLOSE = {k: [0.5, 0.8] for k in FAST_BF16}


@pytest.mark.skipif(not bf16_flags(), reason="auto measures bfloat16 on bfloat16 CPUs only")
def test_auto_takes_bfloat16_where_it_was_faster_and_within_tolerance(tmp_path: Path) -> None:
    assert choose_from_cache(tmp_path, FAST_BF16, CLOSE) == [
        "tensorflow",
        "bfloat16",
        "engine: tensorflow (measured 1.25x jax for baseline-cnn on this CPU; cached); precision: "
        "bfloat16 (measured bfloat16 1.50x float32 on tensorflow, held-out figures within "
        "tolerance; cached)",
    ]


@pytest.mark.skipif(not bf16_flags(), reason="auto measures bfloat16 on bfloat16 CPUs only")
def test_auto_keeps_float32_where_bfloat16_learned_worse(tmp_path: Path) -> None:
    worse = {**CLOSE, "tensorflow/bfloat16": [0.6, 0.8]}
    assert choose_from_cache(tmp_path, FAST_BF16, worse) == [
        "jax",
        "float32",
        "engine: jax (measured 1.20x tensorflow for baseline-cnn on this CPU; cached); precision: "
        "float32 (measured bfloat16 0.92x float32 on jax; cached)",
    ]


def test_auto_is_float32_on_a_cpu_without_bfloat16_instructions(tmp_path: Path) -> None:
    if bf16_flags():
        pytest.skip("this CPU has bfloat16 instructions")
    assert choose_from_cache(tmp_path, FAST_BF16, CLOSE)[1] == "float32"


ANSWERS = (  # a child that answers every burst at once
    "import sys\nprint(0, flush=True)\n"
    "for _ in iter(sys.stdin.readline, ''):\n print(0.01, flush=True)"
)
DIES = "import sys\nprint(0, flush=True)\nsys.stdin.readline()"  # exits after one request

CHOOSE_WITH_A_CHILD_THAT_DIES = f"""
import json, sys
from chunkfit.config import FitOptions
from chunkfit.train import choice, choiceprobe
class Fake(choiceprobe.Child):
    def command(self, job):
        return [sys.executable, "-c", {DIES!r} if self.key.startswith("jax") else {ANSWERS!r}]
choiceprobe.Child = Fake
opts = FitOptions(precision="float32")
c = choice.choose("baseline-cnn", opts, channels=1, classes=2, run_windows=10**12)
print(json.dumps([c.engine, c.engine_by, choice.cache_path().exists()]))
"""


def test_a_child_that_dies_mid_burst_is_not_chosen_and_nothing_is_cached(tmp_path: Path) -> None:
    """A child that exits during its burst is a failed measurement, not the fastest candidate."""
    env = {**cli_env(), "CHUNKFIT_CACHE_DIR": str(tmp_path), "KERAS_HOME": str(tmp_path)}
    env.pop("KERAS_BACKEND", None)
    result = subprocess.run(
        [sys.executable, "-c", CHOOSE_WITH_A_CHILD_THAT_DIES],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == ["tensorflow", "the rule: the measurement failed", False]


def test_a_child_that_cannot_start_fails_the_measurement_and_the_started_ones_are_stopped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from chunkfit.train import choiceprobe

    started: list[choiceprobe.Child] = []

    class Fake(choiceprobe.Child):
        def command(self, job: str) -> list[str]:
            if self.key.startswith("jax"):
                return [str(Path(sys.executable).with_name("no-such-program"))]
            started.append(self)
            return [sys.executable, "-c", ANSWERS]

    monkeypatch.setattr(choiceprobe, "Child", Fake)
    spec = {"batch_size": 32}
    assert choiceprobe.measure(["tensorflow/float32", "jax/float32"], spec, False) is None
    assert [child.proc.returncode is not None for child in started] == [True]


def pre_choice_folder(path: Path) -> Any:
    """A run folder whose checkpoint was made before chunkfit chose engines (no "choice")."""
    from types import SimpleNamespace

    state = {"run": {"config": {}, "model": "baseline-cnn", "store": {}}}
    return SimpleNamespace(checkpoint=SimpleNamespace(state=state), file=lambda n: path / n)


def test_a_checkpoint_made_before_the_choice_resumes_in_float32_on_its_run_json_engine(
    tmp_path: Path,
) -> None:
    from chunkfit.train.fit import _resumed_choice

    (tmp_path / "run.json").write_text(json.dumps({"engine": "jax", "finished": False}))
    assert _resumed_choice(pre_choice_folder(tmp_path)) == {"engine": "jax", "precision": "float32"}


def test_a_checkpoint_made_before_the_choice_without_run_json_resumes_on_tensorflow(
    tmp_path: Path,
) -> None:
    from chunkfit.train.fit import _resumed_choice

    assert _resumed_choice(pre_choice_folder(tmp_path)) == {
        "engine": "tensorflow",
        "precision": "float32",
    }


FAIL_IN_BFLOAT16 = """
import sys, keras, chunkfit
class Stop(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        raise RuntimeError("stopped")
try:
    chunkfit.fit(store=sys.argv[1], window=16, epochs=1, batch_size=32, precision="bfloat16",
                 callbacks=[Stop()])
except RuntimeError:
    print(keras.config.dtype_policy().name)
"""


def test_a_bfloat16_run_that_fails_leaves_the_process_in_float32(store: Path) -> None:
    """The Python API: after a failed (or interrupted) bfloat16 run, what is built is float32."""
    result = subprocess.run(
        [sys.executable, "-c", FAIL_IN_BFLOAT16, str(store)],
        env=cli_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.stdout.strip().splitlines()[-1:] == ["float32"], result.stderr[-2000:]


def test_an_engine_measurement_is_keyed_by_the_cores_this_process_may_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from chunkfit.config import FitOptions
    from chunkfit.train import choice

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert "|1|" in choice._cache_key(choice._spec("baseline-cnn", FitOptions(), 1, 2))
