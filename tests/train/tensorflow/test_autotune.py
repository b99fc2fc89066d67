"""--jit: the train step under XLA or not, chosen by timing both on this machine
(chunkfit.train.tensorflow.autotune)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from support import run_trial

import chunkfit
from chunkfit.errors import UsageError
from chunkfit.synth import SynthSpec, balanced_anomalies, synth
from chunkfit.train.tensorflow.autotune import MIN_ELEMENTS, TRIALS, XLA_MARGIN, JitChoice

WINDOW = 16


@pytest.fixture(scope="module")
def tiny_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("stores") / "tiny.zarr"
    synth(path, SynthSpec(samples=4_000, anomalies=balanced_anomalies(4_000, WINDOW), seed=1))
    return path


def test_the_trial_alternates_modes_skips_xlas_compiling_element_and_keeps_the_faster() -> None:
    choice = JitChoice("auto", False, MIN_ELEMENTS, 256)
    modes = run_trial(
        choice, {False: 2.0, True: 1.0}, 4
    )  # per element of 4 batches: XLA twice as fast
    assert modes == list(TRIALS)
    assert choice.jit is True and choice.next_mode() is True
    # the compiling element (30 s) is not counted: 4 batches of 128 in 1 s
    assert choice.to_dict(128) == {
        "jit": True,
        "by": "autotune",
        "windows_per_s": {"graph": 256.0, "xla": 512.0},
    }


def test_a_slower_xla_is_not_chosen_and_one_slow_moment_does_not_decide() -> None:
    choice = JitChoice("auto", False, MIN_ELEMENTS, 256)
    graph_times = iter([1.0, 5.0, 1.1])  # one element slowed by something else on the machine
    while not choice.decided:
        mode = choice.next_mode()
        choice.timed(mode, 1.5 if mode else next(graph_times), 1)
    assert choice.jit is False


@pytest.mark.parametrize(
    ("xla_speedup", "jit"), [(1.05, False), (XLA_MARGIN * 0.99, False), (XLA_MARGIN * 1.01, True)]
)
def test_xla_must_win_the_trial_by_the_margin(xla_speedup: float, jit: bool) -> None:
    """The trial flattered XLA against whole epochs: a close call keeps the step without it."""
    choice = JitChoice("auto", False, MIN_ELEMENTS, 256)
    run_trial(choice, {False: 1.0, True: 1.0 / xla_speedup}, 4)
    assert choice.jit is jit


@pytest.mark.parametrize(
    ("mode", "deterministic", "elements", "jit", "by"),
    [
        ("on", False, 1, True, "--jit on"),
        ("off", False, 10**6, False, "--jit off"),
        ("auto", True, 10**6, False, "--deterministic (TensorFlow op determinism)"),
        (
            "auto",
            False,
            MIN_ELEMENTS - 1,
            False,
            f"autotune: a run of {MIN_ELEMENTS - 1} training calls of up to 256 batches is too "
            "short to try XLA",
        ),
    ],
)
def test_fixed_choices_need_no_trial(
    mode: str, deterministic: bool, elements: int, jit: bool, by: str
) -> None:
    choice = JitChoice(mode, deterministic, elements, 256)
    assert choice.decided and choice.jit is jit and choice.to_dict(128) == {"jit": jit, "by": by}


def test_an_unknown_jit_mode_is_refused() -> None:
    with pytest.raises(UsageError, match=r"--jit must be auto, on or off \(received 'maybe'\)"):
        chunkfit.FitOptions(jit="maybe")


def test_xla_with_deterministic_is_refused_in_one_line() -> None:
    """TensorFlow raises deep inside the first step otherwise (no deterministic XLA MaxPool
    gradient)."""
    with pytest.raises(
        UsageError,
        match=r"--jit on cannot be combined with --deterministic: XLA has no deterministic",
    ):
        chunkfit.FitOptions(jit="on", deterministic=True)


@pytest.mark.slow
def test_a_process_where_op_determinism_is_on_trains_without_xla_and_refuses_jit_on(
    tiny_store: Path, tmp_path: Path
) -> None:
    from tensorflow.python.framework import config

    was = config.is_op_determinism_enabled()
    config.enable_op_determinism()  # as an earlier deterministic run leaves the process
    try:
        run = _run(tiny_store, tmp_path / "run")
        assert run["compile"] == {
            "jit": False,
            "by": "--deterministic (TensorFlow op determinism)",
            "gather": "input pipeline",
        }
        with pytest.raises(
            UsageError,
            match=r"jit='on' cannot be used in this process: TensorFlow op determinism is on",
        ):
            _run(tiny_store, tmp_path / "on", jit="on")
    finally:
        if not was:
            config.disable_op_determinism()


def _run(store: Path, out: Path, **kw: object) -> dict:  # type: ignore[type-arg]
    chunkfit.fit(
        "baseline-cnn",
        store,
        window=WINDOW,
        chunk=512,
        mix=1,
        batch_size=32,
        epochs=2,
        validation=0.2,
        steps_per_execution=2,
        out=out,
        **kw,
    )
    return json.loads((out / "run.json").read_text())


@pytest.mark.slow
@pytest.mark.usefixtures("no_op_determinism")
def test_a_long_enough_run_times_both_modes_records_them_and_trains_every_window_once(
    tiny_store: Path, tmp_path: Path
) -> None:
    run = _run(tiny_store, tmp_path / "run")
    compile_ = run["compile"]
    assert compile_["by"] == "autotune" and set(compile_["windows_per_s"]) == {"graph", "xla"}
    rates = compile_["windows_per_s"]
    assert compile_["jit"] is (rates["xla"] > rates["graph"])
    for epoch in run["epochs"]:
        assert sorted(epoch["blocks"]) == list(range(run["blocks"]["train"]))


@pytest.mark.slow
@pytest.mark.usefixtures("no_op_determinism")
def test_xla_trains_to_the_same_figures_as_without_it(tiny_store: Path, tmp_path: Path) -> None:
    on = _run(tiny_store, tmp_path / "on", jit="on", seed=3)
    off = _run(tiny_store, tmp_path / "off", jit="off", seed=3)
    assert (on["compile"], off["compile"]) == (
        {"jit": True, "by": "--jit on", "gather": "input pipeline"},
        {"jit": False, "by": "--jit off", "gather": "input pipeline"},
    )
    for name in ("loss", "val_loss", "val_pr_auc"):
        np.testing.assert_allclose(
            [e[name] for e in on["epochs"]],
            [e[name] for e in off["epochs"]],
            rtol=1e-3,
            err_msg=name,
        )
