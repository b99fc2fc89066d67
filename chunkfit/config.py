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
# Event-marker rules for online detectors: a marker within the last K samples of the window, or at
# offsets [A, B) of it (chunkfit.config.event_span).
ONLINE_RULES: tuple[str, ...] = ("event-last=K", "event-in=A:B")
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
    ``margin`` (``--label-margin``) leaves out the windows whose event marker lies within that many
    samples of the edges of the span the rule looks at (chunkfit.core.windows.span_labels).
    """

    window: int = 104
    stride: int = 1
    label: str = "any-event"
    margin: int = 0

    def __post_init__(self) -> None:
        _positive("--window", self.window)
        _positive("--stride", self.stride)
        span = event_span(self.label, self.window)
        if isinstance(self.margin, bool) or not isinstance(self.margin, int) or self.margin < 0:
            raise UsageError(
                f"--label-margin must be a non-negative number of samples (received "
                f"{self.margin!r})"
            )
        if self.margin and span is None:
            raise UsageError(
                f"--label-margin applies to event markers (--label any-event, event-last=K, "
                f"event-in=A:B), not to --label {self.label}; drop --label-margin"
            )
        if span is not None and span[1] - span[0] <= 2 * self.margin:
            raise UsageError(
                f"--label-margin {self.margin} leaves no sample where a marker makes a window "
                f"positive: the rule {self.label} looks at {span[1] - span[0]} samples of a "
                f"window of {self.window}, and the margin takes {self.margin} at each edge; use a "
                "smaller --label-margin"
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


def parse_class_weight(text: str) -> str | float | dict[int, float]:
    """``auto``/``balanced``/``none``; ``balanced:max=M`` as the cap M (balanced weights, none above
    M); or ``"0:1,1:40"`` as {class value: weight}. Refuses anything else (chunkfit.train.weights
    applies it)."""
    if text in ("auto", "balanced", "none"):
        return text
    how = (
        "--class-weight must be auto, balanced, none or CLASS:WEIGHT pairs like 0:1,1:40, or "
        f"balanced:max=M to cap the weights at M >= 1 (received {text!r})"
    )
    if text.startswith("balanced:max="):
        try:
            cap = float(text.removeprefix("balanced:max="))
        except ValueError:
            raise UsageError(how) from None
        if not (1.0 <= cap < float("inf")):
            raise UsageError(how)
        return cap
    out: dict[int, float] = {}
    try:
        for part in text.split(","):
            key, _, value = part.partition(":")
            weight = float(value)
            if not (weight >= 0 and math.isfinite(weight)):
                raise ValueError
            out[int(key)] = weight
    except ValueError:
        raise UsageError(how) from None
    return out


def is_event_rule(rule: str) -> bool:
    """Whether the label rule ``rule`` reads event markers (any-event, event-last=K, event-in=A:B)
    rather than per-sample labels (last, majority)."""
    return rule == "any-event" or rule.startswith(("event-last=", "event-in="))


def event_span(rule: str, window: int) -> tuple[int, int] | None:
    """The offsets [A, B) of a window where an event marker makes it positive under ``rule``; None
    for the per-sample rules. Refuses a rule that is not one of ``LABEL_RULES``/``ONLINE_RULES``.

    Example: window 100: any-event -> (0, 100); event-last=20 -> (80, 100) (a marker among the last
    20 samples); event-in=10:30 -> (10, 30).
    """
    if rule in LABEL_RULES:
        return (0, window) if rule == "any-event" else None
    kind, _, value = rule.partition("=")
    try:
        if kind == "event-last":
            k = int(value)
            span = (window - k, window)
        elif kind == "event-in":
            a, _, b = value.partition(":")
            span = (int(a), int(b))
        else:
            raise ValueError
    except ValueError:
        raise SettingError(
            f"--label must be one of {', '.join(LABEL_RULES + ONLINE_RULES)} with K, A, B whole "
            f"numbers of samples (received {rule!r})"
        ) from None
    if not 0 <= span[0] < span[1] <= window:
        raise UsageError(
            f"--label {rule} must name samples inside the window: 0 <= A < B <= window for "
            f"event-in=A:B, 1 <= K <= window for event-last=K (received window={window}); "
            "use numbers within --window"
        )
    return span


def check_rule(rule: str) -> str:
    """Refuse a ``--threshold-for`` that is not ``event-f1``, ``f1``, ``recall=R`` or
    ``precision=P`` (R, P in (0, 1]); chunkfit.core.threshold applies it."""
    kind, _, target = rule.partition("=")
    try:
        ok = rule in ("event-f1", "f1") or (
            kind in ("recall", "precision") and 0.0 < float(target) <= 1.0
        )
    except ValueError:
        ok = False
    if not ok:
        raise UsageError(
            "--threshold-for must be event-f1, f1, recall=R or precision=P with R, P in (0, 1] "
            f"(received {rule!r})"
        )
    return rule


def check_matching(tolerance: float | None, match: str) -> None:
    """Refuse a ``--tolerance`` that is not a number of seconds >= 0 and a ``--match`` other than
    peak or span (chunkfit.core.events applies them)."""
    if tolerance is not None and (
        isinstance(tolerance, bool)
        or not isinstance(tolerance, (int, float))
        or not 0 <= tolerance < float("inf")
    ):
        raise UsageError(
            "--tolerance must be a number of seconds >= 0, e.g. --tolerance 0.5 (received "
            f"{tolerance!r})"
        )
    if match not in ("peak", "span"):
        raise UsageError(f"--match must be peak or span (received {match!r})")


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


AUGMENT_USAGE = (
    "--augment takes none or comma-separated transforms like "
    "noise=20,gain=0.1,offset=0.05,flip,shift=8,mix=0.2"
)


@dataclasses.dataclass(frozen=True)
class AugmentSpec(ConfigBase):
    """What each training window may undergo inside the train step (chunkfit.train.augment); off
    by default. ``noise``: Gaussian noise down to this signal-to-noise ratio in dB; ``gain``: a
    factor in [1 - gain, 1 + gain]; ``offset``: a level in [-offset, offset]; ``flip``: the sign
    flipped half the time; ``shift``: the window rolled by up to ``shift`` samples; ``mix``: the
    share of negative windows an event window of the batch is added to. ``"noise=20,flip"`` is
    ``AugmentSpec.parse``'s form and ``str``'s."""

    noise: float | None = None
    gain: float = 0.0
    offset: float = 0.0
    flip: bool = False
    shift: int = 0
    mix: float = 0.0

    def __post_init__(self) -> None:
        ok = (
            (self.noise is None or math.isfinite(self.noise))
            and 0.0 <= self.gain < 1.0
            and 0.0 <= self.offset < float("inf")
            and isinstance(self.flip, bool)
            and isinstance(self.shift, int)
            and not isinstance(self.shift, bool)
            and self.shift >= 0
            and 0.0 <= self.mix <= 1.0
        )
        if not ok:
            raise UsageError(
                f"{AUGMENT_USAGE}, with gain in [0, 1), offset >= 0, shift a whole number of "
                f"samples >= 0 and mix in [0, 1] (received {self})"
            )

    @property
    def on(self) -> bool:
        return self != AugmentSpec()

    def __str__(self) -> str:
        parts = [] if self.noise is None else [f"noise={self.noise:g}"]
        parts += [f"{k}={getattr(self, k):g}" for k in ("gain", "offset") if getattr(self, k)]
        parts += ["flip"] * self.flip + [f"shift={self.shift}"] * (self.shift > 0)
        parts += [f"mix={self.mix:g}"] * (self.mix > 0)
        return ",".join(parts) or "none"

    def record(self, seed: int) -> dict[str, Any]:
        """What run.json says of it: the flag's text, each setting, and the seed its draws come
        from (with the transform and the optimizer's step count)."""
        return {"spec": str(self), **self.to_dict(), "seed": seed if self.on else None}

    @classmethod
    def parse(cls, text: str) -> AugmentSpec:
        """``none``, or transforms like ``noise=20,gain=0.1,flip``; refuses anything else."""
        if text.strip() in ("none", ""):
            return cls()
        fields: dict[str, Any] = {}
        for part in text.split(","):
            key, eq, value = (s.strip() for s in part.partition("="))
            try:
                if key == "flip" and not eq:
                    fields[key] = True
                elif key == "shift" and eq:
                    fields[key] = int(value)
                elif key in ("noise", "gain", "offset", "mix") and eq:
                    fields[key] = float(value)
                else:
                    raise ValueError
            except ValueError:
                raise UsageError(f"{AUGMENT_USAGE} (received {text!r})") from None
        return cls(**fields)


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
    weighted by class (chunkfit.train.weights), and ``oversample`` the share of each epoch's
    windows the rarest class is repeated up to (0: off; chunkfit.core.balance); ``threshold_for``
    how the run picks its decision threshold on the validation split (chunkfit.core.threshold), its
    detections matched to the markers within ``tolerance`` seconds (None: half a window) of their
    peak or span (``match``, chunkfit.core.events). ``jit`` is whether the train step runs under
    XLA: on, off, or auto (timed on this machine at the start of the run,
    chunkfit.train.tensorflow.autotune); like ``compute_threads`` it changes how fast, not what, up
    to float rounding: off also keeps Keras's Adam update op for op
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
    threshold_for: str = "event-f1"
    jit: str = "auto"
    jax_loop: str = "auto"
    tolerance: float | None = None
    match: str = "peak"
    oversample: float = 0.0
    augment: AugmentSpec = AugmentSpec()
    pick_width: int | None = None  # the dense picker's target width (chunkfit.core.picks)
    # the arithmetic training runs in: auto (measured where the CPU has bfloat16 instructions),
    # float32 or bfloat16 (Keras's mixed_bfloat16 policy; chunkfit.train.precision)
    precision: str = "auto"

    _nested: ClassVar[dict[str, type[ConfigBase]]] = {
        "windows": WindowSpec,
        "split": SplitSpec,
        "blocks": BlockSpec,
        "augment": AugmentSpec,
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
        if isinstance(self.epochs, bool) or not isinstance(self.epochs, int) or self.epochs < 1:
            raise UsageError(
                "--epochs must be a whole number of at least 1: a run of 0 epochs would write "
                f"an untrained model and threshold (received {self.epochs!r})"
            )
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
        check_matching(self.tolerance, self.match)
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
        if self.precision not in ("auto", "float32", "bfloat16"):
            raise UsageError(
                f"--precision must be auto, float32 or bfloat16 (received {self.precision!r})"
            )
        if self.jax_loop == "scan" and self.deterministic:
            raise UsageError(
                "--jax-loop scan cannot be combined with --deterministic: deterministic runs "
                "dispatch one "
                "call per batch, so that a resumed run is bit-identical; drop one of them"
            )
        if (
            isinstance(self.oversample, bool)
            or not isinstance(self.oversample, (int, float))
            or not 0.0 <= self.oversample < 1.0
        ):
            raise UsageError(
                "--oversample must be a share in [0, 1) of each epoch's windows for the rarest "
                f"class, e.g. 0.25 (0: off) (received {self.oversample!r})"
            )
        if self.normalize not in NORMALIZE_MODES:
            raise UsageError(
                f"--normalize must be one of {', '.join(NORMALIZE_MODES)} (received "
                f"{self.normalize!r})"
            )
        if isinstance(self.augment, str):  # the flag's text, as ``fit`` and the CLI take it
            object.__setattr__(self, "augment", AugmentSpec.parse(self.augment))
        if self.augment.shift and self.windows.label not in ("any-event", "majority"):
            # a roll keeps every sample in the window: only the position of an event moves
            raise UsageError(
                f"--augment shift rolls each window, which moves the sample --label "
                f"{self.windows.label} reads; drop shift or use --label any-event or majority"
            )

    @classmethod
    def from_keywords(
        cls,
        *,
        window: int = WindowSpec.window,
        stride: int = WindowSpec.stride,
        label: str = WindowSpec.label,
        label_margin: int = WindowSpec.margin,
        validation: float = SplitSpec.validation,
        validation_segments: float | None = SplitSpec.segments,
        chunk: int = BlockSpec.chunk,
        seed: int = BlockSpec.seed,
        mix: int = BlockSpec.mix,
        **fields: Any,
    ) -> FitOptions:
        """FitOptions from the flat keywords ``chunkfit.fit`` and ``chunkfit train`` take: window,
        stride, label and label_margin (``windows``), validation and validation_segments
        (``split``), chunk, seed and mix (``blocks``); ``fields`` are FitOptions' own
        (batch_size, epochs, ...)."""
        return cls(
            windows=WindowSpec(window=window, stride=stride, label=label, margin=label_margin),
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
