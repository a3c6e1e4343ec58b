"""PassContext: the configuration and instruments that passes run under.

Contexts nest as ``with`` blocks; :meth:`PassContext.current` is the innermost one (a
fresh default context when none is active). An inner context replaces the outer one
entirely: nothing is inherited.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Iterable, Sequence
from typing import IO, TYPE_CHECKING, Any

from ..ir.stmt import Module
from ..target import Target, as_target
from ..target import replace as replace_figures
from .errors import PassError
from .instruments import DumpIR, PassInstrument, PassTiming, PrintAfter, PrintBefore, Verify

if TYPE_CHECKING:
    from .base import Pass

_ACTIVE: contextvars.ContextVar[tuple[PassContext, ...]] = contextvars.ContextVar(
    "ptxforge_pass_contexts", default=())

PassSelection = None | bool | str | Iterable[str]


class InstrumentedContext:
    """What every pass context shares: instruments that are entered with the outermost
    ``with`` and left with it, a stack of the active contexts of the class (``_active``),
    and running one pass under the instruments (:meth:`_run_instrumented`).

    A subclass sets ``_active`` (its own context variable), ``_ir_type`` (what its passes
    take and return), ``_returns`` (the message when a pass returns something else) and
    ``_passthrough`` (errors raised by a pass as they are, not wrapped in a
    :class:`PassError`), and calls :meth:`_start` from ``__init__``.
    """

    _active: contextvars.ContextVar
    _ir_type: type
    _returns: str
    _passthrough: tuple = ()
    instruments: list

    def _start(self, instruments: list) -> None:
        self.instruments = instruments
        self._depth = 0
        self._tokens: list[contextvars.Token] = []

    def instrument(self, kind: type) -> Any:
        """The first instrument of a type, or None."""
        return next((i for i in self.instruments if isinstance(i, kind)), None)

    @property
    def timing(self) -> PassTiming | None:
        """The pass timer, if this context times passes."""
        return self.instrument(PassTiming)

    @classmethod
    def current(cls):
        """The innermost active context of this kind, or a new default one when none is
        active."""
        stack = cls._active.get()
        return stack[-1] if stack else cls()

    @property
    def active(self) -> bool:
        """True while this context is entered."""
        return self._depth > 0

    def __enter__(self):
        if self._depth == 0:
            for inst in self.instruments:
                inst.enter_ctx(self)
        self._depth += 1
        self._tokens.append(self._active.set(self._active.get() + (self,)))
        return self

    def __exit__(self, *exc: Any) -> None:
        self._active.reset(self._tokens.pop())
        self._depth -= 1
        if self._depth == 0:
            for inst in reversed(self.instruments):
                inst.exit_ctx(self)

    def _run_instrumented(self, pass_, ir):
        """Run ``pass_.apply(ir, self)`` inside this context, with every instrument's
        hooks; a failure is raised as a :class:`PassError` naming the pass."""
        with self:
            instruments = list(self.instruments)
            if not all(inst.should_run(pass_, ir) for inst in instruments):
                return ir
            for inst in instruments:
                inst.run_before_pass(pass_, ir)
            try:
                out = pass_.apply(ir, self)
                if not isinstance(out, self._ir_type):
                    raise TypeError(f"{type(pass_).__qualname__}.apply returned "
                                    f"{type(out).__name__}; {self._returns}")
            except self._passthrough:
                raise
            except Exception as e:
                error = PassError(pass_, e, ir)
                for inst in reversed(instruments):
                    inst.run_on_error(pass_, ir, error)
                raise error from e
            for inst in reversed(instruments):
                inst.run_after_pass(pass_, ir, out)
            return out


class PassContext(InstrumentedContext):
    """Configuration and instruments for running passes.

    Parameters:
        instruments: extra :class:`~ptxforge.passes.instruments.PassInstrument` objects.
        verify: check every pass's output with the IR verifier (on by default).
        config: free-form options passes read (``"target"``: the target lowering and the
            verifier check against, see :attr:`target`; ``"gpu_limits"``).
        print_before: ``"all"`` or pass names: print the IR before those passes.
        print_after: ``"all"`` or pass names: print the IR after those passes.
        print_after_change: print after a pass only when the printed IR changed (with
            ``print_after`` unset, for every pass).
        time_passes: time every pass and print a summary when the context is left (the
            :class:`~ptxforge.passes.instruments.PassTiming` is ``ctx.timing``).
        dump_dir: write the IR after every pass into this folder
            (:class:`~ptxforge.passes.instruments.DumpIR`).
        stream: where printing goes (default: ``sys.stdout`` at the time of printing).

    ``ctx.instruments`` is the full list in hook order: ``Verify`` first, then the
    printers and the dumper, then the given instruments, then the timer.
    """

    _active = _ACTIVE
    _ir_type = Module
    _returns = "a pass returns a Module"

    def __init__(self, instruments: Sequence[PassInstrument] = (), *, verify: bool = True,
                 config: dict[str, Any] | None = None,
                 print_before: PassSelection = None, print_after: PassSelection = None,
                 print_after_change: bool = False, time_passes: bool = False,
                 dump_dir: str | os.PathLike | None = None, stream: IO[str] | None = None):
        for inst in instruments:
            if not isinstance(inst, PassInstrument):
                raise TypeError(f"PassContext instruments must be PassInstrument objects, "
                                f"got {inst!r}")
        self.config: dict[str, Any] = dict(config or {})
        self.stream = stream
        built: list[PassInstrument] = []
        if verify:
            built.append(Verify())
        if print_before is not None and print_before is not False:
            built.append(PrintBefore(print_before, stream=stream))
        if print_after is not None and print_after is not False:
            built.append(PrintAfter(print_after, only_changed=print_after_change,
                                    stream=stream))
        elif print_after_change:
            built.append(PrintAfter("all", only_changed=True, stream=stream))
        if dump_dir is not None:
            built.append(DumpIR(dump_dir))
        built.extend(instruments)
        if time_passes:
            built.append(PassTiming(report=True, stream=stream))
        if os.environ.get("PTXFORGE_CHECK_ROUNDTRIP") == "1":
            from .instruments import CheckRoundTrip

            # first in the list, so its after-hook runs last: after the verifier
            built.insert(0, CheckRoundTrip())
        self._start(built)

    # -- options ----------------------------------------------------------------------------

    @property
    def verify(self) -> bool:
        """Whether each pass's output is verified (a :class:`Verify` instrument is present).
        Setting it adds or removes that instrument."""
        return any(isinstance(i, Verify) for i in self.instruments)

    @verify.setter
    def verify(self, on: bool) -> None:
        if on and not self.verify:
            self.instruments.insert(0, Verify())
        elif not on:
            self.instruments = [i for i in self.instruments if not isinstance(i, Verify)]

    @property
    def target(self) -> Target:
        """The target passes check against: ``config["target"]`` (a string or a
        :class:`~ptxforge.target.Target`), else the current target; ``config["gpu_limits"]``
        (target figures by name) overrides some of its limits."""
        target = as_target(self.config.get("target"))
        limits = self.config.get("gpu_limits")
        if not limits:
            return target
        # a Target with changed figures is built once per context and setting (the Verify
        # instrument asks after every pass)
        key = (target, tuple(sorted(limits.items())))
        cached = getattr(self, "_limited_target", None)
        if cached is None or cached[0] != key:
            cached = (key, replace_figures(target, **limits))
            self._limited_target = cached
        return cached[1]

    # -- running ----------------------------------------------------------------------------

    def run_pass(self, pass_: Pass, module: Module) -> Module:
        """Run one pass on ``module`` with this context's instruments.

        The context is entered for the duration (so hooks of nested passes and
        :meth:`current` see it). A failure inside the pass is raised as
        :class:`~ptxforge.passes.errors.PassError` naming the pass.
        """
        from .base import Pass

        if not isinstance(pass_, Pass):
            raise TypeError(f"run_pass needs a Pass, got {pass_!r}")
        if not isinstance(module, Module):
            raise TypeError(f"pass {pass_.text} needs a Module, got {type(module).__name__}")
        pass_.check_levels(module)
        return self._run_instrumented(pass_, module)
