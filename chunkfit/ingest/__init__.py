"""Getting real logs into a store: sources, parsing, NaN policy, time gaps and event markers.

- ``pipeline``: ``ingest()``, sources in, one store transaction out (``live`` for a stream that
  commits as it arrives);
- ``source``: the ``Source`` every input is, yielding ``block.ParsedBlock``s; ``sources``: which
  source a spec names;
- CSV/TSV text: ``textsource`` (the source), ``textblocks`` (lines in blocks), ``csvlayout``
  (column roles), ``csvparse`` (the parse), ``csvlocate`` (naming a bad line), ``csvfields``
  (field rules);
- ``arrays``: ``.npy`` files and HDF5 datasets; ``formats``: the recording formats;
- ``timegaps`` (rate and segments from a time column), ``nanfill`` (``--nan``), ``events``
  (marker files).
"""

from __future__ import annotations

from .pipeline import IngestProgress, IngestReport, ingest

__all__ = ["IngestProgress", "IngestReport", "ingest"]
