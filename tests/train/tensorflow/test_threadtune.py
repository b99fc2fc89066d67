"""Compute threads and compile mode measured per machine and model before TensorFlow's runtime
starts (chunkfit.train.tensorflow.threadtune)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support import cli_env, run_cli

from chunkfit.synth import SynthSpec, synth
from chunkfit.train.tensorflow.threadtune import (
    CACHE_FILE,
    RULE,
    SHORT_RULE,
    ProbeSpec,
    _fastest,
    candidates,
    choose_threads,
    probe_key,
    short_rule,
)

pytestmark = pytest.mark.slow

SHAPES = {"window": 104, "channels": 1, "classes": 2, "batch_size": 128}
CORES = len(os.sched_getaffinity(0))

# In a fresh process: a long run is measured (children forked once TensorFlow is imported here,
# before its runtime starts), then a short run finds the measurement cached; this process's runtime
# is still configurable after the measurement.
CHOOSE = """
import json, sys
from chunkfit._quiet import import_tensorflow_quietly
from chunkfit.train.tensorflow.threadtune import ProbeSpec, choose_threads, measure
shapes = json.loads(sys.argv[1])
spec = choose_threads(None, "baseline-cnn", deterministic=False, run_windows=10**9, jit=sys.argv[2],
                      group_samples=100_000, **shapes)
out = []
def setup(tf):
    if isinstance(spec, ProbeSpec):
        out.append(measure(spec))
    # raises once this process's runtime started
    tf.config.threading.set_intra_op_parallelism_threads(1)
import_tensorflow_quietly(setup)
import tensorflow as tf
assert tf.config.threading.get_intra_op_parallelism_threads() == 1
assert float(tf.constant(1.0) + 1.0) == 2.0
out.append(choose_threads(None, "baseline-cnn", deterministic=False, run_windows=1000,
                          jit=sys.argv[2], **shapes))
for c in out:
    print(json.dumps({"compute": c.compute, "by": c.by, "windows_per_s": c.windows_per_s,
                      "jit": c.jit, "seconds": c.seconds, "halves": c.halves}))
