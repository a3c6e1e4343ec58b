"""The round-trip instrument the suite turns on: each pass's output prints, parses back and
prints the same, and a text already checked in this process is not parsed again."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from ptxforge.ir import parser, te
from ptxforge.ir.printer import print_module
from ptxforge.ir.stmt import Module
from ptxforge.ir.to_ir import to_ir
from ptxforge.passes import Pass, PassContext, PassRegistry, register_pass
from ptxforge.passes.instruments import CheckRoundTrip

REG = PassRegistry()


@register_pass(registry=REG)
@dataclass(frozen=True)
class _Same(Pass):
    """Stands for a pass that changed nothing: its output is its input."""

    name = "same"

    def apply(self, module: Module, ctx: PassContext) -> Module:
        return module


def _module(width: int) -> Module:
    a = te.placeholder((4, width), name="A")
    b = te.compute((4, width), lambda i, j: a[i, j] * 2.0 + 1.0, name="B")
    return to_ir([a, b])


@pytest.fixture
def parses(monkeypatch):
    """The texts parse_module is called on, with CheckRoundTrip's memory emptied."""
    monkeypatch.setattr(CheckRoundTrip, "_checked", set())
    seen: list[str] = []
    real = parser.parse_module

    def counting(text, *args, **kwargs):
        seen.append(text)
        return real(text, *args, **kwargs)

    monkeypatch.setattr(parser, "parse_module", counting)
    return seen


def test_a_text_is_parsed_once_per_process(parses):
    check = CheckRoundTrip()
    mod = _module(8)
    for _ in range(3):
        check.run_after_pass(_Same(), mod, mod)
    assert parses == [print_module(mod)]
    other = _module(16)  # another text is checked
    check.run_after_pass(_Same(), other, other)
    assert len(parses) == 2 and parses[1] == print_module(other)


def test_a_text_that_does_not_reprint_the_same_is_refused_every_time(parses, monkeypatch):
    mod = _module(8)
    # a parser that reads back another module: the reprinted text differs
    monkeypatch.setattr(parser, "parse_module", lambda text: _module(4))
    for _ in range(2):  # a refused text is not remembered as checked
        with pytest.raises(AssertionError, match=r"the IR after same\(\) does not round-trip"):
            CheckRoundTrip().run_after_pass(_Same(), mod, mod)
