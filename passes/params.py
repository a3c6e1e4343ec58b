"""Typed pass parameters.

A pass's parameters are its dataclass fields. Their type hints say what values are legal;
:func:`coerce` checks a value against a hint and normalizes it (lists become tuples so
frozen passes stay hashable, numpy scalars become Python numbers, ints become floats where
a float is expected). Supported hints: ``int``, ``float``, ``bool``, ``str``, :data:`Ref`,
``None``, unions (``int | None``), ``Literal[...]``, ``tuple[X, ...]``, ``tuple[X, Y]``,
``list[X]`` and ``Sequence[X]`` (both stored as tuples), ``Any``, and plain classes.

Two field markers shape the text form (see :mod:`ptxforge.passes.text`):

* :data:`Ref` (``Annotated[str, REF]``), or field metadata ``{"ref": True}``: the string
  names a stage or loop (``conv.ff.o``) and prints bare instead of quoted;
* :func:`positional`, or field metadata ``{"positional": True}``: the field prints as a
  positional argument (only a leading run of fields can).
"""

from __future__ import annotations

import collections.abc
import dataclasses
import numbers
import types
import typing
from dataclasses import MISSING
from typing import Annotated, Any, Literal, Union


class _RefMarker:
    """Marks a string type as a reference to a stage or loop (printed bare in pass text)."""

    def __repr__(self):
        return "REF"


REF = _RefMarker()
Ref = Annotated[str, REF]
"""A stage, loop or buffer name, such as ``conv`` or ``conv.ff.o.i``; printed bare."""


def positional(default: Any = MISSING, *, default_factory: Any = MISSING,
               ref: bool = False) -> Any:
    """A dataclass field printed as a positional argument in pass text.

    ``ref=True`` also marks every string in it as a name printed bare (same as typing the
    field with :data:`Ref`).
    """
    metadata = {"positional": True}
    if ref:
        metadata["ref"] = True
    return dataclasses.field(default=default, default_factory=default_factory,
                             metadata=metadata)


@dataclasses.dataclass(frozen=True)
class ParamSpec:
    """One parameter of a pass: a dataclass field with its resolved type."""

    name: str
    type: Any
    positional: bool
    ref: bool
    default: Any  # MISSING when required

    @property
    def required(self) -> bool:
        return self.default is MISSING

    def describe(self) -> str:
        """``name: type`` or ``name: type = default``, as shown in signatures."""
        from .text import format_value

        out = f"{self.name}: {type_name(self.type)}"
        if not self.required:
            try:
                out += f" = {format_value(self.default, self.type, self.ref)}"
            except ValueError:
                out += f" = {self.default!r}"
        return out


def param_specs(cls: type) -> tuple[ParamSpec, ...]:
    """The parameters of a pass class, in field order (cached on the class)."""
    cached = cls.__dict__.get("_ptxforge_param_specs")
    if cached is not None:
        return cached
    try:
        hints = typing.get_type_hints(cls, include_extras=True)
    except Exception as e:  # an unresolvable forward reference in an annotation
        from .errors import PassRegistryError

        raise PassRegistryError(
            f"pass class {cls.__qualname__}: cannot resolve the type hints of its fields "
            f"({type(e).__name__}: {e}); import every name used in an annotation at module "
            "level") from e
    specs = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        tp = hints.get(f.name, Any)
        if f.default is not MISSING:
            default = f.default
        elif f.default_factory is not MISSING:
            default = f.default_factory()
        else:
            default = MISSING
        specs.append(ParamSpec(f.name, tp, bool(f.metadata.get("positional", False)),
                               bool(f.metadata.get("ref", False)), default))
    out = tuple(specs)
    # set on the class itself (not inherited) so subclasses compute their own
    type.__setattr__(cls, "_ptxforge_param_specs", out)
    return out


# ---------------------------------------------------------------------------------------
# checking values against type hints

_FAIL = object()
_SEQUENCE_ORIGINS = (tuple, list, collections.abc.Sequence, typing.Sequence)


def coerce(value: Any, tp: Any) -> Any:
    """``value`` normalized for the type hint ``tp``.

    Raises ``TypeError`` with a one-line description of the mismatch when the value does not
    fit.
    """
    out = _coerce(value, tp, strict=True)
    if out is _FAIL:
        out = _coerce(value, tp, strict=False)
    if out is _FAIL:
        raise TypeError(f"expects {type_name(tp)}, got {_show(value)}")
    return out


def _show(value: Any) -> str:
    # values as pass text shows them ([1, "a"]), which is how most users wrote them
    from .text import format_value

    try:
        return format_value(value)
    except ValueError:
        return repr(value)


def freeze(value: Any) -> Any:
    """Lists (nested) as tuples, numpy scalars as Python numbers."""
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    item = getattr(value, "item", None)
    if item is not None and type(value).__module__ == "numpy" and getattr(value, "ndim", 1) == 0:
        return item()
    return value


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) is Union or isinstance(tp, types.UnionType)


