"""--jax-loop: the JAX engine's batches one compiled call each or looped in one
(chunkfit.train.jax.loopchoice).

The pure parts run here; training under each loop runs on JAX (tests/train/jax/test_jax_engine.py,
tests/train/test_trainer.py's logs-equal test), and the CLI's refusals in real subprocesses below.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support import run_cli, run_trial

import chunkfit
from chunkfit.errors import UsageError
from chunkfit.synth import SynthSpec, synth
from chunkfit.train.jax.loopchoice import LoopChoice
from chunkfit.train.jax.steps import MIN_SCAN, scan_sizes
from chunkfit.train.trial import MIN_ELEMENTS, TRIALS


def test_the_trial_alternates_dispatch_and_scan_skips_the_scans_compile_and_keeps_the_faster() -> (
    None
):
    choice = LoopChoice("auto", False, MIN_ELEMENTS, 256, run_batches=10**6)
    modes = run_trial(choice, {False: 4.0, True: 1.0}, 8)  # the scan four times as fast (a GPU)
    assert modes == list(TRIALS)
    assert choice.mode == "scan" and choice.next_mode() is True
    assert choice.to_dict(128) == {
        "jit": True,
        "loop": "scan",
        "by": "autotune",
        "windows_per_s": {"dispatch": 256.0, "scan": 1024.0},
    }
    assert (
        "looped inside one compiled call (--jax-loop scan), chosen by autotune (dispatch 256, "
        "scan 1,024" in choice.describe(128)
    )


def test_a_slower_scan_is_not_chosen() -> None:
    choice = LoopChoice("auto", False, MIN_ELEMENTS, 256, run_batches=10**6)
    while not choice.decided:
        mode = choice.next_mode()
        choice.timed(mode, 1.8 if mode else 1.0, 1)  # the loop slower (a 2-core CPU)
    assert choice.mode == "dispatch"


@pytest.mark.parametrize(
    ("mode", "deterministic", "elements", "loop", "by"),
    [
        ("scan", False, 1, "scan", "--jax-loop scan"),
        ("dispatch", False, 10**6, "dispatch", "--jax-loop dispatch"),
        (
            "auto",
            True,
            10**6,
            "dispatch",
            "--deterministic (a fixed choice keeps a resumed run bit-identical)",
        ),
        (
            "auto",
            False,
            MIN_ELEMENTS - 1,
            "dispatch",
            (
                f"autotune: a run of {MIN_ELEMENTS - 1} training calls of up to "
                "256 batches is too short to try both loops; the default on a CPU"
            ),
        ),
    ],
)
def test_fixed_loop_choices_need_no_trial(
    mode: str, deterministic: bool, elements: int, loop: str, by: str
) -> None:
    choice = LoopChoice(mode, deterministic, elements, 256, run_batches=10**9)
    assert choice.decided and choice.to_dict(128) == {"jit": True, "loop": loop, "by": by}


def test_a_short_run_on_an_accelerator_scans_without_a_trial() -> None:
    choice = LoopChoice("auto", False, MIN_ELEMENTS - 1, 256, accelerator=True)
    assert choice.to_dict(128)["loop"] == "scan"
    assert choice.to_dict(128)["by"].endswith(
        "too short to try both loops; the default on an accelerator"
    )


@pytest.mark.parametrize(
    ("run_batches", "accelerator", "decided"),
    [
        (
            1_000,
            False,
            "dispatch",
        ),  # about 10 s at 10 ms a batch: the trial's 2 s are over 5% of it
        (1_000, True, "scan"),
        (100_000, False, None),  # about 1,000 s: the trial goes on
    ],
)
def test_the_trial_stops_after_its_first_timing_where_it_would_cost_over_5_percent_of_the_run(
    run_batches: int, accelerator: bool, decided: str | None
) -> None:
    choice = LoopChoice(
        "auto", False, MIN_ELEMENTS * 10, 256, accelerator=accelerator, run_batches=run_batches
    )
    assert not choice.decided
    choice.timed(choice.next_mode(), 0.32, 32)  # the first trial element: 10 ms a batch
    assert choice.mode == decided
    if decided is not None:
        assert (
            choice.by
            == f"autotune: a run of about {run_batches // 100} s is too short to try both loops; "
            f"the default on {'an accelerator' if accelerator else 'a CPU'}"
        )


@pytest.mark.parametrize(
    ("batches", "steps", "sizes", "left"),
    [
        (256, 256, [256], 0),  # a full element: one call of its own length
        (3, 3, [3], 0),
        (
            255,
            256,
            [128, 64, 32, 16],
            15,
        ),  # a group's last element: a few compiled lengths, the rest one call each
        (106, 256, [64, 32], 10),
        (MIN_SCAN - 1, 256, [], MIN_SCAN - 1),
        (16, 40, [16], 0),
    ],
)
def test_a_groups_last_element_scans_in_powers_of_two_and_calls_the_rest(
    batches: int, steps: int, sizes: list[int], left: int
) -> None:
    got = scan_sizes(batches, steps)
    assert got == (sizes, left) and sum(got[0]) + got[1] == batches


def test_an_unknown_loop_and_scan_with_deterministic_are_refused() -> None:
    with pytest.raises(
        UsageError, match=r"--jax-loop must be auto, dispatch or scan \(received 'sideways'\)"
    ):
        chunkfit.FitOptions(jax_loop="sideways")
    with pytest.raises(
        UsageError, match=r"--jax-loop scan cannot be combined with --deterministic"
    ):
        chunkfit.FitOptions(jax_loop="scan", deterministic=True)
    assert chunkfit.FitOptions(jax_loop="dispatch", deterministic=True).jax_loop == "dispatch"


@pytest.mark.slow
def test_the_tensorflow_engine_refuses_jax_loop_in_one_line_and_writes_nothing(
    tmp_path: Path,
) -> None:
    store = tmp_path / "s.zarr"
    synth(store, SynthSpec(samples=2_000, anomalies=20, seed=0))
    proc = run_cli(
        "--backend",
        "tensorflow",
        "train",
        store,
        "--window",
        "16",
        "--jax-loop",
        "scan",
        "--out",
        tmp_path / "run",
    )
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "chunkfit: error: --jax-loop scan is for the JAX engine"
    ), proc.stderr
    assert not (tmp_path / "run").exists()
