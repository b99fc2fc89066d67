"""The memory budget: ``--memory-budget 1.5GB`` turned into the largest block that fits beside
what the process already holds (TensorFlow, the model, its compiled steps, the batches in
flight)."""

from __future__ import annotations

import re

from ..config import WindowSpec
from ..errors import UsageError, WindowError

# TensorFlow's compiled train/test steps and their first traces, on top of what is resident
# once the model is built; measured on the built-in models (see benchmarks/train.py).
TRACE_ALLOWANCE = 200 << 20

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kb": 1 << 10,
    "m": 1 << 20,
    "mb": 1 << 20,
    "g": 1 << 30,
    "gb": 1 << 30,
}


def parse_bytes(text: str | int) -> int:
    """``"1.5GB"``, ``"800MB"``, ``"512m"`` or a plain number of bytes -> bytes (binary units)."""
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    if m is None or m.group(2).lower() not in _UNITS:
        raise UsageError(f"memory size must look like 1.5GB, 800MB or 2G (received {text!r})")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def bytes_per_window(windows: WindowSpec, n_channels: int) -> int:
    """Host and TensorFlow memory one window of a block costs while it is buffered.

    A window adds ``stride`` samples of every channel (float32) plus its offset and label; a group
    lives up to three times at once (being read, handed to TensorFlow, training).
    """
    return 3 * (windows.stride * n_channels * 4 + 8 + 8)


def chunk_for_budget(
    budget: int, in_use: int, windows: WindowSpec, n_channels: int, mix: int = 1
) -> int:
    """Largest chunk whose groups of ``mix`` blocks fit in ``budget`` bytes beside ``in_use``
    bytes."""
    free = budget - in_use
    chunk = free // (mix * bytes_per_window(windows, n_channels)) if free > 0 else 0
    if chunk < 1:
        raise UsageError(
            f"memory budget {budget / 2**20:.0f} MB is below what the process already uses "
            f"({in_use / 2**20:.0f} MB with TensorFlow and the model loaded); raise --memory-budget"
        )
    return int(chunk)


def chunk_in_budget(
    budget: int, windows: WindowSpec, n_channels: int, mix: int, batch_size: int, in_flight: int
) -> int:
    """The chunk for a run whose process is resident now (model built), with ``in_flight`` bytes of
    training elements still to come; refuses a budget that leaves blocks smaller than a batch."""
    import psutil

    in_use = psutil.Process().memory_info().rss + TRACE_ALLOWANCE + in_flight
    chunk = chunk_for_budget(budget, in_use, windows, n_channels, mix)
    if chunk < batch_size:
        raise WindowError(
            f"memory budget {budget / 2**20:.0f} MB leaves room for blocks of {chunk} "
            f"windows, fewer than the batch size {batch_size}; raise --memory-budget"
        )
    return chunk
