"""Frozen configuration objects, validated once at construction.

Each round-trips through ``to_dict``/``from_dict`` so it can live in store attributes and run.json.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar, Literal, TypeVar

from .errors import SettingError, UsageError

T = TypeVar("T", bound="ConfigBase")

LabelRule = Literal["any-event", "last", "majority"]
NanPolicy = Literal["refuse", "keep", "interpolate"]
LABEL_RULES: tuple[str, ...] = ("any-event", "last", "majority")
NAN_POLICIES: tuple[str, ...] = ("refuse", "keep", "interpolate")
NORMALIZE_MODES: tuple[str, ...] = ("global", "window", "none")


class ConfigBase:
    """``to_dict``/``from_dict`` shared by chunkfit's frozen configuration dataclasses."""

    _tuple_fields: ClassVar[tuple[str, ...]] = ()

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)  # type: ignore[call-overload]
        for name in self._tuple_fields:
            if out[name] is not None:
                out[name] = list(out[name])
        return out

    @classmethod
    def from_dict(cls: type[T], data: dict[str, Any]) -> T:
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(data) - names)
        if unknown:
            raise UsageError(
                f"unknown {cls.__name__} field(s) {', '.join(unknown)} (known: "
                f"{', '.join(sorted(names))})"
            )
        kwargs = dict(data)
        for name in cls._tuple_fields:
            if kwargs.get(name) is not None:
                kwargs[name] = tuple(kwargs[name])
        return cls(**kwargs)


