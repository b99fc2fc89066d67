"""benchmarks/quality.py: event figures from detection rows, the shipped seismic record, and a
``--quick`` run in a real process without the quality extra."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from support import REPO, cli_env


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


quality = load(REPO / "benchmarks" / "quality.py")
kw1 = load(REPO / "data" / "kw1.py")


def test_detections_stand_at_their_peak_sample_inside_the_held_out_range(tmp_path: Path) -> None:
    rows = tmp_path / "detections.csv"
    rows.write_text(
        "start_sample,end_sample,peak_score,peak_sample\n"
        "100,305,0.9,120\n1000,1104,0.7,1000\n1900,2100,0.8,2050\n"
    )
    # the last detection starts inside the range but peaks after it: not the range's
    assert quality.peaks_of(rows, (0, 2000)).tolist() == [120, 1000]


def test_event_figures_count_only_the_held_out_range() -> None:
    held = quality.Held(np.array([50, 1200, 1500]), 1.0, (0, 900), (1000, 2000))
    data = quality.Dataset(quality.make_ecg, 104, 0.5, 10.0)
    events = held.events(np.array([52, 1205, 1700]), data)
    assert (events["markers"], events["found"], events["false_alarms"]) == (2, 1, 1)


def test_the_shipped_seismic_record_has_its_length_and_markers_inside_it() -> None:
    counts, markers = kw1.load(), kw1.markers()
    assert (counts.size, markers.size, bool(np.all(np.diff(markers) > 0))) == (936_001, 20, True)
    assert 0 < markers[0] and markers[-1] < counts.size


@pytest.mark.slow
def test_quick_run_writes_event_columns_without_the_quality_extra(tmp_path: Path) -> None:
    # obspy and neurokit2 made unimportable: --quick must not need them
    blocker = tmp_path / "block"
    blocker.mkdir()
    for name in ("obspy", "neurokit2"):
        (blocker / f"{name}.py").write_text("raise ImportError('blocked by the test')\n")
    env = cli_env()
    env["PYTHONPATH"] = f"{blocker}:{env['PYTHONPATH']}"
    result = subprocess.run(
        [sys.executable, "benchmarks/quality.py", "--quick", "--out", str(tmp_path / "out")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    row = json.loads(result.stdout.splitlines()[0])
    assert set(row["events"]) >= {"precision", "recall", "f1", "false_alarms_per_hour"}
    assert "| event precision | event recall | event F1 | false alarms/h |" in result.stdout