"""


def choose_in_a_fresh_process(jit: str = "auto") -> list[dict]:
    done = subprocess.run(
        [sys.executable, "-c", CHOOSE, json.dumps(SHAPES), jit],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=400,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_a_long_run_measures_each_candidate_and_mode_caches_the_fastest_and_the_next_run_reuses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHUNKFIT_CACHE_DIR", str(tmp_path))
    measured, short = choose_in_a_fresh_process()
    speeds = measured["windows_per_s"]
    assert measured["by"] == "autotune (measured now)" and measured["seconds"] > 0
    # --jit auto: the step without XLA (the run's own trial chooses XLA, on the threads chosen
    # here); on 2 cores or more, each batch in halves side by side, one thread each on 2 cores
    halves = [f"{max(1, CORES // 2)}x2/graph"] if CORES > 1 else []
    assert sorted(speeds) == sorted(["0/graph", "1/graph", *halves]) and all(
        v > 0 for v in speeds.values()
    )
    best = max(speeds, key=lambda k: speeds[k])
    expected = (
        best if speeds[best] >= 1.05 * speeds["0/graph"] else "0/graph"
    )  # another choice must win clearly
    compute, _, split = expected.partition("/")[0].partition("x")
    assert (measured["compute"], measured["halves"], measured["jit"]) == (
        int(compute),
        int(split or 1),
        None,
    )
    cache = json.loads((tmp_path / CACHE_FILE).read_text())
    entry = cache[probe_key("baseline-cnn", **SHAPES)]
    assert (entry["compute"], entry["halves"], entry["jit"], entry["windows_per_s"]) == (
        measured["compute"],
        measured["halves"],
        measured["jit"],
        speeds,
    )
    # a run too short to measure takes the cached measurement
    assert (short["compute"], short["halves"], short["jit"], short["windows_per_s"]) == (
        measured["compute"],
        measured["halves"],
        measured["jit"],
        speeds,
    )
    assert short["by"].startswith(f"cache ({tmp_path / CACHE_FILE}, measured ")
    again = choose_in_a_fresh_process()
    assert again == [short]  # measured once


def test_thread_measurements_are_kept_apart_by_compile_mode_and_precision() -> None:
    keys = {
        probe_key("baseline-cnn", **SHAPES, jit=jit, precision=precision)
        for jit in ("auto", "on", "off")
        for precision in ("float32", "bfloat16")
    }
    assert len(keys) == 6


def test_a_thread_measurement_is_keyed_by_the_cores_this_process_may_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert "|1|" in str(probe_key("baseline-cnn", **SHAPES))


@pytest.mark.parametrize(
    ("speeds", "chosen"),
    [
        (
            {"0/xla": 100.0, "1/xla": 104.0, "0/graph": 60.0, "1/graph": 61.0},
            "0/xla",
        ),  # a close call: the rule
        (
            {"0/xla": 100.0, "1/xla": 106.0, "0/graph": 60.0, "1/graph": 61.0},
            "1/xla",
        ),  # a clear win
        ({"0/xla": 50.0, "1/xla": 40.0, "0/graph": 60.0, "1/graph": 70.0}, "1/graph"),
        ({"0/graph": 60.0, "1/graph": 55.0}, "0/graph"),
        (
            {"0/graph": 60.0, "1/graph": 55.0, "1x2/graph": 62.0},
            "0/graph",
        ),  # halves too must win clearly
        ({"0/graph": 60.0, "1/graph": 64.0, "1x2/graph": 70.0}, "1x2/graph"),
    ],
)
def test_another_thread_count_than_every_core_must_win_clearly(
    speeds: dict[str, float], chosen: str
) -> None:
    assert _fastest(speeds) == chosen


def test_jit_on_measures_threads_under_xla(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHUNKFIT_CACHE_DIR", str(tmp_path))
    measured, _ = choose_in_a_fresh_process("on")
    halves = [f"{max(1, CORES // 2)}x2/xla"] if CORES > 1 else []
    assert (
        sorted(measured["windows_per_s"]) == sorted(["0/xla", "1/xla", *halves])
        and measured["jit"] is None
    )


def test_a_short_run_without_a_cache_takes_the_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHUNKFIT_CACHE_DIR", str(tmp_path))
    code = (
        "from chunkfit.train.tensorflow.threadtune import choose_threads; "
        "print(choose_threads(None, 'baseline-cnn', deterministic=False, window=104, "
        "channels=1, classes=2, batch_size=128, run_windows=5000).by)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), check=False
    )
    # a built-in model: each batch in halves side by side, on 2 cores or more
    rule = SHORT_RULE if CORES > 1 else RULE
    assert (
        done.stdout.strip() == f"{rule} (a run of 5,000 windows is too short to measure threads)"
    ), done.stderr
    assert not (tmp_path / CACHE_FILE).exists()


def test_a_short_run_of_a_keras_file_takes_every_core(tmp_path: Path) -> None:
    choice = short_rule(str(tmp_path / "mine.keras"), "short")
    assert (choice.compute, choice.halves, choice.by) == (None, 1, f"{RULE} (short)")


def test_a_long_run_asks_for_a_measurement_of_the_modes_it_may_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHUNKFIT_CACHE_DIR", str(tmp_path))
    monkeypatch.delitem(
        sys.modules, "tensorflow", raising=False
    )  # as in a process that has not imported it
    specs = [
        choose_threads(
            None, "baseline-cnn", deterministic=False, run_windows=10**9, jit=jit, **SHAPES
        )
        for jit in ("auto", "on", "off")
    ]
    # auto: without XLA (XLA is the run's trial); the fused Adam kernel wherever the run uses it
    assert [(s.modes, s.fuse) for s in specs if isinstance(s, ProbeSpec)] == [
        ((False,), True),
        ((True,), True),
        ((False,), False),
    ]


def test_a_run_of_a_few_minutes_is_measured_one_of_seconds_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The measurement (about 2 s without XLA) stays about 5% of a run of 50,000 windows/s."""
    monkeypatch.setenv("CHUNKFIT_CACHE_DIR", str(tmp_path))
    monkeypatch.delitem(sys.modules, "tensorflow", raising=False)
    two_epochs_of_the_question = (
        2 * 1_049_241
    )  # the benchmark's first run: 42 s at 50,000 windows/s
    # under --jit on the children compile XLA too: about 4 s, a longer run's 5%
    chosen = [
        choose_threads(None, "baseline-cnn", deterministic=False, run_windows=n, jit=jit, **SHAPES)
        for n, jit in (
            (two_epochs_of_the_question, "auto"),
            (500_000, "auto"),
            (two_epochs_of_the_question, "on"),
            (4_000_000, "on"),
        )
    ]
    assert [isinstance(c, ProbeSpec) for c in chosen] == [True, False, False, True]