def _coerce(value: Any, tp: Any, strict: bool) -> Any:
    t = type(value)
    if t is tp and (t is int or t is str or t is float or t is bool):
        return value  # the common case, what the checks below return for it unchanged
    if tp is Any or tp is object:
        return freeze(value)
    origin = typing.get_origin(tp)
    if origin is Annotated:
        base, *meta = typing.get_args(tp)
        out = _coerce(value, base, strict)
        if out is not _FAIL and any(m is REF for m in meta) and out == "":
            return _FAIL
        return out
    if tp is None or tp is type(None):
        return None if value is None else _FAIL
    if _is_union(tp):
        members = typing.get_args(tp)
        # every member is tried without conversions first, so ``int | float`` keeps 2 an int
        for s in (True,) if strict else (True, False):
            for m in members:
                out = _coerce(value, m, s)
                if out is not _FAIL:
                    return out
        return _FAIL
    if origin is Literal:
        for lit in typing.get_args(tp):
            if type(value) is type(lit) and value == lit:
                return value
        return _FAIL
    if tp is bool:
        if isinstance(value, bool):
            return value
        if type(value).__module__ == "numpy" and getattr(value, "dtype", None) is not None \
                and value.dtype.kind == "b":
            return bool(value)
        return _FAIL
    if tp is int:
        if isinstance(value, numbers.Integral) and not isinstance(value, bool) \
                and getattr(getattr(value, "dtype", None), "kind", "i") != "b":
            return int(value)
        return _FAIL
    if tp is float:
        if isinstance(value, bool):
            return _FAIL
        if isinstance(value, float) or (not strict and isinstance(value, numbers.Real)):
            return float(value)
        return _FAIL
    if tp is str:
        return str(value) if isinstance(value, str) else _FAIL
    if tp in (tuple, list) or origin in _SEQUENCE_ORIGINS or tp is collections.abc.Sequence:
        if not isinstance(value, (list, tuple)):
            return _FAIL
        args = typing.get_args(tp)
        if not args:
            return freeze(value)
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            if args == ((),):  # tuple[()]
                args = ()
            if len(value) != len(args):
                return _FAIL
            elem_types = args
        else:
            elem_types = (args[0],) * len(value)
        out = []
        for v, t in zip(value, elem_types):
            r = _coerce(v, t, strict)
            if r is _FAIL:
                return _FAIL
            out.append(r)
        return tuple(out)
    if isinstance(tp, type):
        return value if isinstance(value, tp) else _FAIL
    # a typing construct outside the supported set: accept, but keep the pass hashable
    return freeze(value)


def type_name(tp: Any) -> str:
    """A short readable name for a type hint: ``int``, ``list of int``, ``ref or None``."""
    if tp is Any or tp is object:
        return "any value"
    origin = typing.get_origin(tp)
    if origin is Annotated:
        base, *meta = typing.get_args(tp)
        if any(m is REF for m in meta):
            return "ref"
        return type_name(base)
    if tp is None or tp is type(None):
        return "None"
    if _is_union(tp):
        return " or ".join(type_name(m) for m in typing.get_args(tp))
    if origin is Literal:
        return "one of " + ", ".join(repr(v) for v in typing.get_args(tp))
    if tp in (tuple, list) or tp is collections.abc.Sequence:
        return "list"
    if origin in _SEQUENCE_ORIGINS:
        args = typing.get_args(tp)
        if not args:
            return "list"
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            return "[" + ", ".join(type_name(a) for a in args) + "]"
        inner = type_name(args[0])
        return f"list of ({inner})" if " " in inner else f"list of {inner}"
    if isinstance(tp, type):
        return tp.__name__
    return str(tp)


def is_ref_type(tp: Any) -> bool:
    """True if strings at this type position are references (printed bare)."""
    origin = typing.get_origin(tp)
    if origin is Annotated:
        base, *meta = typing.get_args(tp)
        return any(m is REF for m in meta) or is_ref_type(base)
    if _is_union(tp):
        return any(is_ref_type(m) for m in typing.get_args(tp))
    return False


def element_type(tp: Any, index: int) -> Any:
    """The type hint of element ``index`` of a sequence value typed ``tp`` (Any if unknown)."""
    origin = typing.get_origin(tp)
    if origin is Annotated:
        return element_type(typing.get_args(tp)[0], index)
    if _is_union(tp):
        for m in typing.get_args(tp):
            inner = m
            while typing.get_origin(inner) is Annotated:
                inner = typing.get_args(inner)[0]
            if inner in (tuple, list) or typing.get_origin(inner) in _SEQUENCE_ORIGINS:
                return element_type(inner, index)
        return Any
    if origin in _SEQUENCE_ORIGINS:
        args = typing.get_args(tp)
        if not args:
            return Any
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            return args[index] if index < len(args) else Any
        return args[0]
    return Any
