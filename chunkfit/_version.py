"""chunkfit's version, in a module of its own so any layer can read it without importing the
package's public names (run.json records it: chunkfit.train.record)."""

from __future__ import annotations

__version__ = "0.1.0"
