"""The engine (TensorFlow or JAX) and the precision (float32 or bfloat16) a run trains with, chosen
for this machine and model before Keras loads.

Which engine trains a model faster depends on the CPU (the JAX engine won on an AVX2-only EPYC,
the TensorFlow engine on an AVX-512 + AMX Xeon) and on the model, and bfloat16 pays only on CPUs
with bfloat16 instructions (chunkfit.train.precision). So, for the engine:

- ``--backend``, ``KERAS_BACKEND`` or a keras.json naming JAX decide, as Keras would; so does a
  Keras imported before the run (its backend is fixed), a resumed run (the engine it started
  with; from a checkpoint made before this choice existed, its run.json's engine in float32), an
  install without jax (TensorFlow, engines not measured: on a bfloat16 CPU ``--precision auto``
  still measures TensorFlow's two precisions), and options only one engine honours
  (``--devices``, ``TF_CONFIG``, ``--jit off``, ``--compute-threads``: TensorFlow;
  ``--jax-loop dispatch|scan``: JAX);
- ``--deterministic`` runs and models a child cannot rebuild (``module:function``, whose code runs
  once) take the rule, TensorFlow;
- else a measurement cached for this CPU (its usable cores), library versions, model and shapes
  decides (``by: cache``);
- else a run too short for the measurement to cost under ``BUDGET_SHARE`` of it (fewer than
  ``probe_windows()`` training windows) takes the rule, TensorFlow;
- else each candidate is measured now, in children of its own (chunkfit.train.choiceprobe), and
  the faster trains; JAX must beat TensorFlow by ``MARGIN`` (a close call stays with the rule). A
  child that dies fails the measurement: the rule, nothing cached.

The precision is chosen alongside: ``--precision float32|bfloat16`` decides, a resumed run keeps
its own, and ``auto`` is float32 except on CPUs with bfloat16 instructions, where the same children
measure bfloat16 too (a cached measurement decides first, else long runs only, as above) and it is
kept only where it trained faster by ``MARGIN`` and its held-out figures stayed within tolerance of
float32's. The choice, why, and what was measured go to the run's one line and run.json
(``choice``); the measurements to ``$CHUNKFIT_CACHE_DIR/engines.json`` (delete it to measure
again).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import platform
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .backend import configured_backend
from .precision import bf16_flags, within_tolerance
from .probing import cpu_name, read_cache, write_cache
from .steps import cache_dir
from .tensorflow.threads import usable_cores

if TYPE_CHECKING:
    from ..config import FitOptions

CACHE_FILE = "engines.json"
RULE_ENGINE = "tensorflow"
MARGIN = 1.05  # how much faster than the rule (TensorFlow, float32) another choice must be
BUDGET_SHARE = 0.1  # of the run's estimated length
PROBE_SECONDS = 40.0  # what a first measurement adds to a run on 2 cores (imports included)
ASSUMED_RATE = 50_000.0  # training windows/s for estimating a run's length (a fast model)
NOT_MEASURED = "only built-in classifiers and .keras files are measured"
PROBE_WINDOWS_ENV = "CHUNKFIT_ENGINE_PROBE_WINDOWS"  # tests: the fewest windows worth measuring


@dataclasses.dataclass(frozen=True)
class Choice:
    """The engine and precision a run trains with, and why."""

    engine: str
    precision: str
    engine_by: str
    precision_by: str
    windows_per_s: dict[str, float] | None = None
    validation: dict[str, list[float]] | None = None
    cached: bool = False

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "engine": self.engine,
            "precision": self.precision,
            "engine_by": self.engine_by,
            "precision_by": self.precision_by,
        }
        if self.windows_per_s:
            out["windows_per_s"] = self.windows_per_s
            out["cached"] = self.cached
        if self.validation:
            out["validation"] = self.validation
        return out

    @property
    def worth_a_line(self) -> bool:
        """Whether the run says its choice on a line of its own: when measured (now or cached) or
        in bfloat16; a rule's or a flag's choice is in run.json, and the engine in the compile
        line."""
        return self.windows_per_s is not None or self.precision != "float32"

    def line(self) -> str:
        """The run's one line on its engine and precision."""
        if self.engine_by == self.precision_by:
            return f"engine: {self.engine}, {self.precision} ({self.engine_by})"
        return f"engine: {self.engine} ({self.engine_by}); precision: {self.precision} " + (
            f"({self.precision_by})"
        )


def backend_given() -> str | None:
    """What fixes Keras's backend before chunkfit chooses (None: nothing does)."""
    if "keras" in sys.modules:
        name = sys.modules["keras"].backend.backend()
        return f"{name}: Keras was imported before the run, on {name}"
    if os.environ.get("KERAS_BACKEND"):
        return f"{os.environ['KERAS_BACKEND']}: --backend or KERAS_BACKEND"
    configured = configured_backend()
    # Keras writes keras.json naming TensorFlow on its first import: only another name is a choice
    if configured is not None and configured != "tensorflow":
        return f"{configured}: keras.json"
    return None


