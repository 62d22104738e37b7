"""Fast-Slow's fast loop changes prompt text only: a child that differs from its parent anywhere but in
string constants is refused before it costs a rollout, whoever wrote it (the knob mutator, an LLM)."""

from __future__ import annotations

import ast

from whale.harness.parsing import parse_untrusted


class _Blank(ast.NodeTransformer):
    """Every string constant, docstrings and the literal parts of f-strings included, replaced by the same
    placeholder. Keys (`task["question"]`) and what an f-string interpolates stay: they are code."""

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        return ast.Constant("") if isinstance(node.value, str) else node

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        node.value = self.visit(node.value)
        return node

    def visit_FormattedValue(self, node: ast.FormattedValue) -> ast.AST:
        return node


def shape(source: str) -> str:
    """The code with its text taken out: equal for two files that differ only in string constants."""
    return ast.dump(_Blank().visit(parse_untrusted(source)), include_attributes=False)


def outside_text(parent: str, child: str) -> str:
    """Why `child` is not a prompt-text edit of `parent` ("" when it is one)."""
    try:
        same = shape(parent) == shape(child)
    except SyntaxError as exc:  # parse_untrusted refuses too-deep or too-large files as one
        return f"prompts-only: the file does not parse ({type(exc).__name__})"
    return "" if same else "prompts-only: it changes code outside string constants"