def test_a_measurement_whose_children_fail_takes_the_rule_and_caches_nothing(
    tmp_path: Path,
) -> None:
    broken = tmp_path / "broken.keras"
    broken.write_bytes(b"not a keras file")  # the children fail to build it
    code = (
        "import json, sys\n"
        "from chunkfit._quiet import import_tensorflow_quietly\n"
        "from chunkfit.train.tensorflow.threadtune import ProbeSpec, measure\n"
        f"spec = ProbeSpec({str(broken)!r}, 104, 1, 2, 128, (False,))\n"
        "import_tensorflow_quietly(lambda tf: print(measure(spec).by))\n"
    )
    env = {**cli_env(), "CHUNKFIT_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.stdout.strip() == f"{RULE} (the measurement failed)", done.stderr
    assert not (tmp_path / "cache" / CACHE_FILE).exists()


# A measurement of a slow model, its parent killed -9 while the children work.
KILLED = """
import sys
from chunkfit._quiet import import_tensorflow_quietly
from chunkfit.train.tensorflow.threadtune import ProbeSpec, measure
spec = ProbeSpec("dilated-resnet", 104, 1, 2, 128, (True,), samples=400_000)
def setup(tf):
    print("measuring", flush=True)
    measure(spec)
import_tensorflow_quietly(setup)
"""


# Runs KILLED as its child, as the subreaper of that child's children: once every measuring child
# is forked, kills KILLED and reaps the orphans, printing how each one ended.
REAPER = """
import ctypes, json, os, signal, subprocess, sys, time
ctypes.CDLL(None, use_errno=True).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER
proc = subprocess.Popen([sys.executable, "-c", sys.argv[1]], stdout=subprocess.PIPE, text=True)
assert proc.stdout.readline() == "measuring\\n"
children = []
while len(children) < int(sys.argv[2]):  # until every child is forked
    task = f"/proc/{proc.pid}/task/{proc.pid}/children"
    children = [int(pid) for pid in open(task).read().split()]
    time.sleep(0.05)
proc.kill()
proc.wait()
ended = []
for pid in children:
    _, status = os.waitpid(pid, 0)
    killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    ended.append("killed" if killed else f"ended by itself ({status})")
print(json.dumps(ended))
"""


def test_the_measuring_children_die_with_their_parent(tmp_path: Path) -> None:
    """Killed with it while they compile, not when they would find their parent gone (they end
    by themselves then, once compiled)."""
    env = {**cli_env(), "CHUNKFIT_CACHE_DIR": str(tmp_path)}
    want = len(candidates())
    done = subprocess.run(
        [sys.executable, "-c", REAPER, KILLED, str(want)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ["killed"] * want


@pytest.mark.parametrize(
    ("given", "deterministic", "model", "by"),
    [
        (2, False, "baseline-cnn", "--compute-threads"),
        (None, True, "baseline-cnn", f"--deterministic (a fixed choice: {RULE})"),
        (
            None,
            False,
            "mymodels:build",
            f"{RULE} (only built-in models and .keras files are measured)",
        ),
    ],
)
def test_given_threads_deterministic_runs_and_unmeasurable_models_measure_nothing(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    given: int | None,
    deterministic: bool,
    model: str,
    by: str,
) -> None:
    monkeypatch.setenv("CHUNKFIT_CACHE_DIR", str(tmp_path))
    choice = choose_threads(given, model, deterministic=deterministic, run_windows=10**9, **SHAPES)
    assert (choice.compute, choice.by) == (given, by)
    assert not (tmp_path / CACHE_FILE).exists()


def test_a_cached_choice_trains_the_run_is_said_in_one_line_and_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "s.zarr"
    synth(store, SynthSpec(samples=20_000, anomalies=200, seed=3))
    cache = tmp_path / "cache"
    cache.mkdir()
    # two threads and no XLA: a choice neither the rule nor the in-run trial of a run this short
    # makes
    rates = {"1/graph": 1000.0, "0/graph": 900.0, "1/xla": 800.0, "0/xla": 700.0}
    entry = {
        "compute": 2,
        "jit": False,
        "windows_per_s": rates,
        "seconds": 7.5,
        "when": "2026-01-02 03:04",
    }
    (cache / CACHE_FILE).write_text(json.dumps({probe_key("baseline-cnn", **SHAPES): entry}))
    monkeypatch.setenv("CHUNKFIT_CACHE_DIR", str(cache))
    result = run_cli(
        "train",
        store,
        "--epochs",
        "1",
        "--chunk",
        "5000",
        "--out",
        tmp_path / "run",
        "--verbose",
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    line = result.stdout.splitlines()[0]
    by = f"cache ({cache / CACHE_FILE}, measured 2026-01-02 03:04)"
    assert line == (
        "train step without XLA, chosen by autotune at start; TensorFlow on 2 compute threads, "
        f"chosen by {by} (1 thread without XLA 1,000, every core without XLA 900, 1 thread XLA "
        "800, every core XLA 700 windows/s; 7.5 s); --jit on|off, --compute-threads N to choose"
    ), line
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["threads"] == {
        "intra_op": 2,
        "inter_op": 1,
        "by": by,
        "windows_per_s": rates,
        "seconds": 7.5,
    }
    assert run["compile"] == {"jit": False, "by": "autotune at start", "gather": "input pipeline"}


def test_given_jit_and_threads_override_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "s.zarr"
    synth(store, SynthSpec(samples=20_000, anomalies=200, seed=3))
    cache = tmp_path / "cache"
    cache.mkdir()
    entry = {
        "compute": 1,
        "halves": 2,
        "jit": False,
        "windows_per_s": {"1x2/graph": 1000.0},
        "seconds": 7.5,
        "when": "2026-01-02",
    }
    (cache / CACHE_FILE).write_text(json.dumps({probe_key("baseline-cnn", **SHAPES): entry}))
    monkeypatch.setenv("CHUNKFIT_CACHE_DIR", str(cache))
    result = run_cli(
        "train",
        store,
        "--epochs",
        "1",
        "--chunk",
        "5000",
        "--out",
        tmp_path / "run",
        "--jit",
        "on",
        "--compute-threads",
        "1",
        "--verbose",
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == (
        "train step under XLA, chosen by --jit on; TensorFlow on 1 compute thread, chosen by "
        "--compute-threads; --jit on|off, --compute-threads N to choose"
    ), result.stdout
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert (run["threads"]["intra_op"], run["threads"]["inter_op"], run["threads"]["by"]) == (
        1,
        1,
        "--compute-threads",
    )
    assert "halves" not in run["threads"]  # the cached halves are the cache's choice, overridden
    assert run["compile"] == {"jit": True, "by": "--jit on", "gather": "input pipeline"}
    assert run["epochs"][0]["train_windows"] > 0 and np.isfinite(run["epochs"][0]["loss"])


def test_one_compute_thread_trains_as_every_core_does_windows_gathered_in_the_input_pipeline(
    tmp_path: Path,
) -> None:
    # Two channels, three per-sample classes, balanced class weights, per-window standardisation,
    # the windows copied by numpy in tf.data (on a CPU, whatever the threads): one compute thread
    # against every core.
    from chunkfit import StoreWriter

    store = tmp_path / "labelled.h5"
    rng = np.random.default_rng(2)
    classes = np.repeat(rng.choice([-1, 0, 5], size=100), 40).astype(np.int32)
    with StoreWriter(
        store, channels=["a", "b"], sample_rate=50.0, has_labels=True, append=False
    ) as w:
        w.write(
            (classes[:, None] + rng.normal(0, 0.3, (4000, 2))).astype(np.float32), labels=classes
        )
        w.add_segment(0, 2500)
        w.add_segment(2500, 4000)
        w.commit()
    runs = {}
    for threads in ("1", "0"):
        out = tmp_path / f"run{threads}"
        result = run_cli(
            "train",
            store,
            "--window",
            "16",
            "--chunk",
            "512",
            "--batch-size",
            "64",
            "--epochs",
            "2",
            "--label",
            "majority",
            "--class-weight",
            "balanced",
            "--normalize",
            "window",
            "--compute-threads",
            threads,
            "--out",
            out,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr
        runs[threads] = json.loads((out / "run.json").read_text())
    assert [runs[t]["compile"]["gather"] for t in ("1", "0")] == ["input pipeline"] * 2
    for name in ("loss", "val_loss", "val_accuracy"):
        np.testing.assert_allclose(
            [e[name] for e in runs["1"]["epochs"]],
            [e[name] for e in runs["0"]["epochs"]],
            rtol=1e-4,
            err_msg=name,
        )


def test_a_cached_choice_of_halves_trains_each_batch_in_halves_on_two_inter_op_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "s.zarr"
    synth(store, SynthSpec(samples=20_000, anomalies=200, seed=3))
    cache = tmp_path / "cache"
    cache.mkdir()
    rates = {"0/graph": 900.0, "1/graph": 950.0, "1x2/graph": 1000.0}
    entry = {
        "compute": 1,
        "halves": 2,
        "jit": False,
        "windows_per_s": rates,
        "seconds": 2.0,
        "when": "2026-01-02 03:04",
    }
    (cache / CACHE_FILE).write_text(json.dumps({probe_key("baseline-cnn", **SHAPES): entry}))
    monkeypatch.setenv("CHUNKFIT_CACHE_DIR", str(cache))
    result = run_cli(
        "train",
        store,
        "--epochs",
        "1",
        "--chunk",
        "5000",
        "--out",
        tmp_path / "run",
        "--verbose",
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    by = f"cache ({cache / CACHE_FILE}, measured 2026-01-02 03:04)"
    assert result.stdout.splitlines()[0] == (
        "train step without XLA, chosen by autotune at start; TensorFlow on 1 compute thread for "
        f"each of 2 halves of every batch, side by side, chosen by {by} (every core without XLA "
        "900, 1 thread without XLA 950, 1 thread x 2 halves without XLA 1,000 windows/s; 2.0 s); "
        "--jit on|off, --compute-threads N to choose"
    )
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["threads"] == {
        "intra_op": 1,
        "inter_op": 2,
        "halves": 2,
        "by": by,
        "windows_per_s": rates,
        "seconds": 2.0,
    }
    # the two halves take a thread each: on 2 cores none is left to gather windows in tf.data
    assert run["compile"]["gather"] == "input pipeline"
    assert run["epochs"][0]["train_windows"] > 0 and np.isfinite(run["epochs"][0]["loss"])
