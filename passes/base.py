"""The pass base class.

A pass is a small frozen dataclass: a registered ``name`` (a class attribute), typed
parameters (its fields) and :meth:`Pass.apply`. Its text form is a call,
``split(conv.ff, factors=[1, 2, 2])``: fields made with :func:`~ptxforge.passes.params.positional`
print positionally, the rest as ``key=value`` (omitted when equal to their default), and
strings typed :data:`~ptxforge.passes.params.Ref` print bare.

Example::

    @register_pass
    @dataclass(frozen=True)
    class Split(Pass):
        \"\"\"Split a loop into nested loops.

        Parameters:
            loop: the loop to split, ``<stage>.<loop>``.
            factors: the extents of the inner loops, outermost first.
        \"\"\"

        name = "split"
        loop: Ref = positional()
        factors: tuple[int, ...] = ()

        def apply(self, module, ctx):
            ...
"""

from __future__ import annotations

import abc
import dataclasses
import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ..ir.attrs import Level
from .errors import PassArgumentError, PassLevelError
from .params import ParamSpec, coerce, param_specs
from .text import format_value

if TYPE_CHECKING:
    from ..ir.stmt import Module
    from .context import PassContext
    from .pipeline import Pipeline


@dataclass(frozen=True)
class Pass(abc.ABC):
    """Base class of all passes.

    Subclasses are frozen dataclasses with a class attribute ``name`` and implement
    :meth:`apply`. Field values are checked against the fields' type hints when a pass is
    built (lists become tuples); a subclass that defines ``__post_init__`` must call
    ``super().__post_init__()`` first.
    """

    name: ClassVar[str] = ""
    levels: ClassVar[tuple[Level, ...]] = ()
    """The function levels the pass works on (empty: any). A module without a function of
    one of them is refused with :class:`~ptxforge.passes.errors.PassLevelError`."""
    lowering: ClassVar[bool] = False
    """True for the lowering passes (``passes/lower/``). They run in the fixed order of the
    lowering pipeline, which assumes the schedule has not been lowered in part, so a schedule
    pipeline (a te schedule's, a record's) refuses them: ``decompose_reduction`` run early,
    for one, moves a cross-thread reduction's init out of reach of
    ``cross_thread_reduction`` and the kernel races."""

    def __post_init__(self):
        for spec in param_specs(type(self)):
            value = getattr(self, spec.name)
            try:
                checked = coerce(value, spec.type)
            except TypeError as e:
                raise PassArgumentError(
                    f"{self.pass_name()}: parameter '{spec.name}' {e}",
                    self.pass_name(), spec.name) from None
            if checked is not value:
                object.__setattr__(self, spec.name, checked)

    @abc.abstractmethod
    def apply(self, module: Module, ctx: PassContext) -> Module:
        """Transform ``module`` and return the result (a new module, or ``module`` itself
        when nothing changes). Raise an :class:`~ptxforge.ir.expr.IRError` with a message a
        user can act on when the pass does not apply."""

    # -- text form --------------------------------------------------------------------------

    @classmethod
    def pass_name(cls) -> str:
        """The registered name (the class name for an unnamed helper class)."""
        return cls.name or cls.__name__

    @classmethod
    def params_spec(cls) -> tuple[ParamSpec, ...]:
        """The parameters, in field order."""
        return param_specs(cls)

    @property
    def text(self) -> str:
        """The text form, e.g. ``split(conv.ff, factors=[1, 2, 2])``."""
        parts = []
        leading = True
        for spec in param_specs(type(self)):
            value = getattr(self, spec.name)
            leading = leading and spec.positional
            if leading:
                parts.append(format_value(value, spec.type, spec.ref))
            elif (spec.required or value != spec.default
                  or isinstance(value, bool) != isinstance(spec.default, bool)):
                parts.append(f"{spec.name}={format_value(value, spec.type, spec.ref)}")
        return f"{self.pass_name()}({', '.join(parts)})"

    def __str__(self) -> str:
        return self.text

    @classmethod
    def signature(cls) -> str:
        """The parameter list as help text: ``split(loop: ref, factors: list of int = [])``."""
        return f"{cls.pass_name()}({', '.join(s.describe() for s in param_specs(cls))})"

    def params(self) -> dict[str, Any]:
        """The parameter values by name."""
        return {s.name: getattr(self, s.name) for s in param_specs(type(self))}

    @classmethod
    def from_args(cls, *args: Any, **kwargs: Any) -> Pass:
        """Build from call arguments as read from text, with errors that name the pass.

        Positional arguments bind to fields in order, as in Python. Raises
        :class:`~ptxforge.passes.errors.PassArgumentError` for a wrong count, an unknown or
        repeated name, a missing required parameter, or a value of the wrong type.
        """
        specs = param_specs(cls)
        name = cls.pass_name()
        if len(args) > len(specs):
            raise PassArgumentError(
                f"{name}() takes {_count(len(specs), 'argument')} but {len(args)} were given; "
                f"signature: {cls.signature()}", name, None, len(specs))
        bound = {s.name: v for s, v in zip(specs, args)}
        names = [s.name for s in specs]
        for key, value in kwargs.items():
            if key not in names:
                close = difflib.get_close_matches(key, names, n=1)
                hint = f"; did you mean '{close[0]}'?" if close else (
                    f"; its parameters are {', '.join(names)}" if names else
                    "; it takes no parameters")
                raise PassArgumentError(f"{name}() has no parameter '{key}'{hint}", name, key)
            if key in bound:
                raise PassArgumentError(f"{name}() got two values for parameter '{key}'",
                                        name, key)
            bound[key] = value
        missing = [s.name for s in specs if s.required and s.name not in bound]
        if missing:
            raise PassArgumentError(
                f"{name}() is missing required parameter{'s' if len(missing) > 1 else ''} "
                f"{', '.join(repr(m) for m in missing)}; signature: {cls.signature()}",
                name, missing[0])
        return cls(**bound)

    def replace(self, **changes: Any) -> Pass:
        """A copy with some parameters changed (checked like any construction)."""
        return dataclasses.replace(self, **changes)

    # -- levels -----------------------------------------------------------------------------

    def check_levels(self, module: Module) -> None:
        """Raise :class:`~ptxforge.passes.errors.PassLevelError` unless ``module`` holds a
        function of a level this pass works on."""
        if not self.levels:
            return
        have = [f.level for f in module.functions.values()]
        if any(lv in self.levels for lv in have):
            return
        want = " or ".join(lv.describe() for lv in self.levels)
        got = ", ".join(dict.fromkeys(lv.describe() for lv in have)) or "no functions"
        hint = {Level.PRIM: "; it runs before split_host_device",
                Level.KERNEL: "; lower the module to device IR first (split_host_device)",
                Level.HOST: ""}[self.levels[0]]
        raise PassLevelError(
            f"pass {self.text} works on {want} functions, but the module holds {got}{hint}",
            self.pass_name(), tuple(self.levels), tuple(dict.fromkeys(have)))

    def map_functions(self, module: Module, fn: Callable[[Any], Any]) -> Module:
        """A new module with ``fn(func) -> func`` applied to every function of the levels
        this pass works on (checked first); the others are kept as they are."""
        from ..ir.stmt import Module

        self.check_levels(module)
        levels = self.levels
        return Module([fn(f) if not levels or f.level in levels else f
                       for f in module.functions.values()], module.attrs)

    # -- running ----------------------------------------------------------------------------

    def __call__(self, module: Module, ctx: PassContext | None = None) -> Module:
        """Run this pass on ``module`` through ``ctx`` (default: the current context),
        with its instruments and verification."""
        from .context import PassContext

        return (ctx if ctx is not None else PassContext.current()).run_pass(self, module)

    def __add__(self, other: Any) -> Pipeline:
        from .pipeline import Pipeline

        return Pipeline([self]) + other


@dataclass(frozen=True)
class FunctionPass(Pass):
    """A pass without parameters made from a plain function ``f(module, ctx) -> module``
    by :func:`~ptxforge.passes.registry.register_function_pass`."""

    function: ClassVar[Callable[[Any, Any], Any]]

    def apply(self, module: Module, ctx: PassContext) -> Module:
        return type(self).function(module, ctx)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")
