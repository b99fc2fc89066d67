"""Take a trained run to a device: LiteRT, ONNX and SavedModel files, the run's settings beside
them.

``export_run`` (write.py) is the one entry; formats.py says what can be written, meta.py the
sidecar's contract, litert.py / onnxfile.py / savedmodel.py one converter each, quantize.py the int8
calibration windows, carray.py the C source, failures.py the one-line refusals.
"""

from __future__ import annotations

from .formats import FORMATS, QUANTIZE
from .meta import SIDECAR_KEYS, read_sidecar
from .write import ExportReport, export_run

__all__ = ["FORMATS", "QUANTIZE", "SIDECAR_KEYS", "ExportReport", "export_run", "read_sidecar"]
