"""Pipeline: an ordered list of passes with a text form.

``Pipeline.parse("inline(pad_temp), split(conv.ff, factors=[1, 2, 2])")`` reads text
(passes separated by commas and/or line breaks; see :mod:`ptxforge.passes.text`), and
``pipeline.text`` prints the canonical single-line form, so
``Pipeline.parse(t).text == t`` for canonical ``t``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, overload

from . import gc_pause
from .base import Pass
from .errors import (
    LoweringPassInScheduleError,
    PassArgumentError,
    PipelineParseError,
    UnknownPassError,
    UnknownPassParseError,
)
from .registry import DEFAULT_REGISTRY, PassRegistry
from .text import Call, parse_calls

if TYPE_CHECKING:
    from ..ir.stmt import Module
    from .context import PassContext

WRAP_WIDTH = 100
"""Pipelines whose text is longer than this print one pass per line in :meth:`format`."""


class Pipeline:
    """An ordered, immutable list of passes.

    Supports ``len``, iteration, indexing (a slice is a Pipeline), ``+`` with a Pipeline, a
    Pass or a sequence of passes, and equality by text.
    """

    __slots__ = ("_passes",)

    def __init__(self, passes: Iterable[Pass] = ()):
        passes = tuple(passes)
        for i, p in enumerate(passes):
            if not isinstance(p, Pass):
                raise TypeError(f"pipeline entry {i} is not a Pass: {p!r}")
        self._passes = passes

    @property
    def passes(self) -> tuple[Pass, ...]:
        return self._passes

    # -- text -------------------------------------------------------------------------------

    @property
    def text(self) -> str:
        """The canonical text: passes joined by ``", "``."""
        return ", ".join(p.text for p in self._passes)

    def format(self, one_per_line: bool | None = None) -> str:
        """The text, one pass per line (each but the last ending in a comma) when
        ``one_per_line``, or, when None, when the single line is longer than
        :data:`WRAP_WIDTH`. Both forms parse back to the same pipeline."""
        text = self.text
        if one_per_line is None:
            one_per_line = len(text) > WRAP_WIDTH
        return ",\n".join(p.text for p in self._passes) if one_per_line else text

    def __str__(self) -> str:
        return self.format()

    def __repr__(self) -> str:
        return f"Pipeline.parse({self.text!r})"

    @classmethod
    def parse(cls, text: str, registry: PassRegistry | None = None) -> Pipeline:
        """Read pipeline text; pass names are looked up in ``registry`` (default: the
        global one, with built-ins and plug-ins).

        Raises :class:`~ptxforge.passes.errors.PipelineParseError` with the line and column
        for malformed text, unknown pass names (then also an
        :class:`~ptxforge.passes.errors.UnknownPassError`) and wrong arguments.
        """
        reg = registry or DEFAULT_REGISTRY
        return cls(_bind(call, text, reg) for call in parse_calls(text))

    # -- running ----------------------------------------------------------------------------

    def __call__(self, module: Module, ctx: PassContext | None = None) -> Module:
        """Run the passes in order through ``ctx`` (default: the current context)."""
        from .context import PassContext

        ctx = ctx if ctx is not None else PassContext.current()
        with ctx, gc_pause.paused():  # (a build's IR is freed by reference counting)
            for p in self._passes:
                module = ctx.run_pass(p, module)
        return module

    # -- sequence behavior ------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._passes)

    def __iter__(self) -> Iterator[Pass]:
        return iter(self._passes)

    @overload
    def __getitem__(self, index: int) -> Pass: ...

    @overload
    def __getitem__(self, index: slice) -> Pipeline: ...

    def __getitem__(self, index: int | slice) -> Pass | Pipeline:
        if isinstance(index, slice):
            return type(self)(self._passes[index])
        return self._passes[index]

    def __add__(self, other: Any) -> Pipeline:
        # the result is of this pipeline's type: a schedule pipeline stays one (and checks
        # what is added to it)
        if isinstance(other, Pipeline):
            return type(self)(self._passes + other._passes)
        if isinstance(other, Pass):
            return type(self)(self._passes + (other,))
        if isinstance(other, (list, tuple)):
            return type(self)(self._passes + tuple(other))
        return NotImplemented

    def __radd__(self, other: Any) -> Pipeline:
        if isinstance(other, Pass):
            return type(self)((other,) + self._passes)
        if isinstance(other, (list, tuple)):
            return type(self)(tuple(other) + self._passes)
        return NotImplemented

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Pipeline):
            return self.text == other.text
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.text)


class SchedulePipeline(Pipeline):
    """A pipeline of schedule passes: what a te schedule records and a record stores.

    It cannot hold a lowering pass (:attr:`Pass.lowering <ptxforge.passes.base.Pass.lowering>`):
    building one with a lowering pass, parsing text that names one, or adding one raises
    :class:`~ptxforge.passes.errors.LoweringPassInScheduleError`, whose position points at
    the pass. Lowering (:func:`~ptxforge.passes.lower.lowering_pipeline`) runs after it.
    """

    __slots__ = ()

    def __init__(self, passes: Iterable[Pass] = ()):
        super().__init__(passes)
        for i, p in enumerate(self._passes):
            if getattr(p, "lowering", False):
                offset = sum(len(q.text) + 2 for q in self._passes[:i])
                raise LoweringPassInScheduleError(p.pass_name(), self.text, offset)

    @classmethod
    def parse(cls, text: str, registry: PassRegistry | None = None) -> SchedulePipeline:
        """Read schedule text like :meth:`Pipeline.parse`; a lowering pass is refused at its
        position in ``text``."""
        reg = registry or DEFAULT_REGISTRY
        passes = []
        for call in parse_calls(text):
            p = _bind(call, text, reg)
            if getattr(p, "lowering", False):
                raise LoweringPassInScheduleError(p.pass_name(), text, call.pos)
            passes.append(p)
        return cls(passes)

    @classmethod
    def of(cls, passes: Pass | Pipeline | str) -> SchedulePipeline:
        """``passes`` (a pass, a pipeline, or pipeline text) as a schedule pipeline."""
        if isinstance(passes, cls):
            return passes
        if isinstance(passes, str):
            return cls.parse(passes)
        if isinstance(passes, Pass):
            return cls([passes])
        return cls(passes)

    def __repr__(self) -> str:
        return f"SchedulePipeline.parse({self.text!r})"


def parse_pass(text: str, registry: PassRegistry | None = None) -> Pass:
    """Read the text of exactly one pass, e.g. ``split(conv.ff, factors=[1, 2, 2])``."""
    calls = parse_calls(text)
    if len(calls) != 1:
        offset = calls[1].pos if len(calls) > 1 else 0
        raise PipelineParseError(f"expected exactly one pass, got {len(calls)}", text, offset)
    return _bind(calls[0], text, registry or DEFAULT_REGISTRY)


def _bind(call: Call, text: str, registry: PassRegistry) -> Pass:
    """Build the pass of one parsed call, reporting errors at their position."""
    try:
        cls = registry.get(call.name)
    except UnknownPassError as e:
        raise UnknownPassParseError(str(e), text, call.pos, call.name, e.suggestions) from None
    names = [s.name for s in cls.params_spec()]
    positional = [a for a in call.args if a.key is None]
    args = [a.value for a in positional]
    kwargs: dict[str, Any] = {}
    value_pos = {n: a.pos for n, a in zip(names, positional)}
    key_pos: dict[str, int] = {}
    for a in call.args:
        if a.key is not None:
            if a.key in kwargs:
                raise PipelineParseError(
                    f"{call.name}() got parameter '{a.key}' twice", text, a.key_pos)
            kwargs[a.key] = a.value
            key_pos[a.key] = a.key_pos
            value_pos.setdefault(a.key, a.pos)
    try:
        return cls.from_args(*args, **kwargs)
    except PassArgumentError as e:
        if e.index is not None and e.index < len(positional):
            offset = positional[e.index].pos  # one argument too many
        elif e.param in key_pos and (e.param not in names or value_pos[e.param] != kwargs_pos(
                call, e.param)):
            offset = key_pos[e.param]  # an unknown parameter, or one given twice
        elif e.param in value_pos:
            offset = value_pos[e.param]  # a value of the wrong type
        else:
            offset = call.end - 1  # a missing parameter: at the closing parenthesis
        raise PipelineParseError(str(e), text, offset) from e
    except Exception as e:
        # a pass's own validation in __post_init__ (a bad combination of values)
        raise PipelineParseError(f"{call.name}: {e}", text, call.pos) from e


def kwargs_pos(call: Call, key: str) -> int:
    """The offset of the value of keyword argument ``key`` in ``call``."""
    return next(a.pos for a in call.args if a.key == key)
