"""Expressions a user writes in a kernel definition, parsed safely: Kernel Tuner-style
restrictions over parameter names ("tile * unroll <= 64", "n % tile == 0") and buffer
sizes over shape keys ("taps + block - 1").

Text is parsed with Python's `ast` and evaluated by walking the tree here: only the node
types and names below pass, and nothing is ever handed to eval() or compile(). A number
too large to be a tile or a size (a `2 ** 10 ** 10`) is refused while evaluating.
"""
from __future__ import annotations

import ast
import operator
from typing import Callable, Mapping

MAX_TEXT = 500  # characters: a restriction is one line, not a program
MAX_MAGNITUDE = 1 << 62  # every intermediate integer stays far below what could exhaust memory

BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
          ast.Mod: operator.mod, ast.Div: operator.truediv, ast.Pow: operator.pow,
          ast.LShift: operator.lshift, ast.RShift: operator.rshift, ast.BitAnd: operator.and_,
          ast.BitOr: operator.or_, ast.BitXor: operator.xor}
UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_, ast.Invert: operator.invert}
COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
           ast.Gt: operator.gt, ast.GtE: operator.ge, ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}
FUNCTIONS = {"min": min, "max": max, "abs": abs}


class ExpressionError(ValueError):
    """Text that is not an allowed expression, or an evaluation that failed."""


def parse_expression(text: str, names: frozenset[str] | set[str]) -> ast.Expression:
    """The checked tree of `text`: ExpressionError naming the first construct or name that
    is not allowed."""
    if not isinstance(text, str) or not text.strip():
        raise ExpressionError(f"{text!r} is not an expression")
    if len(text) > MAX_TEXT:
        raise ExpressionError(f"expression is longer than {MAX_TEXT} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"{text!r} is not a Python expression ({exc.msg})") from None
    for node in ast.walk(tree):
        _check_node(node, names)
    return tree


def _check_node(node: ast.AST, names) -> None:
    allowed = (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.BinOp, ast.UnaryOp, ast.Compare, ast.Constant,
               ast.Name, ast.Load, ast.Tuple, ast.List, ast.IfExp, ast.Call, *BINARY, *UNARY, *COMPARE)
    if not isinstance(node, allowed):
        raise ExpressionError(f"{type(node).__name__} is not allowed (only arithmetic, comparisons, and/or/not, "
                              f"{', '.join(FUNCTIONS)}, and names)")
    if isinstance(node, ast.Name) and node.id not in names and node.id not in FUNCTIONS:
        raise ExpressionError(f"unknown name {node.id!r} (known: {', '.join(sorted(names)) or 'none'})")
    if isinstance(node, ast.Constant) and not isinstance(node.value, (int, float, str)):
        raise ExpressionError(f"constant {node.value!r} is not a number or a string")
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS or node.keywords:
            raise ExpressionError(f"only {', '.join(FUNCTIONS)} may be called, with positional arguments")


def evaluate(tree: ast.Expression, values: Mapping[str, object]):
    """The value of a checked tree for these names' values."""
    return _value(tree.body, values)


def _value(node: ast.AST, values: Mapping[str, object]):
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return FUNCTIONS[node.id] if node.id in FUNCTIONS and node.id not in values else values[node.id]
    if isinstance(node, (ast.Tuple, ast.List)):
        return tuple(_value(item, values) for item in node.elts)
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            return all(_value(item, values) for item in node.values)
        return any(_value(item, values) for item in node.values)
    if isinstance(node, ast.UnaryOp):
        return _bounded(UNARY[type(node.op)](_value(node.operand, values)))
    if isinstance(node, ast.BinOp):
        left, right = _value(node.left, values), _value(node.right, values)
        if isinstance(node.op, (ast.Pow, ast.LShift)) and isinstance(right, (int, float)) and abs(right) > 64:
            raise ExpressionError(f"exponent or shift {right!r} is too large")
        return _bounded(BINARY[type(node.op)](left, right))
    if isinstance(node, ast.Compare):
        left = _value(node.left, values)
        for op, right_node in zip(node.ops, node.comparators):
            right = _value(right_node, values)
            if not COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return _value(node.body, values) if _value(node.test, values) else _value(node.orelse, values)
    if isinstance(node, ast.Call):
        return _bounded(FUNCTIONS[node.func.id](*(_value(arg, values) for arg in node.args)))
    raise ExpressionError(f"{type(node).__name__} is not allowed")  # _check_node has refused it already


def _bounded(value):
    if isinstance(value, int) and abs(value) > MAX_MAGNITUDE:
        raise ExpressionError("an intermediate value exceeds 2^62")
    return value


def names_read(text: str, names) -> tuple[str, ...]:
    """The names of `names` that `text` reads (in order of first appearance): what a
    restriction declares it reads (edgetune.tuner.Constraint.reads)."""
    tree = parse_expression(text, frozenset(names))
    found = (node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and node.id in names)
    return tuple(dict.fromkeys(found))


def compiled(text: str, names) -> Callable[[Mapping[str, object]], object]:
    """A function of the names' values computing `text` (parsed and checked once, now)."""
    tree = parse_expression(text, frozenset(names))
    return lambda values: evaluate(tree, values)
