"""Imports every command module so each registers itself on the app."""

from __future__ import annotations

from . import ingest_cmd  # noqa: F401
from . import train_cmd  # noqa: F401
from . import score_cmd  # noqa: F401
from . import bench_cmd  # noqa: F401
from . import launch_cmd  # noqa: F401
