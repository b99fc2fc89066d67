"""What the engine choice and the thread measurement share: the CPU's name, the JSON file each
keeps its measurements in, and reading one answer line from a measuring child within a deadline."""

from __future__ import annotations

import json
import os
import platform
import select
import time
from pathlib import Path
from typing import Any


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), part of every measurement's cache key."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown cpu"


def read_cache(path: Path) -> dict[str, Any]:
    """The measurements kept at ``path`` by key; empty when it is missing or unreadable."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_cache(path: Path, key: str, entry: dict[str, Any]) -> None:
    """Keep ``entry`` under ``key`` at ``path`` (written whole, then renamed into place)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = read_cache(path)
        data[key] = entry
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, path)
    except OSError:  # a read-only home: the run goes on, measured again next time
        pass


def read_line(fd: int, buffer: bytes, deadline: float) -> tuple[bytes | None, bytes]:
    """The next line a child wrote on ``fd`` after ``buffer`` (what was read past the last line),
    and what is left; None for the line when the child closed ``fd``, failed or ran past
    ``deadline`` (``time.monotonic``)."""
    poller = select.poll()  # not select.select: it refuses descriptors past 1023
    poller.register(fd, select.POLLIN)
    try:
        while b"\n" not in buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not poller.poll(max(1, int(left * 1000))):
                return None, buffer
            chunk = os.read(fd, 4096)
            if not chunk:
                return None, buffer
            buffer += chunk
    except OSError:
        return None, buffer
    line, rest = buffer.split(b"\n", 1)
    return line, rest