def _positive(flag: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SettingError(f"{flag} must be a positive integer (received {value!r})")


@dataclasses.dataclass(frozen=True)
class WindowSpec(ConfigBase):
    """How windows are cut from a signal and labelled.

    Window k of a segment [a, b) covers samples [a + k*stride, a + k*stride + window).
    """

    window: int = 104
    stride: int = 1
    label: str = "any-event"

    def __post_init__(self) -> None:
        _positive("--window", self.window)
        _positive("--stride", self.stride)
        if self.label not in LABEL_RULES:
            raise SettingError(
                f"--label must be one of {', '.join(LABEL_RULES)} (received {self.label!r})"
            )


@dataclasses.dataclass(frozen=True)
class SplitSpec(ConfigBase):
    """Validation hold-out: the last ``validation`` share of every segment, kept apart by a gap.

    The gap between the last training window and the first validation window is at least
    ``window`` samples, so no validation window shares a sample with a training window.

    With ``segments`` (a count of 1 or more, or a fraction in (0, 1)), whole segments (recordings)
    are held out instead, chosen by the run's seed, and ``validation`` is not used: a detector is
    then judged on recordings it never saw.
    """

    validation: float = 0.1
    segments: float | None = None

    def __post_init__(self) -> None:
        if not (0.0 <= self.validation < 1.0):
            raise SettingError(
                f"--validation must be a fraction in [0, 1) (received {self.validation})"
            )
        k = self.segments
        if k is not None and (
            isinstance(k, bool)
            or not isinstance(k, (int, float))
            or not (0 < k < 1 or (k >= 1 and float(k).is_integer()))
        ):
            raise UsageError(
                "--validation-segments must be a whole number of segments (1 or more) or a "
                f"fraction in (0, 1) (received {k!r})"
            )


@dataclasses.dataclass(frozen=True)
class BlockSpec(ConfigBase):
    """Blocks of ``chunk`` consecutive windows, visited in an order shuffled from (seed, epoch).

    ``mix`` blocks from distant parts of the signal are trained together (one fit call, their
    windows shuffled jointly), so a batch never comes from one stretch of the signal alone.
    """

    chunk: int = 200_000
    seed: int = 0
    shuffle_blocks: bool = True
    shuffle_windows: bool = True
    mix: int = 4

    def __post_init__(self) -> None:
        _positive("--chunk", self.chunk)
        _positive("--mix", self.mix)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise UsageError(f"--seed must be a non-negative integer (received {self.seed!r})")


@dataclasses.dataclass(frozen=True)
class IngestOptions(ConfigBase):
    """How sources are parsed into a store."""

    columns: tuple[str, ...] | None = None
    time_column: str | None = None
    rate: float | None = None
    label_column: str | None = None
    events: str | None = None
    nan: str = "refuse"
    delimiter: str | None = None
    header: bool | None = None
    names: tuple[str, ...] | None = None
    gap_factor: float = 1.5
    chunk_samples: int = 65_536
    codec: str = "lz4"
    block_bytes: int = 8 << 20
    # Recording formats: which annotations become events (WFDB: the annotator's file suffix, e.g.
    # "atr"; EDF+: a glob on the annotation text, e.g. "Seizure*"), WFDB beat symbols to keep, and
    # whether annotations become per-sample labels instead of event markers.
    annotations: str | None = None
    symbols: tuple[str, ...] | None = None
    label_from_annotations: bool = False
    commit_every: float | None = (
        # seconds between commits of a live stream; None: 1 s (zarr; 10 s on s3), at the end (HDF5)
        None
    )

    _tuple_fields: ClassVar[tuple[str, ...]] = ("columns", "names", "symbols")

    def __post_init__(self) -> None:
        if self.nan not in NAN_POLICIES:
            raise UsageError(
                f"--nan must be one of {', '.join(NAN_POLICIES)} (received {self.nan!r})"
            )
        if self.rate is not None and not (self.rate > 0 and self.rate < float("inf")):
            raise UsageError(f"--rate must be a positive number of Hz (received {self.rate})")
        if self.gap_factor <= 1.0:
            raise UsageError(f"gap factor must be above 1 (received {self.gap_factor})")
        if self.chunk_samples < 1:
            raise UsageError(
                f"--chunk-samples must be a positive integer (received {self.chunk_samples})"
            )
        if self.codec not in ("zstd", "lz4", "none"):
            raise UsageError(f"--codec must be zstd, lz4 or none (received {self.codec!r})")
        if self.delimiter is not None and len(self.delimiter) != 1:
            raise UsageError(
                f"--delimiter must be one character (received {self.delimiter!r}); use '\\t' for "
                "TSV"
            )
        if self.label_column is not None and self.events is not None:
            raise UsageError("give either --events or --label-column, not both")
        if self.symbols is not None and self.annotations is None:
            raise UsageError(
                "--symbols picks among annotations: give --annotations too (e.g. --annotations atr)"
            )
        if self.label_from_annotations and self.annotations is None:
            raise UsageError(
                "--label-from-annotations needs --annotations (e.g. --annotations atr)"
            )
        if self.label_from_annotations and (
            self.label_column is not None or self.events is not None
        ):
            raise UsageError(
                "give one source of labels: --label-from-annotations, --label-column or --events"
            )
        _check_seconds("--commit-every", self.commit_every)


def parse_class_weight(text: str) -> str | dict[int, float]:
    """``auto``/``balanced``/``none``, or ``"0:1,1:40"`` as {class value: weight}; refuses anything
    else (chunkfit.train.weights applies it)."""
    if text in ("auto", "balanced", "none"):
        return text
    out: dict[int, float] = {}
    try:
        for part in text.split(","):
            key, _, value = part.partition(":")
            weight = float(value)
            if not (weight >= 0 and math.isfinite(weight)):
                raise ValueError
            out[int(key)] = weight
    except ValueError:
        raise UsageError(
            "--class-weight must be auto, balanced, none or CLASS:WEIGHT pairs like 0:1,1:40 "
            f"(received {text!r})"
        ) from None
    return out


def check_rule(rule: str) -> str:
    """Refuse a ``--threshold-for`` that is not ``f1``, ``recall=R`` or ``precision=P`` (R, P in
    (0, 1]); chunkfit.core.threshold applies it."""
    kind, _, target = rule.partition("=")
    try:
        ok = rule == "f1" or (kind in ("recall", "precision") and 0.0 < float(target) <= 1.0)
    except ValueError:
        ok = False
    if not ok:
        raise UsageError(
            "--threshold-for must be f1, recall=R or precision=P with R, P in (0, 1] "
            f"(received {rule!r})"
        )
    return rule


def _check_seconds(flag: str, value: float | None) -> None:
    if value is not None and (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not 0 < value < float("inf")
    ):
        raise UsageError(
            f"{flag} must be a positive number of seconds, e.g. {flag} 1 (received {value!r})"
        )


@dataclasses.dataclass(frozen=True)
class FollowOptions(ConfigBase):
    """How ``predict --follow`` watches a growing store.

    It polls every ``poll`` seconds and ends when the store has not grown for ``idle`` seconds
    (or on Ctrl-C); a store that does not exist yet is waited for as long.
    """

    idle: float = 10.0
    poll: float = 0.1

    def __post_init__(self) -> None:
        _check_seconds("--idle", self.idle)
        _check_seconds("poll interval", self.poll)


@dataclasses.dataclass(frozen=True)
class FitOptions(ConfigBase):
    """Everything a training run was asked to do besides the model and the store.

    ``steps_per_execution`` is how many batches each compiled training call runs (chunkfit's
    ``Stepper``: one input element, that many train steps; None: as many as fit in
    ``ELEMENT_BYTES``, at most ``MAX_STEPS`` of chunkfit.train.tensorflow.pipeline). Like
    ``compute_threads`` it changes how fast, not what, is trained. ``memory_budget``
    (bytes), when set, replaces ``blocks.chunk`` by the largest chunk that fits.
    ``compute_threads`` is how many threads TensorFlow gives the model's arithmetic (0: all cores;
    None: measured on this machine for this model when the run is long enough or a measurement is
    cached, else a rule: chunkfit.train.tensorflow.threadtune); it does not change what is
    trained, so a run resumes under another setting. ``normalize`` is how windows are standardised
    before the model sees them (chunkfit.train.normalize); ``class_weight`` how training windows are
    weighted by class (chunkfit.train.weights); ``threshold_for`` how the run picks its decision
    threshold on the validation split (chunkfit.core.threshold). ``jit`` is whether the train
    step runs under XLA: on, off, or auto (timed on this machine at the start of the run,
    chunkfit.train.tensorflow.autotune); like ``compute_threads`` it changes how fast, not what,
    up to float rounding: off also keeps Keras's Adam update op for op
    (chunkfit.train.tensorflow.fused). ``jax_loop`` is how the JAX engine runs an element's batches:
    one compiled call each (dispatch), all in one compiled call (scan), or auto (timed at the start
    of the run, chunkfit.train.jax.loopchoice); it too changes how fast, not what.
    """

    windows: WindowSpec = WindowSpec()
    split: SplitSpec = SplitSpec()
    blocks: BlockSpec = BlockSpec()
    batch_size: int = 128
    epochs: int = 1
    deterministic: bool = False
    memory_budget: int | None = None
    steps_per_execution: int | None = None
    compute_threads: int | None = None
    prefetch: bool = True
    optimizer: str | None = None
    lr: float | None = None
    loss: str | None = None
    normalize: str = "global"
    class_weight: str = "auto"
    threshold_for: str = "f1"
    jit: str = "auto"
    jax_loop: str = "auto"
    pick_width: int | None = None  # the dense picker's target width (chunkfit.core.picks)

    _nested: ClassVar[dict[str, type[ConfigBase]]] = {
        "windows": WindowSpec,
        "split": SplitSpec,
        "blocks": BlockSpec,
    }

    def __post_init__(self) -> None:
        _positive("--batch-size", self.batch_size)
        if self.steps_per_execution is not None:
            _positive("--steps-per-execution", self.steps_per_execution)
        if self.compute_threads is not None and (
            isinstance(self.compute_threads, bool)
            or not isinstance(self.compute_threads, int)
            or self.compute_threads < 0
        ):
            raise UsageError(
                "--compute-threads must be 0 (all cores) or a positive integer (received "
                f"{self.compute_threads!r})"
            )
        if isinstance(self.epochs, bool) or not isinstance(self.epochs, int) or self.epochs < 0:
            raise UsageError(f"--epochs must be a non-negative integer (received {self.epochs!r})")
        if self.memory_budget is None and self.blocks.chunk < self.batch_size:
            raise SettingError(
                f"chunk must be at least the batch size (received chunk={self.blocks.chunk}, "
                f"batch_size={self.batch_size}); raise --chunk or lower --batch-size"
            )
        if self.memory_budget is not None and self.memory_budget < 1:
            raise UsageError(f"--memory-budget must be positive (received {self.memory_budget})")
        if self.lr is not None and not (0 < self.lr < float("inf")):
            raise UsageError(f"--lr must be a positive number (received {self.lr})")
        parse_class_weight(self.class_weight)
        check_rule(self.threshold_for)
        if self.jit not in ("auto", "on", "off"):
            raise UsageError(f"--jit must be auto, on or off (received {self.jit!r})")
        if self.jit == "on" and self.deterministic:
            # e.g. "GPU MaxPool gradient ops do not yet have a deterministic XLA implementation"
            raise UsageError(
                "--jit on cannot be combined with --deterministic: XLA has no deterministic form "
                "of some ops (MaxPooling's gradient); drop one of them"
            )
        if self.pick_width is not None:
            _positive("--pick-width", self.pick_width)
        if self.jax_loop not in ("auto", "dispatch", "scan"):
            raise UsageError(
                f"--jax-loop must be auto, dispatch or scan (received {self.jax_loop!r})"
            )
        if self.jax_loop == "scan" and self.deterministic:
            raise UsageError(
                "--jax-loop scan cannot be combined with --deterministic: deterministic runs "
                "dispatch one "
                "call per batch, so that a resumed run is bit-identical; drop one of them"
            )
        if self.normalize not in NORMALIZE_MODES:
            raise UsageError(
                f"--normalize must be one of {', '.join(NORMALIZE_MODES)} (received "
                f"{self.normalize!r})"
            )

    @classmethod
    def from_keywords(
        cls,
        *,
        window: int = WindowSpec.window,
        stride: int = WindowSpec.stride,
        label: str = WindowSpec.label,
        validation: float = SplitSpec.validation,
        validation_segments: float | None = SplitSpec.segments,
        chunk: int = BlockSpec.chunk,
        seed: int = BlockSpec.seed,
        mix: int = BlockSpec.mix,
        **fields: Any,
    ) -> FitOptions:
        """FitOptions from the flat keywords ``chunkfit.fit`` and ``chunkfit train`` take: window,
        stride and label (``windows``), validation and validation_segments (``split``), chunk, seed
        and mix (``blocks``); ``fields`` are FitOptions' own (batch_size, epochs, ...)."""
        return cls(
            windows=WindowSpec(window=window, stride=stride, label=label),
            split=SplitSpec(validation=validation, segments=validation_segments),
            blocks=BlockSpec(chunk=chunk, seed=seed, mix=mix),
            **fields,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FitOptions:
        kwargs = dict(data)
        for name, kind in cls._nested.items():
            if isinstance(kwargs.get(name), dict):
                kwargs[name] = kind.from_dict(kwargs[name])
        return super().from_dict(kwargs)
