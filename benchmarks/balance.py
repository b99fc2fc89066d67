"""How should a run balance a rare class? Held-out figures of each way, side by side.

    python benchmarks/balance.py [--epochs 2] [--datasets synth-rare-1.0 mitdb100]
                                 [--options none weights capped oversample focal margin]
                                 [--out bench-out/balance]

Each option is one `chunkfit train` (same seed, split and model) and one `chunkfit evaluate` on the
run's validation split (windows never trained on): PR-AUC, recall and F1 of the event class at the
threshold the run chose, events covered and false alarms per hour. Every command is a real CLI
subprocess; the stores are those of benchmarks/quality.py. Options:

- ``none``: ``--class-weight none``;
- ``weights``: ``--class-weight balanced`` (the old default for a rare class);
- ``capped``: ``--class-weight balanced:max=10``;
- ``oversample``: ``--oversample 0.25 --class-weight none``;
- ``focal``: ``--loss focal --class-weight none``;
- ``margin``: ``--oversample 0.25 --class-weight none --label-margin M`` (M per dataset).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from quality import DATASETS, ROOT, cli  # noqa: E402

OPTIONS: dict[str, list[str]] = {
    "none": ["--class-weight", "none"],
    "weights": ["--class-weight", "balanced"],
    "capped": ["--class-weight", "balanced:max=10"],
    "oversample": ["--oversample", "0.25", "--class-weight", "none"],
    "focal": ["--loss", "focal", "--class-weight", "none"],
    "margin": ["--oversample", "0.25", "--class-weight", "none"],
}
# --label-margin for the "margin" option: a quarter of the window's samples around each edge are
# left out for the ECG (a beat's QRS complex spans about 0.1 s, 36 samples at 360 Hz).
MARGIN = {"synth-rare": 8, "synth-rare-1.0": 8, "mitdb100": 36, "ecg": 8}
STRIDE = {"mitdb100": 2}  # halves the run time of the 1-s windows; the others step by 1


def measure(
    store: Path, run: Path, epochs: int, window: int, validation: float, extra: list[str]
) -> dict[str, float]:
    t0 = time.perf_counter()
    cli(
        "train",
        str(store),
        "--window",
        str(window),
        "--validation",
        str(validation),
        "--epochs",
        str(epochs),
        "--chunk",
        "50000",
        "--seed",
        "0",
        "--out",
        str(run),
        "--restart",
        *extra,
    )
    seconds = time.perf_counter() - t0
    report = json.loads(cli("evaluate", str(run), str(store), "--json"))
    keep = ("pr_auc", "recall", "precision", "f1", "threshold", "events_covered")
    return {k: report.get(k) for k in keep} | {
        "false_alarms_per_hour": report.get("false_alarms_per_hour"),
        "train_seconds": round(seconds, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument(
        "--datasets", nargs="+", choices=list(DATASETS), default=["synth-rare-1.0", "mitdb100"]
    )
    ap.add_argument("--options", nargs="+", choices=list(OPTIONS), default=list(OPTIONS))
    ap.add_argument("--out", type=Path, default=ROOT / "bench-out" / "balance")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.datasets:
        maker, window, validation = DATASETS[name]
        store = maker(args.out)
        for option in args.options:
            extra = [*OPTIONS[option], "--stride", str(STRIDE.get(name, 1))]
            if option == "margin":
                extra += ["--label-margin", str(MARGIN[name])]
            got = measure(
                store, args.out / f"{name}-{option}", args.epochs, window, validation, extra
            )
            rows.append((name, option, got))
            print(json.dumps({"dataset": name, "option": option, **got}), flush=True)
    print(
        "\n| dataset | option | PR-AUC | threshold | recall | F1 | events covered | "
        "false alarms/h | train s |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, option, r in rows:
        cov = "-" if r["events_covered"] is None else f"{100 * r['events_covered']:.0f}%"
        fa = "-" if r["false_alarms_per_hour"] is None else f"{r['false_alarms_per_hour']:.3g}"
        print(
            f"| {name} | {option} | {r['pr_auc']:.3f} | {r['threshold']:.3g} | "
            f"{r['recall']:.3f} | {r['f1']:.3f} | {cov} | {fa} | {r['train_seconds']} |"
        )


if __name__ == "__main__":
    main()