def has_jax() -> bool:
    """Whether jax can be imported here (without importing it)."""
    try:
        return importlib.util.find_spec("jax") is not None
    except (ImportError, ValueError):
        return False


def choose(
    model: Any,
    opts: FitOptions,
    *,
    channels: int,
    classes: int,
    run_windows: int,
    resumed: dict[str, Any] | None = None,
    distributed: bool = False,
) -> Choice:
    """The run's engine and precision; see the module docstring. ``resumed``: the choice recorded
    by the checkpoint a run resumes from (None: a new run)."""
    engines, engine_by = _engines(model, opts, resumed, distributed)
    precisions, precision_by = _precisions(model, opts, resumed, distributed)
    if len(engines) == 1 and len(precisions) == 1:
        return Choice(engines[0], precisions[0], engine_by, precision_by)
    spec = _spec(model, opts, channels, classes)
    keys = [f"{e}/{p}" for e in engines for p in precisions]
    key = _cache_key(spec)
    cached = _read_cache().get(key, {})
    rates = cached.get("windows_per_s", {})
    if all(k in rates for k in keys):
        return _decide(engines, precisions, engine_by, precision_by, cached, spec, cached=True)
    least = probe_windows()
    if run_windows < least:
        why = f"a run of {run_windows:,} windows is too short to measure"
        return Choice(
            engines[0] if len(engines) == 1 else RULE_ENGINE,
            precisions[0] if len(precisions) == 1 else "float32",
            engine_by if len(engines) == 1 else f"the rule: {why}",
            precision_by if len(precisions) == 1 else f"the rule: {why}",
        )
    from .choiceprobe import measure

    t0 = time.perf_counter()
    measured = measure(keys, spec, validate=len(precisions) > 1)
    if measured is None:
        why = "the measurement failed"
        return Choice(
            engines[0] if len(engines) == 1 else RULE_ENGINE,
            "float32" if len(precisions) > 1 else precisions[0],
            engine_by if len(engines) == 1 else f"the rule: {why}",
            precision_by if len(precisions) == 1 else f"the rule: {why}",
        )
    entry = {
        "windows_per_s": {**rates, **measured["windows_per_s"]},
        "validation": {**cached.get("validation", {}), **measured.get("validation", {})},
        "seconds": round(time.perf_counter() - t0, 1),
        "when": time.strftime("%Y-%m-%d %H:%M"),
    }
    _write_cache(key, entry)
    return _decide(engines, precisions, engine_by, precision_by, entry, spec, cached=False)


def _engines(
    model: Any, opts: FitOptions, resumed: dict[str, Any] | None, distributed: bool
) -> tuple[list[str], str]:
    given = backend_given()
    if given is not None:
        name, _, why = given.partition(": ")
        return [name], why
    if resumed is not None and resumed.get("engine"):
        return [str(resumed["engine"])], "the engine the resumed run started with"
    if not has_jax():
        return ["tensorflow"], "jax is not installed"
    if distributed:
        return ["tensorflow"], "several devices or workers train on TensorFlow"
    if opts.jit == "off" or opts.compute_threads is not None:
        flag = "--jit off" if opts.jit == "off" else "--compute-threads"
        return ["tensorflow"], f"{flag} is for the TensorFlow engine"
    if opts.jax_loop != "auto":
        return ["jax"], f"--jax-loop {opts.jax_loop} is for the JAX engine"
    if opts.deterministic:
        return [RULE_ENGINE], "the rule for --deterministic runs (a fixed choice)"
    if not _rebuildable(model):
        return [RULE_ENGINE], f"the rule: {NOT_MEASURED}"
    return ["tensorflow", "jax"], ""


def _precisions(
    model: Any, opts: FitOptions, resumed: dict[str, Any] | None, distributed: bool
) -> tuple[list[str], str]:
    if opts.precision != "auto":
        return [opts.precision], "--precision"
    if resumed is not None and resumed.get("precision"):
        return [str(resumed["precision"])], "the precision the resumed run started with"
    if not bf16_flags():
        return ["float32"], "this CPU has no bfloat16 instructions"
    if opts.deterministic or distributed:
        why = "--deterministic runs" if opts.deterministic else "several devices or workers"
        return ["float32"], f"the rule for {why} (a fixed choice)"
    if not _rebuildable(model):
        return ["float32"], f"the rule: {NOT_MEASURED}"
    return ["float32", "bfloat16"], ""


def _rebuildable(model: Any) -> bool:
    from .models import BUILTINS

    if not isinstance(model, str):
        return False
    if model in BUILTINS:
        return model != "picker"  # its targets are per sample: trained another way
    return model.endswith(".keras") and Path(model).is_file()


def probe_windows() -> int:
    """The fewest training windows (all epochs) a run must have to be worth measuring for."""
    override = os.environ.get(PROBE_WINDOWS_ENV)
    if override is not None and override.isdigit():
        return int(override)
    return int(PROBE_SECONDS / BUDGET_SHARE * ASSUMED_RATE)


