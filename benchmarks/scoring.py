"""Scoring speed: chunkfit's predictors, ``evaluate`` and ``predict`` against Keras ``predict``.

    python benchmarks/scoring.py [--model NAME] [--samples N] [--rounds R] [--only NAME ...]

On a synth store of ``--samples`` samples (window 104, one channel; baseline-cnn by default, e.g.
dilated-resnet with ``--samples 65536``) and a run trained one epoch on a small store (scoring
speed does not depend on what the model learnt), each candidate runs in a child process of its
own, on the Keras backend its name says (``tf``: TensorFlow, ``jax``: JAX), and reports windows per
second and the child's peak RSS:

- ``keras-<backend>-b<B>``: Keras ``model.predict`` on every window of the store materialised as
  float32 (materialising not timed), batch B; one warm-up call on a few batches first, so the
  figure is the steady state, as chunkfit's predictor rows;
- ``predictor-<backend>-b<B>[-<variant>]``: chunkfit's ``Predictor`` through
  ``chunkfit.core.scoring.score_store`` (zarr reads in a background thread, blocks of
  200,000 windows), after one warm-up block; a variant is a way of running the block's batches
  that the predictor's module offers (``map``/``dispatch``: the JAX predictor's ``LOOP``;
  ``p<N>``: the TensorFlow predictor's ``PARALLEL``);
- ``evaluate-<backend>`` / ``predict-<backend>``: the API calls at their defaults, timed from the
  call (loading the run and compiling included) with the backend imported before the clock
  starts; ``keras-<backend>-b1024-cold`` is Keras's ``load_model`` and first ``predict`` timed
  the same way.

Rounds alternate the candidates, so load from other processes hits all alike; ratios are taken
per round against the best Keras predict of that round. Tables are printed and appended to
``--log`` (a markdown file) when given.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

OUT = Path("bench-out")
WINDOW = 104
CHUNK = 200_000
BACKENDS = {"tf": "tensorflow", "jax": "jax"}
DEFAULT = (
    "keras-tf-b256",
    "keras-tf-b1024",
    "keras-tf-b4096",
    "keras-jax-b256",
    "keras-jax-b1024",
    "keras-jax-b4096",
    "keras-tf-b1024-cold",
    "keras-jax-b1024-cold",
    "predictor-tf-b1024",
    "predictor-tf-b4096",
    "predictor-jax-b1024",
    "predictor-jax-b4096",
    "evaluate-tf",
    "predict-tf",
    "evaluate-jax",
    "predict-jax",
)


# -- setup -----------------------------------------------------------------------------------------


def synth_store(samples: int) -> Path:
    from chunkfit.synth import DEFAULT_ANOMALIES, SynthSpec, synth

    anomalies = max(1, round(DEFAULT_ANOMALIES * samples / 1_049_344))
    path = OUT / f"score-synth-{samples}-{anomalies}.zarr"
    if not path.exists():
        OUT.mkdir(exist_ok=True)
        synth(path, SynthSpec(samples=samples, anomalies=anomalies, seed=0))
    return path


def trained_run(model: str) -> Path:
    """A run of ``model`` trained one epoch on a 20,000-sample synth store (made once)."""
    import chunkfit

    run = OUT / f"score-run-{model}"
    if not (run / "model.keras").exists():
        chunkfit.fit(
            model,
            synth_store(20_000),
            window=WINDOW,
            epochs=1,
            validation=0.0,
            out=run,
            resume="restart",
        )
    return run


# -- candidates: each runs in its own process and prints one JSON line -----------------------------


def materialised(store: str) -> Any:
    import numpy as np

    from chunkfit import open_store

    with open_store(store) as s:
        x = s.read(0, s.n_samples)
    return np.ascontiguousarray(np.lib.stride_tricks.sliding_window_view(x, WINDOW, axis=0))


def keras_predict(store: str, run: str, batch: int, cold: bool) -> dict[str, Any]:
    import keras
    import numpy as np

    windows = materialised(store).transpose(0, 2, 1).astype(np.float32)
    t0 = time.perf_counter()
    model = keras.saving.load_model(Path(run) / "model.keras", compile=False)
    if not cold:
        model.predict(windows[: 2 * batch], batch_size=batch, verbose=0)
        t0 = time.perf_counter()
    model.predict(windows, batch_size=batch, verbose=0)
    return {"windows": len(windows), "seconds": time.perf_counter() - t0}


def chunkfit_predictor(store: str, run: str, batch: int, variant: str | None) -> dict[str, Any]:
    import numpy as np

    from chunkfit import open_store
    from chunkfit.core.scoring import score_store
    from chunkfit.score.runs import load_run
    from chunkfit.score.scorer import make_predictor

    if variant is not None:
        loop = variant.removeprefix("p")
        if os.environ.get("KERAS_BACKEND") == "jax":
            from chunkfit.train.jax import predictor as module
        else:
            from chunkfit.train.tensorflow import predictor as module
        if loop.isdigit():
            module.PARALLEL = int(loop)
        else:
            module.LOOP = loop
    model, spec = load_run(run)
    w = spec.windows
    predictor = make_predictor(model, w.window, spec.n_channels, batch)
    with open_store(store) as s:
        predictor(s.read(0, CHUNK + WINDOW - 1), np.arange(CHUNK, dtype=np.int32))
        t0 = time.perf_counter()
        n = sum(sb.starts.size for sb in score_store(predictor, s, w, chunk=CHUNK))
    return {"windows": n, "seconds": time.perf_counter() - t0, "variant": variant}


def chunkfit_call(store: str, run: str, how: str) -> dict[str, Any]:
    import chunkfit
    import chunkfit.store.zarrbackend  # noqa: F401 - zarr imported, as for Keras's rows

    if os.environ.get("KERAS_BACKEND") == "jax":
        import keras  # noqa: F401 - the backend imported, as for Keras's rows
    else:
        from chunkfit._quiet import import_tensorflow_quietly

        import_tensorflow_quietly()
    t0 = time.perf_counter()
    if how == "evaluate":
        windows = chunkfit.evaluate(run, store)["windows"]
    else:
        with tempfile.TemporaryDirectory() as tmp:
            windows = chunkfit.predict(run, store, Path(tmp) / "scores.zarr").windows
    return {"windows": windows, "seconds": time.perf_counter() - t0}


def candidate(name: str, store: str, run: str) -> dict[str, Any]:
    kind, rest = name.split("-")[0], name.split("-")[2:]
    if kind == "keras":
        return keras_predict(store, run, int(rest[0][1:]), "cold" in rest)
    if kind == "predictor":
        return chunkfit_predictor(store, run, int(rest[0][1:]), "-".join(rest[1:]) or None)
    return chunkfit_call(store, run, kind)


def peak_rss() -> int:
    """This process's peak resident memory in bytes (VmHWM: unlike getrusage's maxrss, it does not
    count what the parent held before exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def child(name: str, store: str, run: str) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    out = candidate(name, store, run)
    out["peak_rss"] = peak_rss()
    print(json.dumps(out))


