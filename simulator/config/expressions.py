"""Shape expressions of workload files: named integer params, parsed with Python's `ast` and
evaluated by walking only + - * / ( ) integers and param names; nothing is ever passed to
`eval`. A division that is not exact is an error."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any

from ..errors import quote
from .strict import SkipField, describe

MAX_DIMENSION = 2**32  # a param or a tensor dimension; no chip holds a larger one
MAX_RANK = 8  # dimensions of one tensor
MAX_EXPRESSION_CHARS = 200  # a shape expression such as '(hidden + 1) / 2'


def shape_of(value: Any, params: Mapping[str, int | None]) -> tuple[int, ...]:
    if not isinstance(value, list) or not value:
        raise ValueError(f"expected a list of dimensions, got {describe(value)}")
    if len(value) > MAX_RANK:
        raise ValueError(f"has {len(value)} dimensions; a tensor has at most {MAX_RANK}")
    dims = []
    for i, dim in enumerate(value):
        size = evaluate(dim, params)
        if size < 1:
            raise ValueError(
                f"[{i}] = {quote(dim)} evaluates to {size}; dimensions must be positive"
            )
        if size > MAX_DIMENSION:
            raise ValueError(
                f"[{i}] = {quote(dim)} evaluates to {size:,}, larger than the "
                f"{MAX_DIMENSION:,} (2^32) a dimension may be"
            )
        dims.append(size)
    return tuple(dims)


_BINARY_OPS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
}


def evaluate(expr: Any, params: Mapping[str, int | None]) -> int:
    """Evaluate an integer shape expression such as 'tokens * 4' or '(hidden + 1) / 2'."""
    if isinstance(expr, bool):
        raise ValueError(f"{expr!r} is not a dimension")
    if isinstance(expr, int):
        return expr
    if not isinstance(expr, str):
        raise ValueError(f"{quote(expr)} is not a dimension or expression")
    if len(expr) > MAX_EXPRESSION_CHARS:
        raise ValueError(
            f"{quote(expr)} is longer than the {MAX_EXPRESSION_CHARS} characters "
            "a shape expression may be"
        )
    if not expr.isascii():  # Python would fold look-alike letters: 'ｍ' would read as 'm'
        raise ValueError(
            f"{quote(expr)}: a shape expression is ASCII (param names, integers, "
            "+ - * / and parentheses)"
        )
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        raise ValueError(
            f"{quote(expr)} is not a valid expression (use integers, param names, "
            "+ - * / and parentheses)"
        ) from None

    def walk(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in params:
                known = ", ".join(sorted(params)) or "none"
                raise ValueError(f"{quote(expr)}: unknown param {quote(node.id)} (params: {known})")
            value = params[node.id]
            if value is None:
                raise SkipField(node.id)  # the param itself is wrong, and already reported
            return value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -walk(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY_OPS:
            return _BINARY_OPS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Div, ast.FloorDiv)):
            left, right = walk(node.left), walk(node.right)
            if right == 0:
                raise ValueError(f"{quote(expr)}: division by zero")
            if left % right:
                raise ValueError(f"{quote(expr)}: {left} / {right} is not a whole number")
            return left // right
        raise ValueError(
            f"{quote(expr)}: only integers, param names, + - * / and parentheses are allowed"
        )

    return walk(tree)
