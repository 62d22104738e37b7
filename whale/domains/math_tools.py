"""The math domain's tools: a calculator over a safe arithmetic AST with caps on size and magnitude, and the
sandboxed `python` tool."""

from __future__ import annotations

import ast
import operator
from typing import Any

from whale.harness.parsing import parse_untrusted
from whale.harness.task import ToolError

# Calculator: an AST walk over a whitelist, with caps so no input can burn CPU or memory.
MAX_EXPRESSION_CHARS = 200


MAX_MAGNITUDE = 10**15


MAX_EXPONENT = 12


BINARY_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}


UNARY_OPS = {ast.USub: operator.neg, ast.UAdd: operator.pos}


def checked(value: Any) -> int | float:
    if isinstance(value, complex):
        raise ToolError("result is not a real number")
    if not abs(value) <= MAX_MAGNITUDE:
        raise ToolError(f"result out of range (magnitude limit {MAX_MAGNITUDE:.0e})")
    return value


def evaluate(node: ast.AST) -> int | float:
    if isinstance(node, ast.Expression):
        return evaluate(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return checked(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in UNARY_OPS:
        return UNARY_OPS[type(node.op)](evaluate(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in BINARY_OPS:
        left, right = evaluate(node.left), evaluate(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ToolError(f"exponent {right} too large (limit {MAX_EXPONENT})")
        try:
            return checked(BINARY_OPS[type(node.op)](left, right))
        except ZeroDivisionError:
            raise ToolError("division by zero") from None
        except (ArithmeticError, ValueError) as e:
            raise ToolError(f"arithmetic error: {e}") from None
    what = type(node).__name__
    raise ToolError(f"not allowed in an expression: {what}; use numbers, + - * / // % ** and ()")


def format_number(value: int | float) -> str:
    """Integers print bare ("4", not "4.0"); other floats to 6 decimals without trailing zeros."""
    if isinstance(value, float):
        value = round(value, 6)
        if value.is_integer():
            return str(int(value))
        return f"{value:.6f}".rstrip("0").rstrip(".")
    return str(value)


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression safely; ToolError (with the reason) on anything else."""
    if not isinstance(expression, str):
        raise ToolError(f"calculator expects a string expression, got {type(expression).__name__}")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    text = expression.replace("×", "*").replace("÷", "/").replace("^", "**").strip().rstrip("=").strip()
    if not text:
        raise ToolError("empty expression")
    try:
        tree = parse_untrusted(text, mode="eval")
    except SyntaxError:
        raise ToolError(f"cannot parse expression: {expression!r}") from None
    return format_number(evaluate(tree))


class MathToolbox:
    """The math tools: a calculator and a sandboxed python runner; neither keeps state between calls."""

    names = ("calculator", "python")

    def __init__(self, python_timeout_s: float = 5.0):
        self.python_timeout_s = python_timeout_s

    def call(self, name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if name not in self.names:
            raise ToolError(f"unknown tool {name!r}; available: {', '.join(self.names)}")
        keyword = "expression" if name == "calculator" else "code"
        if len(args) == 1 and not kwargs:
            value = args[0]
        elif not args and set(kwargs) == {keyword}:
            value = kwargs[keyword]
        else:
            raise ToolError(f"{name} takes exactly one argument: {name}({keyword}: str)")
        if name == "calculator":
            return calculator(value)
        from whale.harness.pysandbox import run_python

        return run_python(value, timeout_s=self.python_timeout_s)
