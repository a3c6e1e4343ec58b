"""Pass instruments: hooks a :class:`~ptxforge.passes.context.PassContext` calls around
every pass it runs.

Order: ``run_before_pass`` hooks run in the order of ``ctx.instruments`` and
``run_after_pass`` hooks in reverse order, so the first instrument wraps the others. The
context puts :class:`Verify` first (its check runs after the IR was printed or dumped, so a
broken IR is visible) and :class:`PassTiming` last (its clock excludes the other hooks).
"""

from __future__ import annotations

import hashlib
import importlib
import os
import sys
import time
import warnings
from collections.abc import Iterable
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..ir.stmt import Module
    from .base import Pass
    from .context import PassContext


class PassInstrument:
    """Base class of instruments; every hook does nothing by default."""

    def enter_ctx(self, ctx: PassContext) -> None:
        """Called when ``ctx`` is entered (the outermost ``with``)."""

    def exit_ctx(self, ctx: PassContext) -> None:
        """Called when ``ctx`` is left (the outermost ``with``)."""

    def should_run(self, pass_: Pass, module: Module) -> bool:
        """Return False to skip ``pass_`` (its input is then its output)."""
        return True

    def run_before_pass(self, pass_: Pass, module: Module) -> None:
        """Called before ``pass_`` runs on ``module``."""

    def run_after_pass(self, pass_: Pass, module_before: Module, module_after: Module) -> None:
        """Called after ``pass_`` turned ``module_before`` into ``module_after``."""

    def run_on_error(self, pass_: Pass, module: Module, error: BaseException) -> None:
        """Called when ``pass_`` raised ``error`` (instead of :meth:`run_after_pass`)."""


def ir_text(module: Module) -> str:
    """The printed IR of a module (``str(module)``)."""
    return str(module)


def _write(stream: IO[str] | None, text: str) -> None:
    # resolved at write time so a redirected sys.stdout (pytest's capsys) is honored
    out = stream if stream is not None else sys.stdout
    out.write(text if text.endswith("\n") else text + "\n")
    flush = getattr(out, "flush", None)
    if flush is not None:
        flush()


class _PassSelection:
    """``"all"`` or a set of pass names."""

    def __init__(self, passes: str | Iterable[str] | bool, what: str):
        if passes is True or passes == "all":
            self.names: frozenset[str] | None = None
        elif isinstance(passes, str):
            self.names = frozenset([passes])
        else:
            names = list(passes)
            bad = [n for n in names if not isinstance(n, str)]
            if bad:
                raise TypeError(f"{what}: pass names must be strings, got {bad[0]!r}")
            self.names = frozenset(names)
        self.what = what
        self.matched: set[str] = set()

    def __call__(self, pass_: Pass) -> bool:
        name = pass_.pass_name()
        if self.names is None or name in self.names:
            self.matched.add(name)
            return True
        return False

    def warn_unmatched(self) -> None:
        """Warn about selected names that matched no pass that ran and name no known pass,
        so a misspelled name does not silently print nothing."""
        if self.names is None:
            return
        from .errors import UnknownPassError
        from .registry import DEFAULT_REGISTRY

        for name in sorted(self.names - self.matched):
            try:
                DEFAULT_REGISTRY.get(name)
            except UnknownPassError as e:
                warnings.warn(f"{self.what} names no known pass: {e}", stacklevel=4)
            except Exception as e:  # noqa: BLE001 - a diagnostic must not fail the context
                warnings.warn(f"{self.what}: cannot check the pass name '{name}': "
                              f"{type(e).__name__}: {e}", stacklevel=4)


class PrintBefore(PassInstrument):
    """Print the IR before each selected pass (``passes``: ``"all"`` or names), under a
    header ``;; IR before <pass text>``."""

    def __init__(self, passes: str | Iterable[str] = "all", stream: IO[str] | None = None):
        self.select = _PassSelection(passes, "print_before")
        self.stream = stream

    def run_before_pass(self, pass_: Pass, module: Module) -> None:
        if self.select(pass_):
            _write(self.stream, f";; IR before {pass_.text}\n{ir_text(module)}")

    def exit_ctx(self, ctx: PassContext) -> None:
        self.select.warn_unmatched()


