"""Compute threads measured per machine and model before TensorFlow starts (chunkfit.train.tensorflow.threadtune)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support import cli_env, run_cli

from chunkfit.synth import SynthSpec, synth
from chunkfit.train.tensorflow.threadtune import CACHE_FILE, RULE, choose_threads, probe_key

pytestmark = pytest.mark.slow

SHAPES = {"window": 104, "channels": 1, "classes": 2, "batch_size": 128}

# choose_threads in a fresh process, where TensorFlow has not started: a long run, then a short one
CHOOSE = """
import json, sys
from chunkfit.train.tensorflow.threadtune import choose_threads
shapes = json.loads(sys.argv[1])
for windows, probe in ((0, 0), (1000, 10**9)):
    c = choose_threads(None, "baseline-cnn", deterministic=False, run_windows=windows, probe_windows=probe, **shapes)
    print(json.dumps({"compute": c.compute, "by": c.by, "windows_per_s": c.windows_per_s}))
"""


def choose_in_a_fresh_process() -> list[dict]:
    done = subprocess.run([sys.executable, "-c", CHOOSE, json.dumps(SHAPES)], capture_output=True, text=True,
                          env=cli_env(), timeout=400, check=False)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_a_long_run_measures_each_candidate_caches_the_fastest_and_the_next_run_reuses_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHUNKFIT_CACHE_DIR", str(tmp_path))
    measured, short = choose_in_a_fresh_process()
    speeds = measured["windows_per_s"]
    assert measured["by"] == "autotune (measured now)"
    assert sorted(speeds) == ["0", "1"] and all(v > 0 for v in speeds.values())
    assert measured["compute"] == int(max(speeds, key=speeds.get))  # the faster of one thread and every core
    cache = json.loads((tmp_path / CACHE_FILE).read_text())
    key = probe_key("baseline-cnn", **SHAPES)
    assert cache[key]["compute"] == measured["compute"] and cache[key]["windows_per_s"] == speeds
    # a run too short to measure takes the cached measurement
    assert short["compute"] == measured["compute"] and short["windows_per_s"] == speeds
    assert short["by"].startswith(f"cache ({tmp_path / CACHE_FILE}, measured ")
    again, _ = choose_in_a_fresh_process()
    assert again == short  # measured once


def test_a_short_run_without_a_cache_takes_the_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHUNKFIT_CACHE_DIR", str(tmp_path))
    code = ("from chunkfit.train.tensorflow.threadtune import choose_threads; "
            "print(choose_threads(None, 'baseline-cnn', deterministic=False, window=104, channels=1, classes=2, "
            "batch_size=128, run_windows=5000).by)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), check=False)
    assert done.stdout.strip() == f"{RULE} (a run of 5,000 windows is too short to measure threads)", done.stderr
    assert not (tmp_path / CACHE_FILE).exists()


@pytest.mark.parametrize(("given", "deterministic", "model", "by"), [
    (2, False, "baseline-cnn", "--compute-threads"),
    (None, True, "baseline-cnn", f"--deterministic (a fixed choice: {RULE})"),
    (None, False, "mymodels:build", f"{RULE} (only built-in models and .keras files are measured)"),
])
def test_given_threads_deterministic_runs_and_unmeasurable_models_measure_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: int | None, deterministic: bool, model: str,
        by: str) -> None:
    monkeypatch.setenv("CHUNKFIT_CACHE_DIR", str(tmp_path))
    choice = choose_threads(given, model, deterministic=deterministic, run_windows=10**9, **SHAPES)
    assert (choice.compute, choice.by) == (given, by)
    assert not (tmp_path / CACHE_FILE).exists()


def test_a_cached_choice_trains_the_run_is_said_and_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "s.zarr"
    synth(store, SynthSpec(samples=20_000, anomalies=200, seed=3))
    cache = tmp_path / "cache"
    cache.mkdir()
    # two threads: a choice the rule never makes (it gives baseline-cnn one, or every core)
    entry = {"compute": 2, "windows_per_s": {"1": 1000.0, "0": 900.0}, "when": "2026-01-02 03:04"}
    (cache / CACHE_FILE).write_text(json.dumps({probe_key("baseline-cnn", **SHAPES): entry}))
    monkeypatch.setenv("CHUNKFIT_CACHE_DIR", str(cache))
    result = run_cli("train", store, "--epochs", "1", "--chunk", "5000", "--out", tmp_path / "run", timeout=300)
    assert result.returncode == 0, result.stderr
    line = next(x for x in result.stdout.splitlines() if x.startswith("TensorFlow on "))
    assert re.fullmatch(rf"TensorFlow on 2 compute threads, chosen by cache \({re.escape(str(cache / CACHE_FILE))}, "
                        r"measured 2026-01-02 03:04\) \(1 thread 1,000, every core 900 windows/s\); "
                        r"--compute-threads N to choose", line), line
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["threads"] == {"intra_op": 2, "inter_op": 1, "by": f"cache ({cache / CACHE_FILE}, measured 2026-01-02 03:04)",
                              "windows_per_s": {"1": 1000.0, "0": 900.0}}
