"""A LiteRT flatbuffer as C source, for a microcontroller build: what ``xxd -i`` writes (12 bytes a
line, the length beside it), the export's metadata as a comment block above it."""

from __future__ import annotations

import json
import re
from typing import Any

PER_LINE = 12


def c_name(file_name: str) -> str:
    """The array's C identifier from the file's name, as ``xxd -i`` makes it: every character
    that is not a letter or digit becomes ``_`` (``model-int8.c`` -> ``model_int8_tflite``)."""
    stem = file_name[: -len(".c")] if file_name.endswith(".c") else file_name
    name = re.sub(r"[^0-9A-Za-z]", "_", f"{stem}.tflite")
    return f"_{name}" if name[0].isdigit() else name


def c_source(data: bytes, name: str, meta: dict[str, Any]) -> str:
    """``data`` as ``const unsigned char NAME[] = {...};`` and ``const unsigned int NAME_len``,
    after a comment with ``meta`` (the sidecar's fields a firmware needs, as JSON)."""
    shown = {k: v for k, v in meta.items() if k != "run"}
    comment = json.dumps(shown, indent=2).replace("*/", "* /")
    lines = [
        "/* chunkfit export: an int8 LiteRT model for a microcontroller.",
        " * Feed one window of raw signal, quantised with the input's scale and zero point;",
        " * the event score is output[positive], dequantised with the output's.",
        " *",
        *(f" * {line}" for line in comment.splitlines()),
        " */",
        "",
        f"const unsigned char {name}[] = {{",
    ]
    rows = [
        ", ".join(f"0x{b:02x}" for b in data[i : i + PER_LINE])
        for i in range(0, len(data), PER_LINE)
    ]
    lines += [f"  {row}," if i < len(rows) - 1 else f"  {row}" for i, row in enumerate(rows)]
    lines += ["};", f"const unsigned int {name}_len = {len(data)};", ""]
    return "\n".join(lines)
