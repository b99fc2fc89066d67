"""``chunkfit export``: a run's model written in a device format, its metadata beside it.

The model exported is the run's ``model.keras`` as it is: its normalisation layer inside (raw
signal in, class scores out), its input fixed to one window ``[batch, window, channels]``. It is
converted on Keras's TensorFlow backend whatever engine trained it: a ``.keras`` file holds weights
and architecture, not a backend, so a run trained on JAX loads on TensorFlow (LiteRT export refuses
the JAX backend).

Nothing half-written is left at ``--out``: the artifact and its sidecar are written into a
temporary sibling and renamed into place at the end, the sidecar last (a sidecar means a complete
export). ``--overwrite`` replaces only an earlier export: never the run folder, nor a folder that
is not a SavedModel.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._fs import refuse_url
from ..errors import DiskFullError, IncompatibleError, RunError, StoreExistsError, UsageError
from ..score.runs import RunSpec, check_output_folder, load_run, locate_run, run_threshold
from ..score.sidecar import SAVED_MODEL_SIDECAR
from ..store import open_store
from ..store.urls import is_remote
from ..train.runfolder import DISK_FULL, RUN_FILE
from .carray import c_name, c_source
from .formats import Target, check_extra, check_out, target
from .meta import RunFacts, TensorInfo, sidecar, write_sidecar
from .quantize import Representative, representative

_INT_MAX = {"int8": 127, "uint8": 255, "int16": 32767}  # an integer output's highest value

if TYPE_CHECKING:
    import keras


@dataclasses.dataclass(frozen=True)
class ExportReport:
    """What ``export_run`` wrote."""

    path: Path
    sidecar: Path
    format: str
    quantize: str | None
    bytes: int
    model: str
    trained_on: str
    input: TensorInfo
    output: TensorInfo
    calibration: Representative | None = None
    threshold_note: str | None = None  # the run's threshold lowered to one the output can reach

    @property
    def converted_on(self) -> str:
        return "tensorflow"


def export_run(
    run: str | os.PathLike[str],
    fmt: str = "litert",
    *,
    out: str | os.PathLike[str] | None = None,
    quantize: str | None = None,
    store: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    unsafe: bool = False,
) -> ExportReport:
    """Export the model of the run folder ``run`` as ``fmt`` (litert, onnx, saved_model,
    c-array) to ``out`` [default: in the run folder], with its metadata sidecar.

    ``quantize`` "int8" calibrates on windows of the run's training split, read from ``store``
    [default: the store run.json names]; "float16" halves LiteRT's weights.
    """
    tgt = target(fmt, quantize)
    if store is not None and tgt.quantize != "int8":
        raise UsageError(
            "--store gives the windows --quantize int8 calibrates on; drop --store, or add "
            "--quantize int8"
        )
    check_extra(tgt.format)
    run_dir = _run_folder(run, out, unsafe)
    out_path = Path(out) if out is not None else run_dir / tgt.default_name
    if out is not None:
        refuse_url(out, "--out")
        check_out(tgt, out_path)
    if out_path.name in ("", ".."):  # "." or "..": named, so a sibling can be made and renamed
        out_path = out_path.resolve()
    _claim(out_path, tgt, overwrite, run_dir)
    training = _training_store(run_dir, store) if tgt.quantize == "int8" else None
    locate_run(run, unsafe=unsafe)  # model.keras there, and safe to load
    use_tensorflow()
    model, spec = load_run(run, unsafe=unsafe)
    facts = run_facts(model, spec)
    calibration = calibrate(training, spec, facts) if training is not None else None
    tmp = out_path.parent / f".{out_path.name}.chunkfit-tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)  # left by a killed export of this process id
    with disk_full(out_path), contextlib.ExitStack() as cleanup:
        cleanup.callback(shutil.rmtree, tmp, ignore_errors=True)
        tmp.mkdir()
        artifact = tmp if tgt.folder else tmp / out_path.name
        inputs, output = _convert(model, tgt, artifact, calibration)
        facts, threshold_note = reachable_threshold(facts, output)
        meta = sidecar(
            facts,
            fmt=tgt.format,
            file=out_path.name,
            quantize=tgt.quantize,
            inputs=inputs,
            output=output,
        )
        if tgt.format == "c-array":
            _as_c_array(artifact, meta)
        write_sidecar(tgt.sidecar(artifact), meta)
        _publish(tmp, artifact, out_path, tgt)
    size = (
        sum(p.stat().st_size for p in out_path.rglob("*") if p.is_file())
        if tgt.folder
        else out_path.stat().st_size
    )
    return ExportReport(
        out_path,
        tgt.sidecar(out_path),
        tgt.format,
        tgt.quantize,
        size,
        facts.model,
        facts.trained_on,
        inputs,
        output,
        calibration,
        threshold_note,
    )


def calibrate(training: str | os.PathLike[str], spec: RunSpec, facts: RunFacts) -> Representative:
    """The int8 calibration windows of the run, from its training store. Event windows are found
    by the run's event class (``spec.positive``), not ``facts.positive``: a picker's event score
    is index 0 of its output, and class 0 is the quiet one."""
    with open_store(training) as s:
        return representative(
            s, spec.meta, window=facts.window, stride=facts.stride, positive=spec.positive
        )


@contextlib.contextmanager
def disk_full(out: Path) -> Iterator[None]:
    """A full disk or a file-size limit met while writing the export, as one line."""
    try:
        yield
    except OSError as err:
        if err.errno not in DISK_FULL:
            raise
        reason = err.strerror or errno.errorcode.get(err.errno or 0, str(err))
        raise DiskFullError(
            f"{out}: disk full ({reason}); nothing was written; free some space and export again"
        ) from None


def reachable_threshold(facts: RunFacts, output: TensorInfo) -> tuple[RunFacts, str | None]:
    """The run's threshold, or, where an integer output cannot reach it, the highest one it can:
    an int8 score stops at scale x (127 - zero point) (255/256 for a softmax), and a run whose float
    model chose 0.999 would otherwise never fire on the device. The written threshold lies halfway
    between the two highest scores, so windows at the top score fire; the note says so."""
    if output.scale is None or output.zero_point is None or output.dtype not in _INT_MAX:
        return facts, None
    top = output.scale * (_INT_MAX[output.dtype] - output.zero_point)
    if facts.threshold <= top:
        return facts, None
    written = top - output.scale / 2
    note = (
        f"the run's threshold {facts.threshold:.6g} is above {top:.6g}, the highest score the "
        f"{output.dtype} output gives: written as {written:.6g} (windows at the top score fire)"
    )
    return dataclasses.replace(facts, threshold=written), note


def use_tensorflow() -> None:
    """Make Keras load on TensorFlow in this process, where every converter runs."""
    if "keras" not in sys.modules:
        os.environ["KERAS_BACKEND"] = "tensorflow"
        return
    running = str(sys.modules["keras"].backend.backend())
    if running != "tensorflow":
        raise UsageError(
            f"export converts on TensorFlow, and Keras already runs on {running} in this "
            "process; export in a process started with KERAS_BACKEND=tensorflow"
        )


def run_facts(model: keras.Model, spec: RunSpec) -> RunFacts:
    """The sidecar's facts of a loaded run."""
    meta = spec.meta
    identity = (
        meta.get("store", {}).get("identity", {}) if isinstance(meta.get("store"), dict) else {}
    )
    rate = identity.get("sample_rate") if isinstance(identity, dict) else None
    w = spec.windows
    per_sample = len(model.outputs[0].shape) == 3
    # a picker gives one event score per sample, [batch, window, 1]: its index on the last axis
    positive = (
        min(spec.positive, int(model.outputs[0].shape[-1]) - 1) if per_sample else spec.positive
    )
    return RunFacts(
        model=str(meta.get("model", "model.keras")),
        trained_on=str(meta.get("engine", "tensorflow")),
        window=w.window,
        stride=w.stride,
        channels=list(spec.channels) if spec.channels is not None else [],
        n_channels=spec.n_channels,
        rate=float(rate) if isinstance(rate, (int, float)) else None,
        classes=list(spec.classes),
        positive=positive,
        threshold=run_threshold(spec, None)[0],
        label=str(spec.config.get("windows", {}).get("label", w.label)),
        output_kind="per-sample" if per_sample else "window",
        run=meta,
    )


