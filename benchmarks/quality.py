"""Do chunkfit's detectors find events on real logs, beside the classic detector of each field?

    python benchmarks/quality.py [--epochs 3] [--datasets ecg-rpeaks seismic synth-rare mitdb100]
                                 [--model NAME] [--out bench-out/quality] [--quick]

Every row of ``ROWS`` trains one ``chunkfit train`` (same seed and split), then ``chunkfit
evaluate`` scores the run's validation split (the held-out range, windows never trained on) and
``chunkfit predict --events-out`` writes its detections. Event figures: the detections whose peak
lies in the held-out range are matched one to one to the markers there
(``chunkfit.core.matching``), a marker found when a peak lies within the dataset's tolerance of
it: event precision, recall, F1, false alarms (unmatched detections) per hour held out, and the
median time error of the found peaks. Window figures (PR-AUC, F1 at the threshold used) are
evaluate's. Each row's run time covers its train, evaluate and predict.

Rows are old defaults (``--normalize none --class-weight none``, scored at the fixed threshold 0.5)
or chunkfit's defaults (the threshold chosen on the validation split); ``--model`` and each row's
own train options go to ``chunkfit train``, so a row for another model is one line in ``ROWS``.
Datasets with a classic detector (``benchmarks/classic.py``, the ``quality`` extra) get its row on
the same held-out range and tolerance:

- ``ecg-rpeaks``: MIT-BIH record 100 (data/mitdb100/, two leads in raw ADC units, 360 Hz), every
  beat annotation as an event (2,273 beats), window 104, last 20% held out, +-50 ms; against
  Pan-Tompkins (neurokit2);
- ``seismic``: the shipped seismometer record BW.KW1 (data/kw1/, 2.6 h at 100 Hz, raw counts), its
  20 STA/LTA triggers as events, window 200, last 20% held out, +-1 s; against STA/LTA tuned on
  the training range (obspy; the markers were made by STA/LTA, so it is the reference here);
- ``mitdb100``: record 100's 34 premature beats (A, V) as events, window 360, +-0.5 s;
- ``synth-rare``: the original question's signal in raw units (``1000 * x + 5000``), single-sample
  bumps of +0.5 at about 1% of the windows (``synth-rare-1.0``: bumps of +1.0); no rate, so
  "seconds" are samples and the tolerance is half a window;
- ``ecg``: the shipped ECG excerpt (data/ecg208.csv, millivolts, R peaks as events);
- ``synth-small`` (``--quick``): 20,000 samples of synth-rare-1.0, one epoch: a smoke test.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from chunkfit import open_store
from chunkfit.core.matching import match_events
from chunkfit.core.windows import split_segment

ROOT = Path(__file__).resolve().parents[1]
WINDOW = 104
OLD = ("--normalize", "none", "--class-weight", "none")
ALL_BEATS = "N,L,R,A,a,J,S,V,F,e,j,E,/,f,Q"  # every beat code of the MIT annotations


@dataclasses.dataclass(frozen=True)
class Row:
    """One chunkfit run of a dataset: a label, its train options, and a fixed threshold (old
    defaults) or None (the run's own)."""

    dataset: str
    label: str
    train: tuple[str, ...] = ()
    threshold: float | None = None


ROWS: tuple[Row, ...] = (
    Row("ecg-rpeaks", "chunkfit defaults"),
    Row("ecg-rpeaks", "--model picker", ("--model", "picker")),
    Row("seismic", "chunkfit defaults"),
    Row("seismic", "--class-weight none", ("--class-weight", "none")),
    Row("seismic", "--oversample 0.25", ("--oversample", "0.25", "--class-weight", "none")),
    Row("seismic", "--model picker", ("--model", "picker")),
    Row("synth-rare", "old defaults", OLD, 0.5),
    Row("synth-rare", "chunkfit defaults"),
    Row("synth-rare-1.0", "old defaults", OLD, 0.5),
    Row("synth-rare-1.0", "chunkfit defaults"),
    Row("mitdb100", "old defaults", OLD, 0.5),
    Row("mitdb100", "chunkfit defaults"),
    Row("ecg", "old defaults", OLD, 0.5),
    Row("ecg", "chunkfit defaults"),
    Row("synth-small", "chunkfit defaults"),
)


def cli(*args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "chunkfit", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        sys.exit(f"quality: chunkfit {args[0]} failed: {result.stderr.strip()}")
    return result.stdout


def script(*args: str) -> None:
    subprocess.run([sys.executable, *args], cwd=ROOT, check=True, capture_output=True)


def make_ecg(out: Path) -> Path:
    store = out / "ecg.zarr"
    if not store.exists():
        cli("ingest", str(store), "data/ecg208.csv", "--time-column", "time_s",
            "--events", "data/ecg208_events.txt")  # fmt: skip
    return store


def make_synth_rare(out: Path, bump: float, samples: int = 1_049_344) -> Path:
    store = out / f"synth-rare-{bump:g}-{samples}.zarr"
    if not store.exists():
        anomalies = round(samples * (1 - 0.99 ** (1 / WINDOW)))  # about 1% of the windows hold one
        cli("synth", str(store), "--samples", str(samples), "--anomalies", str(anomalies),
            "--seed", "0", "--bump", str(bump), "--scale", "1000", "--offset", "5000")  # fmt: skip
    return store


def make_mitdb100(out: Path, beats: str = "A,V") -> Path:
    """Record 100 with ``beats`` as events (its own folder per choice of beats)."""
    folder = out / ("mitdb100" if beats == "A,V" else "mitdb100-all-beats")
    store = folder / "mitdb100.zarr"
    if not store.exists():
        script("data/mitdb100.py", str(folder), "--beats", beats)
        cli("ingest", str(store), str(folder / "mitdb100.npy"), "--rate", "360",
            "--names", "MLII,V5", "--events", str(folder / "mitdb100_events.txt"))  # fmt: skip
    return store


def make_kw1(out: Path) -> Path:
    store = out / "kw1.zarr"
    if not store.exists():
        script("data/kw1.py", str(out))
        cli("ingest", str(store), str(out / "kw1.npy"), "--rate", "100", "--names", "EHZ",
            "--events", str(out / "kw1_events.txt"))  # fmt: skip
    return store


@dataclasses.dataclass(frozen=True)
class Dataset:
    """How to make the store, its window, the share held out at its end, the event tolerance (in
    seconds; in samples where the store has no rate) and its classic detector, if any."""

    make: Callable[[Path], Path]
    window: int
    validation: float
    tolerance_s: float
    classic: str | None = None


DATASETS: dict[str, Dataset] = {
    "ecg-rpeaks": Dataset(
        partial(make_mitdb100, beats=ALL_BEATS), WINDOW, 0.2, 0.05, "pan-tompkins"
    ),
    "seismic": Dataset(make_kw1, 200, 0.2, 1.0, "sta-lta"),
    "synth-rare": Dataset(partial(make_synth_rare, bump=0.5), WINDOW, 0.1, WINDOW / 2),
    "synth-rare-1.0": Dataset(partial(make_synth_rare, bump=1.0), WINDOW, 0.1, WINDOW / 2),
    "mitdb100": Dataset(make_mitdb100, 360, 0.2, 0.5),
    "ecg": Dataset(make_ecg, WINDOW, 0.1, 0.05),
    "synth-small": Dataset(partial(make_synth_rare, bump=1.0, samples=20_000), WINDOW, 0.2, 52),
}


@dataclasses.dataclass(frozen=True)
class Held:
    """A store's markers, rate, training and held-out ranges (one segment: chunkfit's split)."""

    markers: np.ndarray
    rate: float
    train: tuple[int, int]
    held: tuple[int, int]

    @classmethod
    def of(cls, store: Path, data: Dataset) -> Held:
        opened = open_store(store)
        (a, b), *rest = opened.segments.tolist()
        if rest:
            sys.exit(f"quality: {store} has {len(rest) + 1} segments; the benchmark expects one")
        train, held = split_segment(a, b, data.window, data.validation)
        return cls(opened.events, float(opened.sample_rate or 1.0), train, held)

    def tolerance(self, data: Dataset) -> int:
        return round(data.tolerance_s * self.rate)

    def events(self, peaks: np.ndarray, data: Dataset) -> dict[str, Any]:
        """Event figures of ``peaks`` against the markers, both restricted to the held-out range."""
        a, b = self.held
        truth = self.markers[(self.markers >= a) & (self.markers < b)]
        inside = peaks[(peaks >= a) & (peaks < b)]
        hours = (b - a) / self.rate / 3600
        return match_events(truth, inside, self.tolerance(data)).summary(self.rate, hours)


def peaks_of(detections_csv: Path, held: tuple[int, int]) -> np.ndarray:
    """Each detection's time in samples (its ``peak_sample``: where its score is highest), for the
    detections whose peak lies in the held-out range [a, b)."""
    a, b = held
    with detections_csv.open(newline="") as f:
        peaks = [int(r["peak_sample"]) for r in csv.DictReader(f)]
    return np.array([p for p in peaks if a <= p < b], dtype=np.int64)


def measure(
    row: Row, data: Dataset, store: Path, held: Held, run: Path, epochs: int, model: str | None
) -> dict[str, Any]:
    """Train, evaluate and predict one row; its window and event figures and run time."""
    began = time.perf_counter()
    cli("train", str(store), "--window", str(data.window), "--validation", str(data.validation),
        "--epochs", str(epochs), "--chunk", "50000", "--seed", "0", "--out", str(run),
        "--restart", "--tolerance", str(data.tolerance_s),
        *(("--model", model) if model else ()), *row.train)  # fmt: skip
    fixed = ("--threshold", str(row.threshold)) if row.threshold is not None else ()
    report = json.loads(cli("evaluate", str(run), str(store), "--json", *fixed))
    cli("predict", str(run), str(store), "--out", str(run / "scores.zarr"), "--events-out",
        str(run / "detections.csv"), "--overwrite", *fixed)  # fmt: skip
    seconds = time.perf_counter() - began
    window = {k: report.get(k) for k in ("pr_auc", "precision", "recall", "f1", "threshold")}
    events = held.events(peaks_of(run / "detections.csv", held.held), data)
    return {"window": window, "events": events, "seconds": seconds}


def classic_rows(name: str, data: Dataset, held: Held, out: Path) -> list[dict[str, Any]]:
    """The classic detector of ``data`` on the whole record, scored on the held-out range.

    Pan-Tompkins marks each beat a steady delay after its annotation (neurokit2's marks lie
    about 40 ms late on record 100), so it gets a second row with its median delay on the
    training range (pairs within 150 ms, AAMI EC57's window) taken off: a fit on training data,
    as the STA/LTA settings are.
    """
    import classic

    began = time.perf_counter()
    if data.classic == "pan-tompkins":
        mlii = np.load(out / "mitdb100-all-beats" / "mitdb100.npy")[:, 0]
        peaks, what = classic.pan_tompkins((mlii.astype(np.float64) - 1024) / 200, held.rate)
        seconds = time.perf_counter() - began
        a, b = held.train
        train = match_events(
            held.markers[(held.markers >= a) & (held.markers < b)],
            peaks[(peaks >= a) & (peaks < b)],
            round(0.15 * held.rate),
        )
        delay = int(np.median(train.errors))
        return [
            {"label": f"Pan-Tompkins ({what})", "events": held.events(peaks, data),
             "seconds": seconds},
            {"label": f"Pan-Tompkins ({what}), its training delay ({delay / held.rate * 1000:.0f}"
             " ms) taken off", "events": held.events(peaks - delay, data), "seconds": seconds},
        ]  # fmt: skip
    sys.path.insert(0, str(ROOT / "data"))
    import kw1

    peaks, what = classic.sta_lta_tuned(kw1.load(), held.markers, held.train, held.tolerance(data))
    seconds = time.perf_counter() - began
    return [{"label": f"STA/LTA ({what})", "events": held.events(peaks, data), "seconds": seconds}]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument(
        "--datasets",
        nargs="+",
        choices=list(DATASETS),
        default=["ecg-rpeaks", "seismic", "synth-rare", "mitdb100"],
    )
    ap.add_argument("--model", help="chunkfit train --model for every row (default: its own)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench-out" / "quality")
    ap.add_argument("--rows", nargs="+", help="Only the rows with these labels (see ROWS)")
    ap.add_argument("--no-classic", action="store_true", help="Leave the classic detectors out")
    ap.add_argument(
        "--quick", action="store_true", help="Smoke test: synth-small, 1 epoch, no classic"
    )
    args = ap.parse_args()
    if args.quick:
        args.datasets, args.epochs, args.no_classic = ["synth-small"], 1, True
    args.out.mkdir(parents=True, exist_ok=True)
    classic_missing = None
    if not args.no_classic:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import classic

        classic_missing = classic.available()
        if classic_missing is not None:
            print(f"quality: classic detectors left out: {classic_missing}", file=sys.stderr)
    table = []
    for name in args.datasets:
        data = DATASETS[name]
        store = data.make(args.out)
        held = Held.of(store, data)
        for row in (r for r in ROWS if r.dataset == name and r.label in (args.rows or [r.label])):
            run = args.out / f"{name}-{row.label.replace(' ', '-')}"
            result = measure(row, data, store, held, run, args.epochs, args.model)
            label = row.label + (f", --model {args.model}" if args.model else "")
            table.append((name, label, result))
            print(json.dumps({"dataset": name, "detector": label, **result}), flush=True)
        if data.classic and not args.no_classic and classic_missing is None:
            for result in classic_rows(name, data, held, args.out):
                table.append((name, result["label"], result))
                print(json.dumps({"dataset": name, **result}), flush=True)
    print_table(table)


def print_table(table: list[tuple[str, str, dict[str, Any]]]) -> None:
    print(
        "\n| dataset | detector | held-out markers | event precision | event recall | event F1 | "
        "false alarms/h | median time error | window PR-AUC | window F1 | threshold | run time |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, label, r in table:
        e, w = r["events"], r.get("window", {})
        print(
            f"| {name} | {label} | {e['markers']} | {_f(e['precision'])} | {_f(e['recall'])} | "
            f"{_f(e['f1'])} | {_f(e['false_alarms_per_hour'], '.3g')} | "
            f"{_f(e['time_error_median_s'], '.3f', ' s')} | {_f(w.get('pr_auc'))} | "
            f"{_f(w.get('f1'))} | {_f(w.get('threshold'), '.3g')} | {r['seconds']:.3g} s |"
        )


def _f(x: float | None, spec: str = ".3f", unit: str = "") -> str:
    return "-" if x is None or x != x else format(x, spec) + unit


if __name__ == "__main__":
    main()
