"""A small schema language for the manifest of an exported module, and its validator.

A loader reads a manifest it did not write, so every value is checked for its type and
range before anything uses it: an integer is an ``int`` (not a bool, not a float such as
``1e400``), within its bounds; a string is a ``str`` of bounded length; lists, objects and
maps have bounded sizes and known keys. :func:`validate` raises :class:`SchemaError` with
the path of the first value that does not fit (``plan.slots[3].nbytes: expected an integer
in [0, 1099511627776], got 1e+400``); the loader turns it into a ``ModuleFormatError``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

MAX_ITEMS = 1 << 20
"""The most entries of any list or object in a manifest (a network of a million kernels is
not one anyone exports)."""


class SchemaError(ValueError):
    """A manifest value that does not fit its schema; ``path`` says where."""

    def __init__(self, path: str, message: str):
        super().__init__(f"{path or 'the manifest'}: {message}")
        self.path = path


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class Schema:
    """Base of the schema nodes: :meth:`check` raises :class:`SchemaError`."""

    def check(self, value: Any, path: str) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


@dataclass(frozen=True)
class Int(Schema):
    """An ``int`` (never a bool or a float) in ``[lo, hi]``."""

    lo: int = 0
    hi: int = 1 << 62

    def check(self, value, path):
        if type(value) is not int or not self.lo <= value <= self.hi:
            raise SchemaError(path, f"expected an integer in [{self.lo}, {self.hi}], got "
                                    f"{_show(value)}")


@dataclass(frozen=True)
class Bool(Schema):
    """``true`` or ``false``."""

    def check(self, value, path):
        if type(value) is not bool:
            raise SchemaError(path, f"expected true or false, got {_show(value)}")


@dataclass(frozen=True)
class Str(Schema):
    """A string of at most ``max_len`` characters, matching ``pattern`` (a full match) or
    one of ``choices`` when given."""

    max_len: int = 4096
    pattern: str = ""
    choices: tuple = ()

    def check(self, value, path):
        if not isinstance(value, str) or len(value) > self.max_len:
            raise SchemaError(path, f"expected a string of at most {self.max_len} characters, "
                                    f"got {_show(value)}")
        if self.choices and value not in self.choices:
            raise SchemaError(path, f"expected one of {', '.join(self.choices)}, got "
                                    f"{_show(value)}")
        if self.pattern and not re.fullmatch(self.pattern, value):
            raise SchemaError(path, f"{_show(value)} is not a valid value here (expected "
                                    f"/{self.pattern}/)")


@dataclass(frozen=True)
class Nullable(Schema):
    """``null`` or a value of ``inner``."""

    inner: Schema

    def check(self, value, path):
        if value is not None:
            self.inner.check(value, path)


@dataclass(frozen=True)
class List(Schema):
    """A list of ``item`` values, of ``min_len`` to ``max_len`` entries."""

    item: Schema
    min_len: int = 0
    max_len: int = MAX_ITEMS

    def check(self, value, path):
        if not isinstance(value, list) or not self.min_len <= len(value) <= self.max_len:
            size = (f"{self.min_len}" if self.min_len == self.max_len
                    else f"{self.min_len} to {self.max_len}")
            raise SchemaError(path, f"expected a list of {size} entries, got {_show(value)}")
        for k, v in enumerate(value):
            self.item.check(v, f"{path}[{k}]")


@dataclass(frozen=True)
class Obj(Schema):
    """An object with the keys of ``fields`` (each required) and ``optional``; any other
    key is refused, so a misspelt or foreign field is an error rather than ignored."""

    fields: dict = field(default_factory=dict)
    optional: dict = field(default_factory=dict)

    def check(self, value, path):
        if not isinstance(value, dict):
            raise SchemaError(path, f"expected an object, got {_show(value)}")
        for key, schema in self.fields.items():
            if key not in value:
                raise SchemaError(path, f"has no {key!r}")
            schema.check(value[key], f"{path}.{key}" if path else key)
        for key in value:
            if key in self.optional:
                self.optional[key].check(value[key], f"{path}.{key}" if path else key)
            elif key not in self.fields:
                raise SchemaError(path, f"unexpected key {_show(key)}")


@dataclass(frozen=True)
class Map(Schema):
    """An object used as a map: keys of ``key`` (a :class:`Str`), values of ``value``."""

    key: Str
    value: Schema
    max_len: int = MAX_ITEMS

    def check(self, value, path):
        if not isinstance(value, dict) or len(value) > self.max_len:
            raise SchemaError(path, f"expected an object of at most {self.max_len} entries, "
                                    f"got {_show(value)}")
        for k, v in value.items():
            self.key.check(k, f"{path} key {_show(k)}")
            self.value.check(v, f"{path}[{k!r}]")


def validate(value: Any, schema: Schema) -> None:
    """Raise :class:`SchemaError` unless ``value`` fits ``schema``."""
    schema.check(value, "")
