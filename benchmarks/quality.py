"""Do chunkfit's defaults learn on logs in raw units with rare events? Held-out figures, old vs new.

    python benchmarks/quality.py [--epochs 3] [--datasets ecg synth-rare] [--out bench-out/quality]

For each dataset, the same `chunkfit train` twice in one run, same seed and split:

- old defaults: ``--normalize none --class-weight none``, scored at the fixed threshold 0.5;
- new defaults: standardised inputs, class weights when events are rare, the threshold chosen on
  the validation split (max F1).

Both are then scored by ``chunkfit evaluate`` on the run's validation split (windows never trained
on): PR-AUC, and recall and F1 of the event class at the threshold each uses. Every command is a
real CLI subprocess. Datasets:

- ``ecg``: the shipped ECG log (data/ecg208.csv, millivolts, R peaks as events: about half the
  windows hold one);
- ``synth-rare``: the original question's signal in raw units (``1000 * x + 5000``, as a sensor's
  counts), with anomalies at about 1% of the windows.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WINDOW = 104


def cli(*args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "chunkfit", *args], cwd=ROOT, capture_output=True, text=True,
                            check=False)
    if result.returncode != 0:
        sys.exit(f"quality: chunkfit {args[0]} failed: {result.stderr.strip()}")
    return result.stdout


def make_ecg(out: Path) -> Path:
    store = out / "ecg.zarr"
    if not store.exists():
        cli("ingest", str(store), "data/ecg208.csv", "--time-column", "time_s", "--events", "data/ecg208_events.txt")
    return store


def make_synth_rare(out: Path) -> Path:
    store = out / "synth-rare.zarr"
    if not store.exists():
        samples = 1_049_344
        anomalies = round(samples * (1 - 0.99 ** (1 / WINDOW)))  # about 1% of the windows hold one
        cli("synth", str(store), "--samples", str(samples), "--anomalies", str(anomalies), "--seed", "0",
            "--scale", "1000", "--offset", "5000")
    return store


DATASETS = {"ecg": make_ecg, "synth-rare": make_synth_rare}


def measure(store: Path, run: Path, epochs: int, old: bool) -> dict[str, float]:
    settings = ["--normalize", "none", "--class-weight", "none"] if old else []
    cli("train", str(store), "--window", str(WINDOW), "--epochs", str(epochs), "--chunk", "50000", "--seed", "0",
        "--out", str(run), "--restart", *settings)
    fixed = ["--threshold", "0.5"] if old else []
    report = json.loads(cli("evaluate", str(run), str(store), "--json", "--plot", str(run / "eval.png"), *fixed))
    return {k: report[k] for k in ("pr_auc", "recall", "precision", "f1", "threshold", "windows")} | {
        "positive_rate": report["confusion"]["tp"] + report["confusion"]["fn"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--datasets", nargs="+", choices=list(DATASETS), default=list(DATASETS))
    ap.add_argument("--out", type=Path, default=ROOT / "bench-out" / "quality")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.datasets:
        store = DATASETS[name](args.out)
        old = measure(store, args.out / f"{name}-old", args.epochs, old=True)
        new = measure(store, args.out / f"{name}-new", args.epochs, old=False)
        rate = new["positive_rate"] / new["windows"]
        rows.append((name, rate, old, new))
        print(json.dumps({"dataset": name, "positive_window_rate": rate, "old": old, "new": new}), flush=True)
    print("\n| dataset | positive windows | old: PR-AUC | recall @0.5 | F1 @0.5 | new: PR-AUC | threshold | recall | F1 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, rate, old, new in rows:
        print(f"| {name} | {100 * rate:.2f}% | {old['pr_auc']:.3f} | {old['recall']:.3f} | {old['f1']:.3f} | "
              f"{new['pr_auc']:.3f} | {new['threshold']:.3g} | {new['recall']:.3f} | {new['f1']:.3f} |")


if __name__ == "__main__":
    main()
