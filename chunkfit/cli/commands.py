"""Imports every command module so each registers itself on the app."""

from __future__ import annotations

from . import (
    bench_cmd,  # noqa: F401
    export_cmd,  # noqa: F401
    ingest_cmd,  # noqa: F401
    launch_cmd,  # noqa: F401
    score_cmd,  # noqa: F401
    train_cmd,  # noqa: F401
)