def measure(name: str, store: Path, run: Path) -> dict[str, Any]:
    parts = name.split("-")
    env = {**os.environ, "KERAS_BACKEND": BACKENDS[parts[1]]}
    cmd = [sys.executable, __file__, "--child", name, str(store), str(run)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if proc.returncode != 0:
        sys.exit(f"{name} failed:\n{proc.stderr[-4000:]}")
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    out["windows_per_s"] = out["windows"] / out["seconds"]
    return out


# -- the table -------------------------------------------------------------------------------------


def table(results: dict[str, list[dict[str, Any]]], title: str) -> list[str]:
    rounds = len(next(iter(results.values())))
    warm = [n for n in results if n.startswith("keras-") and not n.endswith("-cold")]
    cold = [n for n in results if n.startswith("keras-") and n.endswith("-cold")]

    def best(names: list[str], r: int) -> float:
        return max((results[n][r]["windows_per_s"] for n in names), default=float("nan"))

    lines = [
        title,
        "",
        "| candidate | windows/s (median) | vs best Keras predict | per round | peak RSS MB |",
        "|---|---:|---:|---|---:|",
    ]
    for name, rs in results.items():
        is_cold = name.endswith("-cold") or name.split("-")[0] in ("evaluate", "predict")
        base = cold if is_cold else warm
        ratios = [r["windows_per_s"] / best(base, i) for i, r in enumerate(rs)]
        speed = statistics.median(r["windows_per_s"] for r in rs)
        per = ", ".join(f"{r['windows_per_s'] / 1000:.1f}k" for r in rs)
        peak = max(r["peak_rss"] for r in rs) / 2**20
        lines.append(
            f"| {name} | {speed:,.0f} | {statistics.median(ratios):.2f}x | {per} | {peak:,.0f} |"
        )
    lines += [
        "",
        f"{rounds} round(s); ratios are medians of per-round ratios. Warm rows (keras-*-b*, "
        "predictor-*) against the best warm Keras predict; cold rows (evaluate, predict, "
        "keras-*-cold: timed from the call) against the best cold Keras predict.",
    ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="baseline-cnn")
    parser.add_argument("--samples", type=int, default=1_049_344)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--only", nargs="*", default=list(DEFAULT))
    parser.add_argument("--log", type=Path)
    args = parser.parse_args()
    store, run = synth_store(args.samples), trained_run(args.model)
    results: dict[str, list[dict[str, Any]]] = {n: [] for n in args.only}
    for _ in range(args.rounds):
        for name in args.only:
            results[name].append(measure(name, store, run))
            r = results[name][-1]
            print(
                f"  {name}: {r['windows_per_s']:,.0f} windows/s, {r['peak_rss'] / 2**20:,.0f} MB",
                file=sys.stderr,
            )
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
    cpu = next(
        (line.split(":", 1)[1].strip() for line in lscpu if line.startswith("Model name")),
        platform.processor(),
    )
    title = (
        f"### {args.model}, {args.samples:,}-sample synth store, window {WINDOW}; "
        f"{cpu}, {os.cpu_count()} CPUs"
    )
    lines = table(results, title)
    print("\n".join(lines))
    if args.log is not None:
        with args.log.open("a") as f:
            f.write("\n".join(lines) + "\n\n")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(*sys.argv[2:5])
    else:
        main()