class PrintAfter(PassInstrument):
    """Print the IR after each selected pass (``passes``: ``"all"`` or names), under a
    header ``;; IR after <pass text>``; with ``only_changed``, only where the printed IR
    differs from the pass's input."""

    def __init__(self, passes: str | Iterable[str] = "all", only_changed: bool = False,
                 stream: IO[str] | None = None):
        self.select = _PassSelection(passes, "print_after")
        self.only_changed = only_changed
        self.stream = stream
        # the last module printed and its text: usually the next pass's input
        self._last: tuple[Any, str] | None = None

    def _text(self, module: Module) -> str:
        if self._last is not None and self._last[0] is module:
            return self._last[1]
        text = ir_text(module)
        self._last = (module, text)
        return text

    def run_after_pass(self, pass_: Pass, module_before: Module, module_after: Module) -> None:
        if not self.select(pass_):
            return
        if self.only_changed:
            if module_after is module_before:
                return
            before = self._text(module_before)
            after = self._text(module_after)
            if before == after:
                return
        else:
            after = ir_text(module_after)
        _write(self.stream, f";; IR after {pass_.text}\n{after}")

    def exit_ctx(self, ctx: PassContext) -> None:
        self._last = None
        self.select.warn_unmatched()


class PassTiming(PassInstrument):
    """Wall time of every pass run.

    ``records`` holds ``(pass text, pass name, seconds, depth)`` per run, ``depth`` > 0 for
    passes run inside another pass. :meth:`summary` is a table by pass name, slowest first.
    With ``report=True`` the summary is printed to ``stream`` when the context is left.
    """

    def __init__(self, report: bool = False, stream: IO[str] | None = None):
        self.report = report
        self.stream = stream
        self.records: list[tuple[str, str, float, int]] = []
        self._starts: list[float] = []

    def run_before_pass(self, pass_: Pass, module: Module) -> None:
        self._starts.append(time.perf_counter())

    def run_after_pass(self, pass_: Pass, module_before: Module, module_after: Module) -> None:
        self._stop(pass_)

    def run_on_error(self, pass_: Pass, module: Module, error: BaseException) -> None:
        if self._starts:
            self._stop(pass_)

    def _stop(self, pass_: Pass) -> None:
        t = time.perf_counter() - self._starts.pop()
        self.records.append((pass_.text, pass_.pass_name(), t, len(self._starts)))

    @property
    def total(self) -> float:
        """Seconds spent in passes, counting nested passes once (in their parent)."""
        return sum(r[2] for r in self.records if r[3] == 0)

    def by_name(self) -> list[tuple[str, int, float]]:
        """``(name, runs, seconds)`` per pass name, slowest first."""
        acc: dict[str, list] = {}
        for _, name, t, _depth in self.records:
            entry = acc.setdefault(name, [0, 0.0])
            entry[0] += 1
            entry[1] += t
        rows = [(name, runs, secs) for name, (runs, secs) in acc.items()]
        rows.sort(key=lambda r: (-r[2], r[0]))
        return rows

    def summary(self) -> str:
        """A table of time per pass name, slowest first, with the share of the total."""
        total = self.total
        lines = [f"pass timing: {total * 1e3:.3f} ms in {len(self.records)} pass runs",
                 f"{'ms':>10} {'%':>6} {'runs':>5}  pass"]
        for name, runs, secs in self.by_name():
            share = 100.0 * secs / total if total > 0 else 0.0
            lines.append(f"{secs * 1e3:10.3f} {share:6.1f} {runs:5d}  {name}")
        return "\n".join(lines)

    def reset(self) -> None:
        self.records.clear()
        self._starts.clear()

    def exit_ctx(self, ctx: PassContext) -> None:
        if self.report:
            _write(self.stream, self.summary())