def _run_folder(run: str | os.PathLike[str], out: object, unsafe: bool) -> Path:
    """The run folder ``run`` names (a local copy for ``s3://``), refused when it is not one."""
    if is_remote(run):
        if out is None:
            raise UsageError(
                f"{run}: an s3:// run folder is not written by export; pass --out PATH"
            )
        return locate_run(run, unsafe=unsafe).path
    path = Path(run)
    if path.is_file() and path.suffix == ".keras":
        raise UsageError(
            f"{run}: export takes a run folder (its run.json holds the window, classes and "
            "threshold written beside the model); pass the folder chunkfit train wrote"
        )
    if not (path.is_dir() and (path / RUN_FILE).is_file()):
        raise UsageError(
            f"{run}: not a run folder (no {RUN_FILE}); pass the folder chunkfit train --out wrote"
        )
    return path


def _claim(out: Path, tgt: Target, overwrite: bool, run_dir: Path) -> None:
    """Refuse an ``--out`` that exists (without ``overwrite``), that ``overwrite`` must not
    replace (the run folder, a folder holding it, a folder that is no SavedModel export), or that
    cannot be written."""
    real, run_real = out.resolve(), run_dir.resolve()
    if real == run_real or real in run_real.parents:
        raise UsageError(f"{out}: is the run folder or holds it; pick another --out")
    if out.exists() and not overwrite:
        raise StoreExistsError(f"{out}: already exists; pass --overwrite to replace it")
    if tgt.folder and out.is_dir() and not is_saved_model(out):
        raise StoreExistsError(
            f"{out}: a folder that is not a SavedModel export; pick another --out"
        )
    if out.is_dir() and not tgt.folder:
        raise RunError(f"{out}: is a directory; --out takes a file name for {tgt.format}")
    if out.exists() and tgt.folder and not out.is_dir():
        raise RunError(f"{out}: is a file; --out takes a folder name for a SavedModel")
    if tgt.folder:
        if not out.parent.is_dir() or not os.access(out.parent, os.W_OK | os.X_OK):
            raise RunError(f"{out.parent}: the output folder does not exist or is not writable")
    else:
        check_output_folder(out, "--out")


