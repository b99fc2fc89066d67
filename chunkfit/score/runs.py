"""A trained run as evaluate and predict see it: its model, window settings, classes and labels.

A run is a run folder (model.keras + run.json, whose window, stride, label rule and classes are
reused), a bare ``.keras`` file (window and channels from its input shape, stride 1), or a model
``chunkfit export`` wrote, whose sidecar carries the run's run.json (chunkfit.score.sidecar).
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .._fs import refuse_url
from ..config import WindowSpec, is_event_rule
from ..core.labels import Labeller, positive_index
from ..core.windows import count_windows
from ..errors import IncompatibleError, ModelError, RunError, UsageError, WindowError
from ..store import Store
from ..store.remote import Remote, fetch_files
from ..store.s3errors import guarded
from ..store.urls import is_remote
from ..train.models import BUILTINS, check_model_file, factory_objects, load_model_file
from ..train.runfolder import MODEL_FILE, RUN_FILE
from .channels import ChannelMap, ChannelsArg, channel_map, parse_channels
from .order import refuse_store_as_run
from .scorer import use_scoring_engine
from .sidecar import exported_kind, read_sidecar, run_meta, sidecar_path

if TYPE_CHECKING:
    import keras


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """How a trained model cuts and labels windows."""

    source: str
    windows: WindowSpec
    classes: list[int]
    channels: list[str] | None
    n_channels: int
    config: dict[str, Any]
    loaded: str  # how the model was loaded, for reports
    meta: dict[str, Any] = dataclasses.field(
        default_factory=dict
    )  # run.json ({} for a bare .keras file)

    @property
    def positive(self) -> int:
        """Index of the class scored as "event": class 1 for event/no event, else the last class."""
        return positive_index(len(self.classes))


@dataclasses.dataclass(frozen=True)
class RunFiles:
    """What a run folder or ``.keras`` file holds before the model is loaded (no TensorFlow
    needed)."""

    path: Path
    model: Path
    windows: dict[str, Any]
    config: dict[str, Any]
    classes: list[int] | None
    channels: list[str] | None
    model_spec: str | None = None  # what run.json says the run trained (--model)
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)
    sidecar: dict[str, Any] | None = None  # an exported model's metadata (chunkfit export)


def locate_run(run: str | os.PathLike[str], *, unsafe: bool = False) -> RunFiles:
    """Find and check a run's model file and run.json cheaply, so a wrong path fails in a blink.

    An ``s3://`` run folder's model.keras and run.json are downloaded once per process
    (``fetch_run``).
    """
    refuse_url(run, "runs", s3=True)
    if is_remote(run):
        run = fetch_run(str(run))
    path = Path(run)
    refuse_store_as_run(path)
    sidecar = None
    if exported_kind(path) is not None:
        sidecar = read_sidecar(path)
        model_path, meta = path, run_meta(sidecar)
        config, classes, channels, model_spec = _meta_parts(meta, sidecar_path(path))
    elif path.is_dir():
        model_path, meta_path = path / MODEL_FILE, path / RUN_FILE
        if not model_path.is_file():
            raise RunError(
                f"{path}: the run folder has no {MODEL_FILE} (training did not finish?); pass a "
                "finished run"
            )
        meta = _read_meta(meta_path) if meta_path.is_file() else {}
        config, classes, channels, model_spec = _meta_parts(meta, meta_path)
    elif path.suffix == ".keras" or path.is_file():
        if not path.exists():
            raise RunError(f"{path}: no such run folder or .keras file")
        model_path, config, classes, channels, model_spec, meta = path, {}, None, None, None, {}
    else:
        raise RunError(f"{path}: no such run folder or .keras file")
    if sidecar is None:
        check_model_file(model_path, unsafe=unsafe)
    windows = config.get("windows", {})
    if not isinstance(windows, dict):
        raise RunError(
            f"{path / RUN_FILE}: not a valid run.json (config.windows is not an object); pass the "
            ".keras file instead"
        )
    return RunFiles(
        path, model_path, dict(windows), config, classes, channels, model_spec, meta, sidecar
    )


@functools.cache
def fetch_run(url: str) -> Path:
    """A local copy of an ``s3://`` run folder's model.keras and run.json (removed when the process
    ends)."""
    remote = Remote(url)
    folder = Path(tempfile.mkdtemp(prefix="chunkfit-run-"))
    atexit.register(shutil.rmtree, folder, True)
    local = folder / remote.url.name
    got = guarded(
        remote.url,
        "nothing was written",
        lambda: fetch_files(remote, [MODEL_FILE, RUN_FILE], local),
    )
    if MODEL_FILE not in got:
        raise RunError(
            f"{url}: the run folder has no {MODEL_FILE} (training did not finish?); pass a "
            "finished run"
        )
    return local


def _read_meta(meta_path: Path) -> dict[str, Any]:
    try:
        meta = json.loads(meta_path.read_text())
    except (ValueError, UnicodeDecodeError) as err:
        raise RunError(
            f"{meta_path}: not a valid run.json ({err}); pass the .keras file instead"
        ) from None
    if not isinstance(meta, dict):
        raise RunError(
            f"{meta_path}: not a valid run.json (not an object); pass the .keras file instead"
        )
    return meta


def _meta_parts(
    meta: dict[str, Any], meta_path: Path
) -> tuple[dict[str, Any], list[int] | None, list[str] | None, str | None]:
    bad = f"{meta_path}: not a valid run.json"
    try:
        config = meta.get("config", {})
        classes = [int(c) for c in meta.get("classes", [])] or None
        channels = meta.get("store", {}).get("identity", {}).get("channels")
        model_spec = meta.get("model")
    except (ValueError, AttributeError, TypeError, UnicodeDecodeError) as err:
        raise RunError(f"{bad} ({err}); pass the .keras file instead") from None
    if not isinstance(config, dict):
        raise RunError(f"{bad} (config is not an object); pass the .keras file instead")
    if channels is not None and (
        not isinstance(channels, list) or not all(isinstance(c, str) for c in channels)
    ):
        raise RunError(
            f"{bad} (store channels are not a list of names); pass the .keras file instead"
        )
    if model_spec is not None and not isinstance(model_spec, str):
        raise RunError(f"{bad} (model is not a name); pass the .keras file instead")
    return config, classes, channels, model_spec


def load_run(run: str | os.PathLike[str], *, unsafe: bool = False) -> tuple[keras.Model, RunSpec]:
    """The model and window settings of a run folder or ``.keras`` file (an exported model is
    scored in its own runtime: chunkfit.score.exported)."""
    files = locate_run(run, unsafe=unsafe)
    if files.sidecar is not None:
        raise UsageError(
            f"{files.path}: an exported model, and this takes the run folder or .keras file it "
            "was exported from"
        )
    use_scoring_engine()  # before Keras loads
    # Scoring needs no loss or optimizer: loaded uncompiled, a run with a custom loss loads too. A
    # module:function model's custom layers and functions come from its module, imported as train
    # did.
    custom, loaded = None, "uncompiled (the loss reported is the cross-entropy of the scores)"
    if (
        files.model_spec is not None
        and ":" in files.model_spec
        and files.model_spec not in BUILTINS
    ):
        custom = factory_objects(files.model_spec)
        loaded = (
            f"uncompiled, with the custom objects of {files.model_spec.partition(':')[0]} "
            "(imported: your "
            "own code, as train ran it; the loss reported is the cross-entropy of the scores)"
        )
    model = load_model_file(files.model, unsafe=unsafe, compile=False, custom_objects=custom)
    shape = tuple(model.inputs[0].shape[1:]) if getattr(model, "inputs", None) else ()
    out = tuple(model.outputs[0].shape)
    return model, run_spec(files, shape, int(out[-1]), len(out) == 3, loaded)


def run_spec(
    files: RunFiles, shape: tuple[Any, ...], n_out: int, per_sample: bool, loaded: str
) -> RunSpec:
    """The RunSpec of a run whose model takes windows shaped ``shape`` (window, channels) and gives
    ``n_out`` outputs (per sample, for a dense picker), checked against its run.json."""
    path, classes = files.path, files.classes
    if len(shape) != 2 or shape[0] is None or shape[1] is None:
        raise ModelError(f"{path}: the model's input shape {shape} is not (window, channels)")
    wcfg = dict(files.windows)
    wcfg.setdefault("window", int(shape[0]))
    try:
        windows = WindowSpec.from_dict(wcfg)
    except (UsageError, WindowError, TypeError) as err:
        raise RunError(
            f"{path / RUN_FILE}: not a valid run.json ({err}); pass the .keras file instead"
        ) from None
    if classes is None:
        classes = [0, 1] if per_sample else list(range(n_out))
    if windows.window != shape[0] or (len(classes) != n_out and not per_sample):
        raise ModelError(
            f"{path}: run.json describes windows of {windows.window} samples and {len(classes)} "
            "classes, but the "
            f"model takes {shape[0]} samples and gives {n_out} outputs; the run folder is "
            "inconsistent"
        )
    return RunSpec(
        str(path), windows, classes, files.channels, int(shape[1]), files.config, loaded, files.meta
    )


SPLITS = ("validation", "train", "all")


def scored_ranges(spec: RunSpec, store: Store, split: str | None) -> tuple[np.ndarray, str]:
    """The ranges of ``store`` to score, and what they are, in words.

    On the store the run was trained on, the default is the run's validation split (windows it never
    trained on); on another store, all of it. ``split`` "validation" or "train" names one part of
    the training store's split, "all" every segment.
    """
    if split is not None and split not in SPLITS:
        raise UsageError(f"--split must be one of {', '.join(SPLITS)} (received {split!r})")
    identity = (
        spec.meta.get("store", {}).get("identity")
        if isinstance(spec.meta.get("store"), dict)
        else None
    )
    trained_on = identity is not None and identity == json.loads(json.dumps(store.identity))
    parts = spec.meta.get("split", {}) if isinstance(spec.meta.get("split"), dict) else {}
    held = np.asarray(parts.get("validation_ranges", []), dtype=np.int64).reshape(-1, 2)
    if split is None:
        split = (
            "validation" if trained_on and int(parts.get("validation_windows", 0)) > 0 else "all"
        )
    if split == "all":
        what = "the run's training store" if trained_on else "a store the run was not trained on"
        return store.segments, f"all of {store.path} ({what})"
    if not trained_on:
        raise UsageError(
            f"{store.path}: --split {split} names part of the run's training store, and this is "
            "another store; leave out --split to score all of it"
        )
    ranges = (
        held
        if split == "validation"
        else np.asarray(parts.get("train_ranges", []), dtype=np.int64).reshape(-1, 2)
    )
    ranges = ranges[ranges[:, 1] > ranges[:, 0]]
    w = spec.windows
    if not any(count_windows(int(b - a), w.window, w.stride) for a, b in ranges):
        raise WindowError(
            f"{store.path}: the run's {split} split holds no window; pass --split all"
        )
    what = (
        "windows the run never trained on"
        if split == "validation"
        else "windows the run trained on, so the figures flatter it"
    )
    return ranges, f"{split} split of {store.path} ({what})"


def run_threshold(spec: RunSpec, given: float | None) -> tuple[float, str]:
    """The decision threshold to use and where it came from: ``given``, the run's chosen one, or
    0.5."""
    if given is not None:
        return given, "--threshold"
    chosen = spec.meta.get("threshold")
    if isinstance(chosen, dict) and isinstance(chosen.get("value"), (int, float)):
        return float(
            chosen["value"]
        ), f"chosen on the run's validation split ({chosen.get('rule', 'f1')})"
    return 0.5, "the default: the run chose none"


def check_settings(
    *, threshold: float | None, chunk: int, batch_size: int, channels: ChannelsArg | None = None
) -> None:
    """Refuse scoring settings that cannot work, before anything is loaded."""
    if channels is not None:
        parse_channels(channels)
    if threshold is not None and not 0.0 <= threshold <= 1.0:
        raise UsageError(f"--threshold must be in [0, 1] (received {threshold})")
    for name, value in (("--chunk", chunk), ("--batch-size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UsageError(f"{name} must be a positive integer (received {value!r})")


def check_output_folder(path: Path, flag: str | None = None) -> None:
    """Refuse an output file whose folder is missing or read-only, before any work is done.

    ``flag`` names the option that picks the path, for the hint.
    """
    hint = f"; pass {flag} with a path in another folder" if flag is not None else ""
    if path.is_dir() and not str(path).rstrip("/").lower().endswith(".zarr"):
        raise RunError(f"{path}: is a directory; {flag or 'the output'} takes a file name")
    if not path.parent.is_dir():
        raise RunError(f"{path.parent}: the output folder does not exist{hint}")
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise RunError(f"{path.parent}: the output folder is not writable{hint}")


def score_attrs(
    run: str | os.PathLike[str], spec: RunSpec, threshold: float, store: Store
) -> dict[str, Any]:
    """The attributes of a scores array: which run scored which store, how, at what threshold."""
    w = spec.windows
    return {
        "run": str(run),
        "window": w.window,
        "stride": w.stride,
        "class": spec.classes[spec.positive],
        "threshold": threshold,
        "store": str(store.path),
    }


def check_channels(
    run: str | os.PathLike[str], store: Store, channels: ChannelsArg | None, *, unsafe: bool
) -> None:
    """Refuse a store whose channels the run cannot map, from run.json alone: before TensorFlow
    loads (``check_store`` checks again with the loaded model)."""
    files = locate_run(run, unsafe=unsafe)
    if files.channels is not None:
        channel_map(
            files.channels, len(files.channels), store.channels, channels, where=str(store.path)
        )


def check_store(spec: RunSpec, store: Store, channels: ChannelsArg | None = None) -> ChannelMap:
    """Refuse a store the run's model cannot read; the store's columns that feed the model."""
    cmap = channel_map(
        spec.channels, spec.n_channels, store.channels, channels, where=str(store.path)
    )
    if len(cmap.order) != spec.n_channels:
        raise IncompatibleError(
            f"{store.path}: {store.n_channels} channel(s), but the model takes {spec.n_channels}"
        )
    w = spec.windows
    if not store.n_samples:
        raise WindowError(
            f"{store.path}: the store holds no samples, so there is no window to score"
        )
    if not any(count_windows(int(b - a), w.window, w.stride) for a, b in store.segments):
        longest = (
            int((store.segments[:, 1] - store.segments[:, 0]).max()) if store.segments.size else 0
        )
        raise WindowError(
            f"{store.path}: window {w.window} is longer than every segment (longest {longest} "
            "samples); no window fits"
        )
    return cmap


class RunLabeller(Labeller):
    """The trainer's labels for a store, as class indices of the run's model.

    The trainer numbers the classes found in the training store; a store being evaluated may hold
    only some of them (or one), so its labels are numbered by the run's classes instead, and a
    class the run never saw is refused. (``Labeller.__init__`` is not called: it wants two classes
    in the store, which training needs and evaluation does not.)
    """

    def __init__(self, store: Store, spec: RunSpec) -> None:
        rule = spec.windows.label
        later = "; evaluate needs a labelled store (chunkfit predict scores one without labels)"
        if is_event_rule(rule) and not store.has_events:
            raise WindowError(
                f"{store.path}: the run labels windows by event markers, but the store has "
                f"none{later}"
            )
        if not is_event_rule(rule):
            if not store.has_labels:
                raise WindowError(
                    f"{store.path}: the run labels windows by per-sample labels ({rule}), but the "
                    f"store has none{later}"
                )
            unknown = sorted(set(store.label_classes) - set(spec.classes))
            if unknown:
                raise IncompatibleError(
                    f"{store.path}: label class(es) {unknown} are not among the run's classes "
                    f"{spec.classes}; "
                    "evaluate on a store labelled with the training store's classes"
                )
        self.store, self.rule, self.classes = store, rule, list(spec.classes)
        self.margin = spec.windows.margin
