"""Python source under construction: nested blocks of lines, scopes and masks.

A :class:`Block` is a list of lines and sub-blocks at one indentation. Every loop body and
let body is a :class:`Scope` with a *prologue* block, where computations that depend only
on that scope's var (and outer ones) are placed once per iteration instead of once per
use. Blocks also carry the lane mask in force (a Python name, None when all lanes run)
and, where stores need it, the indices of the active lanes.
"""

from __future__ import annotations

NEST_LIMIT = 12
"""Compound statements nested in one Python function before the rest moves into an inner
function (CPython refuses more than 20 nested blocks in one function)."""


class Scope:
    """A loop or let body: its depth and the prologue block that opens it."""

    __slots__ = ("depth", "parent", "prologue")

    def __init__(self, depth: int, parent: Scope | None):
        self.depth = depth
        self.parent = parent
        self.prologue: Block | None = None

    def at_depth(self, depth: int) -> Scope:
        s = self
        while s.depth > depth:
            s = s.parent
        return s


class Block:
    """Lines at one indentation: strings, sub-blocks and compound statements."""

    __slots__ = ("items", "indent", "parent", "scope", "cse", "mask", "nz", "nest",
                 "container")

    def __init__(self, indent: int, parent: Block | None, scope: Scope, mask: str | None,
                 nz: str | None, nest: int, container: list | None = None):
        self.items: list = []
        self.indent = indent
        self.parent = parent
        self.scope = scope
        self.cse: dict = {}
        self.mask = mask
        self.nz = nz
        self.nest = nest
        self.container = container
        if container is not None:
            container.append(self)

    def line(self, text: str) -> None:
        self.items.append(text)

    def sub(self, scope: Scope | None = None) -> Block:
        """A block placed here at the same indentation, seeing this block's names."""
        return Block(self.indent, self, scope or self.scope, self.mask, self.nz, self.nest,
                     self.items)

    def follow(self, scope: Scope | None = None) -> Block:
        """A block placed right after this one (same place, same indentation), seeing
        this block's names: the body that follows a prologue."""
        return Block(self.indent, self, scope or self.scope, self.mask, self.nz, self.nest,
                     self.container)

    def compound(self, header: str, mask: str | None = ..., nz: str | None = ...,
                 scope: Scope | None = None, function: bool = False) -> Block:
        """``header:`` followed by a new indented block (returned)."""
        c = Compound(header)
        self.items.append(c)
        return Block(self.indent + 1, self, scope or self.scope,
                     self.mask if mask is ... else mask, self.nz if nz is ... else nz,
                     0 if function else self.nest + 1, c.blocks)

    def render(self, out: list, pad: str = "    ") -> None:
        for it in self.items:
            if isinstance(it, str):
                out.append(pad * self.indent + it)
            elif isinstance(it, Block):
                it.render(out, pad)
            else:
                out.append(pad * self.indent + it.text + ":")
                n = len(out)
                for b in it.blocks:
                    b.render(out, pad)
                if len(out) == n:
                    out.append(pad * (self.indent + 1) + "pass")


class Compound:
    """A compound statement: its header line (without the colon) and its body blocks."""

    __slots__ = ("text", "blocks")

    def __init__(self, text: str):
        self.text = text
        self.blocks: list = []
