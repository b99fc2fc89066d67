"""``evaluate`` and ``predict`` draw a progress bar when stderr is a terminal (a real
pseudo-terminal here), as ``train`` does; off a terminal they draw nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from scoring_support import Trained
from support import on_a_terminal, run_cli

pytestmark = pytest.mark.slow


def drawn_on_a_terminal(*args: str) -> tuple[int, bytes]:
    """Run ``chunkfit ARGS`` with stderr on a pseudo-terminal; its exit code and what it drew."""
    code, drawn, _ = on_a_terminal(*args)
    return code, drawn


def test_evaluate_draws_a_progress_bar_on_a_terminal(runs: Trained, tmp_path: Path) -> None:
    code, drawn = drawn_on_a_terminal(
        "evaluate", str(runs.run), str(runs.store), "--plot", str(tmp_path / "eval.png")
    )
    assert code == 0, drawn.decode(errors="replace")
    assert b"evaluate" in drawn and b"100%" in drawn


def test_predict_draws_a_progress_bar_on_a_terminal(runs: Trained, tmp_path: Path) -> None:
    code, drawn = drawn_on_a_terminal(
        "predict", str(runs.run), str(runs.store), "--out", str(tmp_path / "scores.h5")
    )
    assert code == 0, drawn.decode(errors="replace")
    assert b"predict" in drawn and b"100%" in drawn


def test_predict_off_a_terminal_draws_nothing(runs: Trained, tmp_path: Path) -> None:
    result = run_cli("predict", runs.run, runs.store, "--out", tmp_path / "scores.h5")
    assert (result.returncode, result.stderr) == (0, "")
