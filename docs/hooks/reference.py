"""MkDocs hook: the reference pages, rendered from the code at build time.

A page holding the marker ``<!-- cli-reference -->`` gets, in its place, the usage, help and
options of ``chunkfit`` and of every command it registers (from the Typer app); one holding
``<!-- api-reference -->`` gets every name of ``chunkfit.__all__`` with its signature and
docstring. Nothing is written by hand or committed, so the pages say what the code does.
"""

from __future__ import annotations

import importlib
import inspect
import re
from typing import Any

MARKER = "<!-- cli-reference -->"
API_MARKER = "<!-- api-reference -->"


def _root() -> Any:
    """The click command behind ``chunkfit.cli.app``, every command registered."""
    import typer.main

    cli = importlib.import_module("chunkfit.cli")
    register = getattr(cli, "_register", None)
    if register is not None:
        register()  # the commands add themselves to the app when their modules are imported
    return typer.main.get_command(cli.app)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _params(params: list[Any], ctx: Any) -> list[str]:
    rows = []
    for param in params:
        if getattr(param, "hidden", False):
            continue
        record = param.get_help_record(ctx)
        if record is None:
            continue
        name, help_text = record
        rows.append(f"| `{_cell(name)}` | {_cell(help_text)} |")
    if not rows:
        return []
    return ["| argument or option | meaning |", "|---|---|", *rows, ""]


def _panels(params: list[Any], ctx: Any) -> list[str]:
    """The command's parameters, one table per help panel as ``--help`` groups them."""
    groups: dict[str | None, list[Any]] = {}
    for param in params:
        groups.setdefault(getattr(param, "rich_help_panel", None), []).append(param)
    if list(groups) == [None]:
        return _params(params, ctx)
    lines = []
    for panel, members in groups.items():
        table = _params(members, ctx)
        if table:
            lines += [f"**{panel or 'Arguments and other options'}**", "", *table]
    return lines


def render() -> str:
    """Markdown for the whole command line: the global options, then each command."""
    root = _root()
    root_ctx = root.make_context("chunkfit", [], resilient_parsing=True)
    lines = ["## chunkfit", "", _cell(root.help or ""), ""]
    lines += ["```", "chunkfit [OPTIONS] COMMAND [ARGS]...", "```", ""]
    lines += _params(root.params, root_ctx)
    for name in sorted(root.commands):
        command = root.commands[name]
        ctx = command.make_context(name, [], parent=root_ctx, resilient_parsing=True)
        usage = " ".join(command.collect_usage_pieces(ctx))
        usage = re.sub(r"[{\[](\w+)[}\]]", lambda m: m.group(0).upper(), usage)
        lines += [f"## chunkfit {name}", "", "```", f"chunkfit {name} {usage}", "```", ""]
        lines += [(command.help or "").strip(), ""]
        lines += _panels(command.params, ctx)
    return "\n".join(lines)


def _signature(obj: Any) -> str:
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return ""


def render_api() -> str:
    """Markdown for ``chunkfit.__all__``: each name, its signature and its docstring."""
    package = importlib.import_module("chunkfit")
    lines = []
    for name in package.__all__:
        obj = getattr(package, name)
        if inspect.ismodule(obj):
            kind, signature = "module", ""
        elif inspect.isclass(obj):
            kind, signature = "class", ""
        else:
            kind, signature = "function", _signature(obj)
        lines += [f"## `{name}`", "", f"*{kind}*", ""]
        if signature:
            lines += ["```python", f"chunkfit.{name}{signature}", "```", ""]
        doc = inspect.getdoc(obj) or ""
        lines += ["```text", doc, "```", ""] if doc else []
    return "\n".join(lines)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, render())
    if API_MARKER in markdown:
        markdown = markdown.replace(API_MARKER, render_api())
    return markdown