def _decide(
    engines: list[str],
    precisions: list[str],
    engine_by: str,
    precision_by: str,
    entry: dict[str, Any],
    spec: dict[str, Any],
    *,
    cached: bool,
) -> Choice:
    rates: dict[str, float] = {str(k): float(v) for k, v in entry["windows_per_s"].items()}
    figures: dict[str, list[float]] = entry.get("validation") or {}
    where = "cached" if cached else f"measured now in {entry.get('seconds', 0):.0f} s"
    model = spec["model"] if not spec["model"].endswith(".keras") else Path(spec["model"]).name

    def precision_of(engine: str) -> tuple[str, str]:
        if len(precisions) == 1:
            return precisions[0], precision_by
        f32, b16 = rates[f"{engine}/float32"], rates[f"{engine}/bfloat16"]
        ratio = f"bfloat16 {b16 / f32:.2f}x float32 on {engine}"
        close = within_tolerance(
            figures.get(f"{engine}/float32", [0, 0]), figures.get(f"{engine}/bfloat16", [1e9, 0])
        )
        if b16 >= MARGIN * f32 and close:
            return "bfloat16", f"measured {ratio}, held-out figures within tolerance; {where}"
        if b16 >= MARGIN * f32:
            return "float32", f"measured {ratio}, but held-out figures off tolerance; {where}"
        return "float32", f"measured {ratio}; {where}"

    best = {e: precision_of(e) for e in engines}
    rate = {e: rates[f"{e}/{best[e][0]}"] for e in engines}
    if len(engines) == 1:
        engine = engines[0]
    else:
        other = next(e for e in engines if e != RULE_ENGINE)
        engine = other if rate[other] >= MARGIN * rate[RULE_ENGINE] else RULE_ENGINE
        loser = next(e for e in engines if e != engine)
        engine_by = (
            f"measured {rate[engine] / rate[loser]:.2f}x {loser} for {model} on this CPU; {where}"
            if rate[engine] >= rate[loser]
            else f"{loser} measured {rate[loser] / rate[engine]:.2f}x {engine} for {model} on this "
            f"CPU, under the {MARGIN}x it must reach; {where}"
        )
    return Choice(
        engine, best[engine][0], engine_by, best[engine][1], rates, figures or None, cached
    )


def _spec(model: str, opts: FitOptions, channels: int, classes: int) -> dict[str, Any]:
    from .models import unsafe_files_allowed

    return {
        "model": model,
        "window": opts.windows.window,
        "channels": channels,
        "classes": classes,
        "batch_size": opts.batch_size,
        "unsafe": unsafe_files_allowed(),
    }


def _cache_key(spec: dict[str, Any]) -> str:
    """What a measurement depends on: CPU, the cores this process may use, libraries, model and
    shapes."""
    import hashlib

    model = spec["model"]
    if model.endswith(".keras"):
        model = "keras:" + hashlib.sha256(Path(model).read_bytes()).hexdigest()[:16]
    libraries = ",".join(f"{n} {_version(n)}" for n in ("keras", "tensorflow", "jax", "jaxlib"))
    machine = f"{cpu_name()}|{usable_cores()}|{platform.machine()}|{libraries}"
    shapes = f"{spec['window']}x{spec['channels']}->{spec['classes']}|batch {spec['batch_size']}"
    return f"{machine}|{model}|{shapes}"


def _version(name: str) -> str:
    names = [name] + (["tensorflow-cpu", "tensorflow-macos"] if name == "tensorflow" else [])
    for each in names:
        try:
            return version(each)
        except PackageNotFoundError:
            continue
    return "-"


def cache_path() -> Path:
    """The file of this machine's engine measurements (chunkfit.train.steps.cache_dir)."""
    return cache_dir() / CACHE_FILE


def _read_cache() -> dict[str, Any]:
    return read_cache(cache_path())


def _write_cache(key: str, entry: dict[str, Any]) -> None:
    write_cache(cache_path(), key, entry)


def measure_now(model: str, window: int = 104, channels: int = 1, batch_size: int = 128) -> Any:
    """Measure both engines at both precisions for ``model`` now and cache it, for a later run of
    the same shapes (two classes) to find: ``python -m chunkfit.train.choice MODEL...``."""
    from ..config import FitOptions, WindowSpec
    from .choiceprobe import measure

    opts = FitOptions(windows=WindowSpec(window=window), batch_size=batch_size)
    spec = _spec(model, opts, channels, 2)
    keys = [f"{e}/{p}" for e in ("tensorflow", "jax") for p in ("float32", "bfloat16")]
    t0 = time.perf_counter()
    measured = measure(keys, spec, validate=True)
    if measured is not None:
        entry = {**measured, "seconds": round(time.perf_counter() - t0, 1)}
        _write_cache(_cache_key(spec), {**entry, "when": time.strftime("%Y-%m-%d %H:%M")})
        return {"model": model, "cpu": cpu_name(), "bf16": bf16_flags(), **entry}
    return {"model": model, "failed": True}


if __name__ == "__main__":
    for name in sys.argv[1:]:
        print(json.dumps(measure_now(name)), flush=True)
