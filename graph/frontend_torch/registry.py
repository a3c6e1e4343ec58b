"""The table of converters: one per ATen overload, each naming the graph ops it emits.

A converter is a plain function ``fn(cx, a) -> value`` registered for one or more overloads
(``"aten.add.Tensor"``): ``cx`` is the :class:`~.context.ConvertContext` of the node being
translated and ``a`` its arguments bound to the overload's schema by name (``a.self``,
``a.other``, ``a.alpha``; defaults filled in). ``needs`` lists the graph operators it may
emit: an overload is supported when every one of them is registered, so the table follows
the operators the graph layer has, and the docs' count is computed, never typed in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..op import get_op, list_ops


@dataclass(frozen=True)
class Converter:
    """How one ATen overload becomes graph ops.

    Attributes:
        overload: the overload's name, ``"aten.add.Tensor"``.
        fn: ``(cx, a) -> value``: a graph node, a tuple of them, or a Python value.
        needs: the graph operators it may emit (empty: evaluated while importing, or
            views that emit nothing).
        maps_to: a short description for the coverage table (default: ``needs``).
        note: a limit of the translation (an argument value it rejects), for the docs.
        computes: for an overload returning several values, the positions of those the
            converter computes (the others are refused where a graph reads them); None: all.
    """

    overload: str
    fn: Callable
    needs: tuple[str, ...]
    maps_to: str
    note: str = ""
    computes: tuple[int, ...] | None = None

    def missing_ops(self) -> list[str]:
        """The graph operators this converter needs that are not registered."""
        have = set(list_ops())
        return [n for n in self.needs if not _has(n, have)]

    @property
    def available(self) -> bool:
        return not self.missing_ops()


def _has(need: str, have: set[str]) -> bool:
    """``"op"``: the operator is registered; ``"op:attr"``: and it takes that attribute."""
    op, _, attr = need.partition(":")
    if op not in have:
        return False
    return not attr or attr in get_op(op).defaults


CONVERTERS: dict[str, Converter] = {}


def converter(*overloads: str, needs: tuple[str, ...] | str = (), maps_to: str = "",
              note: str = "", computes: tuple[int, ...] | None = None):
    """Register ``fn`` as the converter of each of ``overloads``."""
    needed = (needs,) if isinstance(needs, str) else tuple(needs)

    def wrap(fn):
        for name in overloads:
            if name in CONVERTERS:
                raise ValueError(f"{name} already has a converter")
            CONVERTERS[name] = Converter(name, fn, needed,
                                         maps_to or ", ".join(needed) or "import-time value",
                                         note, computes)
        return fn

    return wrap


def lookup(overload: str) -> Converter | None:
    """The converter of ``overload`` (``"aten.add.Tensor"``), or None."""
    _load()
    return CONVERTERS.get(overload)


_loaded = False


def _load() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        from . import (  # noqa: F401
            convert_attention,
            convert_extra,
            convert_grad,
            convert_math,
            convert_nn,
            convert_sampling,
            convert_tensor,
        )
