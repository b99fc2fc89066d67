"""`make demo`: ingest the shipped ECG log, describe the store, train on it, show the results.

Everything goes to ./demo-out/, which is recreated on every run. Each step is the chunkfit command a
user would type, run in a subprocess so the output is exactly what they would see; every line fits
a terminal of 100 columns. ``--epochs N`` trains for N epochs instead of 5.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = Path("demo-out")
STORE = OUT / "ecg.zarr"
RUN = OUT / "run"


WIDTH = 100


def command_lines(args: tuple[str, ...]) -> list[str]:
    """``$ chunkfit ARGS`` as a shell would take it, continued with `` \\`` before ``WIDTH``
    columns; an option stays on the line of its value."""
    words: list[str] = []
    for arg in args:
        if words and words[-1].startswith("--") and not arg.startswith("--"):
            words[-1] += f" {arg}"
        else:
            words.append(arg)
    lines = ["$ chunkfit"]
    for word in words:
        if len(lines[-1]) + 1 + len(word) + 2 > WIDTH:
            lines[-1] += " \\"
            lines.append("   ")
        lines[-1] += f" {word}"
    return lines


def chunkfit(*args: str) -> None:
    print("\n" + "\n".join(command_lines(args)), flush=True)
    result = subprocess.run([sys.executable, "-m", "chunkfit", *args], cwd=ROOT, check=False)
    if result.returncode != 0:
        sys.exit(f"demo: `chunkfit {args[0]}` failed with exit code {result.returncode}")


def main() -> None:
    parser = argparse.ArgumentParser(description="ingest, train on and score the shipped ECG log")
    parser.add_argument("--epochs", type=int, default=5, help="epochs to train (default 5)")
    epochs = parser.parse_args().epochs
    shutil.rmtree(ROOT / OUT, ignore_errors=True)
    (ROOT / OUT).mkdir()
    chunkfit(
        "ingest",
        str(STORE),
        "data/ecg208.csv",
        "--time-column",
        "time_s",
        "--events",
        "data/ecg208_events.txt",
    )
    chunkfit("info", str(STORE))
    # 5 minutes of ECG at 360 Hz: windows of 104 samples (0.29 s), class 1 when an R peak falls
    # inside.
    chunkfit(
        "train",
        str(STORE),
        "--window",
        "104",
        "--epochs",
        str(epochs),
        "--chunk",
        "20000",
        "--out",
        str(RUN),
    )
    run = json.loads((ROOT / RUN / "run.json").read_text())
    split, chosen = run["split"], run["threshold"]
    print(
        f"\nvalidation: the last 10% of the recording, {split['validation_windows']:,} windows "
        "never trained on"
    )
    print(
        f"  PR-AUC {chosen['pr_auc']:.4f}; at threshold {chosen['value']:.4g} (max F1): "
        f"precision {chosen['precision']:.4f}, recall {chosen['recall']:.4f}, F1 {chosen['f1']:.4f}"
    )
    print(
        f"training: {split['train_windows']:,} windows per epoch "
        f"at {run['windows_per_s']:,.0f} windows/s"
    )
    print(f"every epoch's figures: {RUN / 'history.csv'}; curves: {RUN / 'curves.png'}")
    # On the store it was trained on, evaluate scores the held-out validation split (windows the
    # model never saw), at the run's threshold; then the whole log is scored as if it were a new
    # one: one score per sample and one row per detected beat.
    chunkfit("evaluate", str(RUN), str(STORE))
    chunkfit(
        "predict",
        str(RUN),
        str(STORE),
        "--out",
        str(OUT / "scores.zarr"),
        "--events-out",
        str(OUT / "detections.csv"),
    )
    # one row per detected beat (its windows merged), timed by its peak
    rows = (OUT / "detections.csv").read_text().splitlines()
    print(f"{OUT / 'detections.csv'}: {len(rows) - 1:,} events, one row each; the first three:")
    for line in rows[:4]:
        print(f"  {line[:96]}")


if __name__ == "__main__":
    main()
