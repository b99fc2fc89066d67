"""``make demo`` (data/demo.py) runs from a fresh folder and every line it prints fits a terminal of
100 columns: the demo as a user sees it, one epoch instead of five to keep the suite quick."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO, cli_env

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """data/demo.py and its data copied into a fresh folder (the demo writes demo-out/ beside its
    data/) and run there."""
    root = tmp_path_factory.mktemp("fresh")
    (root / "data").mkdir()
    for name in ("demo.py", "ecg208.csv", "ecg208_events.txt"):
        shutil.copy(REPO / "data" / name, root / "data" / name)
    result = subprocess.run(
        [sys.executable, str(root / "data" / "demo.py"), "--epochs", "1"],
        cwd=root,
        env=cli_env(),
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    return result, root


def test_the_demo_runs_every_step(demo: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    result, root = demo
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(p.name for p in (root / "demo-out").iterdir()) == [
        "detections.csv",
        "ecg.zarr",
        "run",
        "scores.zarr",
    ]


def test_every_line_of_the_demo_fits_100_columns(
    demo: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    result, _ = demo
    assert result.returncode == 0, result.stdout + result.stderr
    assert [line for line in result.stdout.splitlines() if len(line) > 100] == []


def test_the_demos_training_prints_a_short_engine_line_and_epoch_line(
    demo: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    result, _ = demo
    lines = result.stdout.splitlines()
    command = lines.index(
        "$ chunkfit train demo-out/ecg.zarr --window 104 --epochs 1 --chunk 20000 "
        "--out demo-out/run"
    )
    assert lines[command + 1].startswith("TensorFlow, train step ")
    assert lines[command + 2].startswith("epoch 1/1  loss ")


def test_the_demo_shows_event_figures_and_one_row_per_detected_beat(
    demo: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    result, root = demo
    lines = result.stdout.splitlines()
    # evaluate leads with the event-level figures
    assert any(line.startswith("event P/R/F1 ") for line in lines), result.stdout
    rows = (root / "demo-out" / "detections.csv").read_text().splitlines()
    header = lines.index(
        f"demo-out/detections.csv: {len(rows) - 1:,} events, one row each; the first three:"
    )
    assert lines[header + 1].strip() == rows[0] and rows[0].startswith("start_s,end_s,peak_s,")
    # one row per beat: no two detections overlap
    spans = [tuple(map(int, r.split(",")[5:7])) for r in rows[1:]]
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:], strict=False))
