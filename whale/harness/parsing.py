"""Parsing code whale did not write (harness candidates, model-written expressions) in the parent.

A file a few kilobytes long can make Python's parser or any recursive walk of its tree raise MemoryError
or RecursionError: 30,000 unary minus signs, a 40 KB sum, 200 KB of `[`. In the parent those would crash
the run, and its resume, which reads the archive again. Here every such file is refused with a
SyntaxError (`Unparsable`), which every caller already treats as "not valid code", and a tree is only
returned when it is shallow enough for the recursive visitors that read it afterwards.
"""

from __future__ import annotations

import ast

MAX_SOURCE_BYTES = 64_000
MAX_DEPTH = 200  # tree levels; a visitor spends 2-3 Python frames per level, far below the 1,000 limit


class Unparsable(SyntaxError):
    """Refused before or while parsing: too large, too deep, or not text the parser takes."""


def parse_untrusted(source: str, mode: str = "exec", max_bytes: int = MAX_SOURCE_BYTES) -> ast.AST:
    size = len(source.encode("utf-8", "replace"))
    if size > max_bytes:
        raise Unparsable(f"source is {size} bytes, over the {max_bytes}-byte limit")
    try:
        tree = ast.parse(source, mode=mode)
    except (RecursionError, MemoryError):
        raise Unparsable("too deeply nested to parse", ("<source>", 1, 0, "")) from None
    except ValueError as exc:  # a NUL byte
        line = source[: source.find("\0")].count("\n") + 1 if "\0" in source else 1
        raise Unparsable(str(exc), ("<source>", line, 0, "")) from None
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            line = getattr(node, "lineno", 1)
            raise Unparsable(f"nested deeper than {MAX_DEPTH} levels", ("<source>", line, 0, ""))
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return tree
