"""Errors of the pass infrastructure.

Every error here is an :class:`ptxforge.ir.expr.IRError` (a ``ValueError``), so a tuner
can catch one type for "this candidate schedule is invalid" and keep searching.
"""

from __future__ import annotations

from ..ir.expr import IRError


class PassError(IRError):
    """A pass failed while running.

    The message names the pass by its text form, then the original error:
    ``pass split(conv.ff, factors=[1, 2, 2]) failed: loop conv.ff not found``. The original
    exception is kept as ``original`` (and as ``__cause__``); ``pass_`` is the failing pass
    and ``module`` the IR it was given.
    """

    def __init__(self, pass_, original: BaseException, module=None):
        self.pass_ = pass_
        self.pass_text = str(pass_)
        self.original = original
        self.module = module
        super().__init__(f"pass {self.pass_text} failed: {describe_error(original)}")


class PassArgumentError(IRError, TypeError):
    """A pass was given parameters it does not accept (count, name or type).

    ``pass_name`` is the registered name, ``param`` the parameter at fault (or None where the
    error is about the whole argument list) and ``index`` the position of the offending
    positional argument, if any.
    """

    def __init__(self, message: str, pass_name: str = "", param: str | None = None,
                 index: int | None = None):
        super().__init__(message)
        self.pass_name = pass_name
        self.param = param
        self.index = index


class PassLevelError(IRError):
    """A pass was given a module without a function of a level it works on (a lowering pass
    on tensor IR, a schedule pass on device IR). ``pass_name``, the ``levels`` it takes and the
    levels the module ``has`` say which."""

    def __init__(self, message: str, pass_name: str = "", levels: tuple = (), has: tuple = ()):
        super().__init__(message)
        self.pass_name = pass_name
        self.levels = tuple(levels)
        self.has = tuple(has)


class UnknownPassError(IRError, LookupError):
    """No pass is registered under a name. ``suggestions`` lists close matches."""

    def __init__(self, message: str, name: str = "", suggestions: tuple = ()):
        super().__init__(message)
        self.name = name
        self.suggestions = tuple(suggestions)


class PassRegistryError(IRError):
    """A pass could not be registered (duplicate or malformed name, not a Pass subclass) or
    a plug-in entry point could not be loaded."""


class PipelineParseError(IRError):
    """Pipeline text could not be read.

    ``text`` is the whole text, ``offset`` the 0-based character offset of the fault,
    ``line`` and ``column`` its 1-based position. The message shows the line with a caret
    under the fault.
    """

    def __init__(self, message: str, text: str = "", offset: int = 0):
        self.reason = message
        self.text = text
        self.offset = max(0, min(offset, len(text)))
        self.line, self.column = line_and_column(text, self.offset)
        super().__init__(self._render())

    def _render(self) -> str:
        lines = self.text.split("\n")
        src = lines[self.line - 1] if lines else ""
        where = f"line {self.line}, column {self.column}" if len(lines) > 1 else (
            f"column {self.column}")
        return (f"cannot parse pipeline text at {where}: {self.reason}\n"
                f"  {src}\n  {' ' * (self.column - 1)}^")


class UnknownPassParseError(PipelineParseError, UnknownPassError):
    """Pipeline text names a pass that is not registered (both a parse error, with its
    position, and an :class:`UnknownPassError`, with its suggestions)."""

    def __init__(self, message: str, text: str, offset: int, name: str, suggestions: tuple):
        PipelineParseError.__init__(self, message, text, offset)
        # set after: the base initializers (through UnknownPassError) reset them
        self.name = name
        self.suggestions = tuple(suggestions)


class LoweringPassInScheduleError(PipelineParseError):
    """A schedule pipeline (a te schedule's, a record's) holds a lowering pass. Lowering passes
    run only in the lowering pipeline, after the whole schedule: one run early lowers part of
    the IR behind the back of the passes that follow (``decompose_reduction`` before
    ``cross_thread_reduction`` makes a kernel that races). ``pass_name`` names it."""

    def __init__(self, pass_name: str, text: str, offset: int):
        super().__init__(
            f"{pass_name}() is a lowering pass, which a schedule cannot hold: lowering runs "
            "it in its fixed place after the schedule; remove it from the schedule", text,
            offset)
        self.pass_name = pass_name


def line_and_column(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column of a character offset."""
    line = text.count("\n", 0, offset) + 1
    start = text.rfind("\n", 0, offset) + 1
    return line, offset - start + 1


def describe_error(e: BaseException) -> str:
    """An exception as one message: IR errors by their text, others with their type too."""
    text = str(e)
    if isinstance(e, IRError) and text:
        return text
    if isinstance(e, KeyError) and len(e.args) == 1:
        text = repr(e.args[0])
    return f"{type(e).__name__}: {text}" if text else type(e).__name__
