"""Getting real logs into a store: sources, parsing, NaN policy, time gaps and event markers."""

from __future__ import annotations

from .pipeline import IngestProgress, IngestReport, ingest

__all__ = ["IngestProgress", "IngestReport", "ingest"]
