"""Which channel of a store feeds which input channel of a run: ``--channels``.

A detector trained on one instrument is meant for the next one, whose channels have other names.
The run keeps its threshold and normalisation (a layer of model.keras); only the columns it reads
change. ``--channels RUN=STORE,...`` pairs them by name, a plain ``--channels A,B`` lists the
store's channels in the run's order, and one channel on each side maps by itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from ..core.scoring import Predictor
from ..errors import IncompatibleError, UsageError

# What --channels accepts from the library: "x=a,y=b", "a,b", ["a", "b"] or {"x": "a", "y": "b"}.
ChannelsArg = str | Sequence[str] | Mapping[str, str]


@dataclasses.dataclass(frozen=True)
class ChannelMap:
    """The store's columns read, in the order of the run's input channels, and the line saying
    so (``store y -> run x (...)``; None when the store's channels are the run's own)."""

    order: list[int]
    line: str | None

    @property
    def identity(self) -> bool:
        return self.order == list(range(len(self.order)))


def _describe(run: list[str] | None, store: list[str], why: str) -> str:
    """``store y -> run x (one channel on each side)``; a bare .keras file's inputs by index."""
    target = ", ".join(run) if run is not None else ", ".join(str(i) for i in range(len(store)))
    side = "run" if run is not None else "model inputs"
    return f"store {', '.join(store)} -> {side} {target} ({why})"


def parse_channels(given: ChannelsArg) -> list[str] | dict[str, str]:
    """A plain list of store channels, or run channel -> store channel pairs."""
    if isinstance(given, Mapping):
        return {str(k): str(v) for k, v in given.items()}
    items = [p.strip() for p in given.split(",")] if isinstance(given, str) else list(given)
    if not items or any(not p for p in items):
        raise UsageError(
            f"--channels takes store channel names, comma separated, or RUN=STORE pairs "
            f"(received {given!r})"
        )
    if not any("=" in p for p in items):
        return items
    pairs = [p.partition("=") for p in items]
    if any(not sep or not r.strip() or not s.strip() for r, sep, s in pairs):
        raise UsageError(
            f"--channels: give every channel as RUN=STORE, or none (received {given!r})"
        )
    out = {r.strip(): s.strip() for r, _, s in pairs}
    if len(out) != len(pairs):
        raise UsageError(f"--channels names a run channel twice (received {given!r})")
    return out


def channel_map(
    run_channels: list[str] | None,
    n_inputs: int,
    store_channels: list[str],
    given: ChannelsArg | None,
    *,
    where: str,
) -> ChannelMap:
    """The store columns that feed the run's inputs, checked: ``where`` names the store in errors.

    Without ``given``: the run's own channel names, or, with one channel on each side, that one
    (said on the line). A bare ``.keras`` file names no channels (``run_channels`` None): its
    inputs take the store's columns in order unless a plain list says otherwise.
    """
    if given is None:
        if run_channels is None or run_channels == store_channels:
            return ChannelMap(list(range(len(store_channels))), None)
        if len(run_channels) == 1 and len(store_channels) == 1:
            return ChannelMap(
                [0], _describe(run_channels, store_channels, "one channel on each side")
            )
        raise IncompatibleError(
            f"{where}: channels {store_channels} differ from the training store's "
            f"{run_channels}; score a store ingested with the same channels (--columns), or map "
            "them with --channels RUN=STORE,..."
        )
    parsed = parse_channels(given)
    if isinstance(parsed, dict):
        if run_channels is None:
            raise UsageError(
                "--channels: a .keras file names no channels, so RUN=STORE pairs cannot apply; "
                "list the store's channels in the model's input order (--channels A,B)"
            )
        unknown = sorted(set(parsed) - set(run_channels))
        missing = [c for c in run_channels if c not in parsed]
        if unknown or missing:
            raise UsageError(
                f"--channels: the run's channels are {run_channels} "
                + (f"(no {unknown})" if unknown else f"(received no store channel for {missing})")
                + "; pair each with a store channel, RUN=STORE"
            )
        chosen = [parsed[c] for c in run_channels]
    else:
        chosen = parsed
        wanted = len(run_channels) if run_channels is not None else n_inputs
        if len(chosen) != wanted:
            raise UsageError(
                f"--channels lists {len(chosen)} store channel(s), and the run takes {wanted}; "
                "list one store channel per run channel, in the run's order"
            )
    absent = [c for c in chosen if c not in store_channels]
    if absent:
        raise UsageError(
            f"{where}: --channels names {absent}, not channels of this store {store_channels}"
        )
    order = [store_channels.index(c) for c in chosen]
    return ChannelMap(order, _describe(run_channels, chosen, "--channels"))


class MappedPredictor:
    """A predictor fed the store's columns in the run's channel order."""

    def __init__(self, inner: Predictor, order: Sequence[int]) -> None:
        self.inner = inner
        self.order = np.asarray(order, dtype=np.intp)
        self.batch_size = inner.batch_size

    def __call__(self, samples: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        return self.inner(np.ascontiguousarray(samples[:, self.order]), offsets)


def mapped(predictor: Predictor, cmap: ChannelMap) -> Predictor:
    """``predictor`` itself when the store's columns are the run's, else one that reorders them."""
    return predictor if cmap.identity else MappedPredictor(predictor, cmap.order)