def _training_store(run_dir: Path, store: str | os.PathLike[str] | None) -> str | os.PathLike[str]:
    """The store int8 calibrates on: ``store``, else the one run.json names; refused when it is
    missing or is not the store the run trained on (checked before the model loads)."""
    try:
        meta = json.loads((run_dir / RUN_FILE).read_text())
    except (OSError, ValueError, UnicodeDecodeError) as err:
        raise RunError(f"{run_dir / RUN_FILE}: not a readable run.json ({err})") from None
    stored = meta.get("store") if isinstance(meta, dict) else None
    recorded = stored if isinstance(stored, dict) else {}
    path = store if store is not None else recorded.get("path")
    if path is None or (store is None and not is_remote(path) and not Path(path).exists()):
        raise UsageError(
            "--quantize int8 calibrates on the run's training windows, and the store run.json "
            f"names ({path}) is not there; pass --store with the store {run_dir} trained on"
        )
    with open_store(path) as s:
        same = json.loads(json.dumps(s.identity)) == recorded.get("identity")
        if recorded.get("identity") is not None and not same:
            raise IncompatibleError(
                f"{path}: not the store the run trained on (its samples, channels, rate or "
                "sources differ); pass --store with the training store"
            )
    return path


def _convert(
    model: keras.Model, tgt: Target, artifact: Path, calibration: Representative | None
) -> tuple[TensorInfo, TensorInfo]:
    if tgt.format == "onnx":
        from .onnxfile import write_onnx

        return write_onnx(model, artifact)
    if tgt.format == "saved_model":
        from .savedmodel import write_saved_model

        return write_saved_model(model, artifact)
    from .litert import write_litert

    flatbuffer = artifact.with_suffix(".tflite")
    return write_litert(
        model,
        flatbuffer,
        fmt=tgt.format,
        quantize=tgt.quantize,
        representative=calibration.batches if calibration is not None else None,
        batch=1 if tgt.format == "c-array" else None,
    )


def _as_c_array(artifact: Path, meta: dict[str, Any]) -> None:
    """The flatbuffer written beside ``artifact`` as its C source."""
    flatbuffer = artifact.with_suffix(".tflite")
    data = flatbuffer.read_bytes()
    artifact.write_text(c_source(data, c_name(artifact.name), meta))
    flatbuffer.unlink()


def is_saved_model(folder: Path) -> bool:
    """Whether ``folder`` is a SavedModel export (what ``--overwrite`` may replace)."""
    return (folder / "saved_model.pb").is_file() or (folder / SAVED_MODEL_SIDECAR).is_file()


def _publish(tmp: Path, artifact: Path, out: Path, tgt: Target) -> None:
    """The finished export renamed into place: the artifact, then its sidecar. An earlier
    SavedModel folder is moved aside first and moved back if the new one cannot take its place."""
    if tgt.folder:
        old = tmp.with_name(tmp.name + "-old")
        shutil.rmtree(old, ignore_errors=True)  # left by a killed export: the rename needs it gone
        if out.exists():
            out.rename(old)
        try:
            tmp.rename(out)
        except OSError:
            if old.exists() and not out.exists():
                old.rename(out)
            raise
        shutil.rmtree(old, ignore_errors=True)
        return
    side = tgt.sidecar(out)
    if side.exists():
        side.unlink()  # never an old sidecar beside a new file
    os.replace(artifact, out)
    os.replace(tgt.sidecar(artifact), side)