class DumpIR(PassInstrument):
    """Write every stage of the IR to a folder.

    ``000_input.txt`` holds the first pass's input; after the k-th pass, ``NNN_<name>.txt``
    (``NNN`` = k, zero-padded) holds ``;; IR after <pass text>`` and the IR, and
    ``pipeline.txt`` the passes run so far, one per line (readable by
    :meth:`Pipeline.parse <ptxforge.passes.pipeline.Pipeline.parse>`). The folder is created
    if needed; files of an earlier run with the same names are overwritten.
    """

    def __init__(self, directory: str | os.PathLike):
        self.directory = os.fspath(directory)
        self.count = 0
        self.ran: list = []
        self.files: list[str] = []
        self._input_written = False

    def enter_ctx(self, ctx: PassContext) -> None:
        os.makedirs(self.directory, exist_ok=True)
        self.count = 0
        self.ran = []
        self.files = []
        self._input_written = False

    def _dump(self, filename: str, text: str) -> None:
        os.makedirs(self.directory, exist_ok=True)
        path = os.path.join(self.directory, filename)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text if text.endswith("\n") else text + "\n")
        self.files.append(path)

    def run_before_pass(self, pass_: Pass, module: Module) -> None:
        if not self._input_written:
            self._input_written = True
            self._dump("000_input.txt", f";; IR input, before {pass_.text}\n{ir_text(module)}")

    def run_after_pass(self, pass_: Pass, module_before: Module, module_after: Module) -> None:
        from .pipeline import Pipeline

        self.count += 1
        self.ran.append(pass_)
        self._dump(f"{self.count:03d}_{pass_.pass_name()}.txt",
                   f";; IR after {pass_.text}\n{ir_text(module_after)}")
        self._dump("pipeline.txt", Pipeline(self.ran).format(one_per_line=True))


class Verify(PassInstrument):
    """Check each pass's output with :func:`ptxforge.ir.verify.verify`, naming the pass.

    On by default (``PassContext(verify=True)``). Verification errors propagate as raised
    by the verifier.
    """

    def run_after_pass(self, pass_: Pass, module_before: Module, module_after: Module) -> None:
        verify = load_verifier()
        if verify is not None:
            from .context import PassContext

            verify(module_after, pass_name=pass_.text, target=PassContext.current().target)


class CheckRoundTrip(PassInstrument):
    """Check that each pass's output prints, parses back and prints the same (the text
    form is complete). Off by default; ``PTXFORGE_CHECK_ROUNDTRIP=1`` adds it to every
    context, as the test suite does."""

    _LIMIT = 1 << 16
    _checked: set[bytes] = set()
    """Digests of the texts that round-tripped in this process: print -> parse -> print is
    a function of the text, so a text met again (a pass that changed nothing, the same
    kernel lowered by another test) need not be parsed again. Parsing is most of the
    check's time."""

    def run_after_pass(self, pass_: Pass, module_before: Module, module_after: Module) -> None:
        from ..ir.parser import parse_module, roundtrip_check
        from ..ir.printer import print_module

        text = print_module(module_after)
        key = hashlib.blake2b(text.encode(), digest_size=16).digest()
        if key in CheckRoundTrip._checked:
            return
        try:
            if print_module(parse_module(text)) != text:
                roundtrip_check(module_after)  # raises with the diff of the two texts
        except AssertionError as e:
            raise AssertionError(f"the IR after {pass_.text} does not round-trip: {e}") from None
        if len(CheckRoundTrip._checked) >= CheckRoundTrip._LIMIT:
            CheckRoundTrip._checked.clear()
        CheckRoundTrip._checked.add(key)


def load_verifier():
    """``ptxforge.ir.verify.verify``, or None while that module does not exist."""
    name = __name__.rsplit(".", 2)[0] + ".ir.verify"
    try:
        verify_module = importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name == name:
            return None
        raise  # the verifier exists but is broken: that must not pass silently
    return verify_module.verify


def read_dump(path: str | os.PathLike) -> tuple[str, Module]:
    """Read an IR file written by :class:`DumpIR`: its ``;;`` header (the text after
    ``;; ``) and the module, parsed by :func:`ptxforge.ir.parser.parse_module`."""
    from ..ir.parser import parse_module

    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    header = []
    while lines and lines[0].startswith(";;"):
        header.append(lines.pop(0)[2:].strip())
    return "\n".join(header), parse_module("\n".join(lines))
