"""The sandbox's Python layer: the builtins and read-only module proxies a harness gets, the safe stand-ins
for the few standard-library functions that read attributes by name, and the captured print(). The first
line of defence only; the OS layers in confine.py are the wall."""

from __future__ import annotations

import _string
import collections
import functools
import string
import types
from typing import Any

PRELOADED = ("re", "math", "json", "collections", "itertools", "functools", "statistics", "random", "string")


# Modules the allowed ones import lazily (Counter.most_common -> heapq, ...), or the compiler does
# (unicodedata, for non-ASCII identifiers): loaded before the audit hook goes up, because the hook refuses
# every later import.
LAZY_DEPENDENCIES = (
    "unicodedata",
    "heapq",
    "operator",
    "bisect",
    "copy",
    "keyword",
    "reprlib",
    "fractions",
    "decimal",
    "numbers",
)


SAFE_BUILTINS = (
    "abs all any bool bytes callable chr dict divmod enumerate filter float format frozenset hash int "
    "isinstance issubclass iter len list map max min next ord pow range repr reversed round set slice "
    "sorted str sum tuple zip hasattr "
    "ArithmeticError AssertionError AttributeError Exception IndexError KeyError LookupError NameError "
    "NotImplementedError OverflowError RecursionError RuntimeError StopIteration TypeError ValueError "
    "ZeroDivisionError True False None"
).split()


# Public attributes of allowed modules that a harness does not get: they read attributes by name or
# evaluate strings (singledispatch's register() evaluates annotations in the caller's globals).
WITHHELD = {"functools": ("singledispatch", "singledispatchmethod")}


class ReadOnly(types.SimpleNamespace):
    """A namespace a harness can read but not change: module proxies and `tools`."""

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"cannot set {name!r}: this object is read-only in a harness")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete {name!r}: this object is read-only in a harness")

    def __repr__(self) -> str:
        return f"<read-only namespace: {', '.join(sorted(vars(self)))}>"


class SafeFormatter(string.Formatter):
    """`string.Formatter` without attribute lookup: its get_field resolves '{0.__globals__}' with a real
    getattr and returns the object itself, which walks around every static check."""

    def get_field(self, field_name: str, args: Any, kwargs: Any) -> tuple[Any, Any]:
        first, rest = _string.formatter_field_name_split(field_name)
        obj = self.get_value(first, args, kwargs)
        for is_attr, key in rest:
            if is_attr:
                raise ValueError("attribute lookup in format fields is not allowed in a harness")
            obj = obj[key]
        return obj, first


def _default_names(assigned: Any, updated: Any) -> None:
    if tuple(assigned) != functools.WRAPPER_ASSIGNMENTS or tuple(updated) != functools.WRAPPER_UPDATES:
        raise ValueError("update_wrapper/wraps with other attribute names is not allowed in a harness")


def safe_update_wrapper(
    wrapper: Any,
    wrapped: Any,
    assigned: Any = functools.WRAPPER_ASSIGNMENTS,
    updated: Any = functools.WRAPPER_UPDATES,
) -> Any:
    """functools.update_wrapper with its default attribute names only (others would make it a getattr)."""
    _default_names(assigned, updated)
    return functools.update_wrapper(wrapper, wrapped)


def safe_wraps(
    wrapped: Any, assigned: Any = functools.WRAPPER_ASSIGNMENTS, updated: Any = functools.WRAPPER_UPDATES
) -> Any:
    _default_names(assigned, updated)
    return functools.partial(safe_update_wrapper, wrapped=wrapped)


def safe_namedtuple(
    typename: str, field_names: Any, *, rename: bool = False, defaults: Any = None, module: Any = None
) -> type:
    """collections.namedtuple that names its module itself instead of asking sys._getframe (refused)."""
    return collections.namedtuple(
        typename, field_names, rename=rename, defaults=defaults, module=module or "harness"
    )


REPLACEMENTS = {
    id(string.Formatter): SafeFormatter,
    id(functools.update_wrapper): safe_update_wrapper,
    id(functools.wraps): safe_wraps,
    id(collections.namedtuple): safe_namedtuple,
}


def public_attributes(mod: types.ModuleType) -> dict[str, Any]:
    """A module's public, non-module attributes, with the sandbox's replacements for risky ones."""
    withheld = WITHHELD.get(mod.__name__, ())
    return {
        k: REPLACEMENTS.get(id(v), v)
        for k, v in vars(mod).items()
        if not k.startswith("_") and not isinstance(v, types.ModuleType) and k not in withheld
    }


class LogSink:
    """What print() writes, up to MAX_LOG_CHARS characters in MAX_LOG_ENTRIES entries; then a marker."""

    def __init__(self) -> None:
        self.entries: list[str] = []
        self.chars = 0
        self.dropped = 0

    def write(self, text: str) -> None:
        room = MAX_LOG_CHARS - self.chars
        if room <= 0 or len(self.entries) >= MAX_LOG_ENTRIES:
            self.dropped += len(text)
            return
        self.entries.append(text[:room])
        self.chars += min(len(text), room)
        self.dropped += max(0, len(text) - room)

    def result(self) -> list[str]:
        if not self.dropped:
            return list(self.entries)
        marker = f"[whale: {self.dropped} more characters of output dropped (limit {MAX_LOG_CHARS})]\n"
        return [*self.entries, marker]


MAX_LOG_CHARS = 20_000  # what print() may leave in a rollout's logs; the rest is dropped with a marker

MAX_LOG_ENTRIES = 200


class LLMError(Exception):
    """Raised inside the harness when a model call is malformed."""
