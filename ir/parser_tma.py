"""The parser's part for the TMA and mbarrier statements and the tensor map parameter type
(``ir/stmt_tma.py``): a mixin of :class:`ptxforge.ir.parser._Parser`."""

from __future__ import annotations

from typing import Any

from .expr import Load
from .stmt import Buffer, Stmt
from .stmt_tma import (
    FenceMbarrierInit,
    MbarrierArrive,
    MbarrierInit,
    MbarrierWait,
    TensorMap,
    TmaLoad,
)

TMA_WORDS = ("mbarrier_init", "mbarrier_arrive", "mbarrier_arrive_expect_tx", "mbarrier_wait",
             "fence_mbarrier_init", "tma_load")
"""The words that start a TMA or mbarrier statement."""


class TmaParsing:
    """``tma_stmt`` (a statement starting with one of :data:`TMA_WORDS`) and ``tensor_map``
    (the ``tensormap[box] swizzle(mode)`` suffix of a parameter's type); the parser's
    token methods (``next``, ``expect``, ``expr``, ``build``, ...) do the reading."""

    def element(self, what: str, flat: bool = True) -> Load:
        """``buf[index]`` (``flat``: one index), an operand of a TMA or mbarrier
        statement."""
        at = self.peek()
        e = self.expr()
        if not isinstance(e, Load) or (flat and len(e.indices) != 1):
            self.fail(f"{what} must be a buffer element 'buf[index]'", at)
        return e

    def tma_stmt(self, tok: Any) -> Stmt:
        """``mbarrier_init(bar[i], count)``, ``mbarrier_arrive(bar[i])``,
        ``mbarrier_arrive_expect_tx(bar[i], bytes)``, ``mbarrier_wait(bar[i], parity)``,
        ``fence_mbarrier_init``, ``tma_load(dst[i], map[coords], bar[j])``."""
        word = self.next().text
        if word == "fence_mbarrier_init":
            return FenceMbarrierInit()
        self.expect("(", f"after {word}")
        if word == "tma_load":
            dst = self.element("tma_load's destination")
            self.expect(",", "after the destination of tma_load")
            src = self.element("tma_load's tensor map and coordinates 'map[c0, c1]'", False)
            self.expect(",", "after the tensor map of tma_load")
            bar = self.element("tma_load's mbarrier")
            self.expect(")", "to close tma_load")
            return self.build(tok, TmaLoad, dst.buffer, dst.indices[0], src.buffer,
                              src.indices, bar.buffer, bar.indices[0])
        bar = self.element(f"{word}'s mbarrier")
        if word == "mbarrier_arrive":
            self.expect(")", "to close mbarrier_arrive")
            return self.build(tok, MbarrierArrive, bar.buffer, bar.indices[0])
        self.expect(",", f"after the mbarrier of {word}")
        if word == "mbarrier_wait":
            parity = self.expr()
            self.expect(")", "to close mbarrier_wait")
            return self.build(tok, MbarrierWait, bar.buffer, bar.indices[0], parity)
        n = self.int_literal("the arrival count" if word == "mbarrier_init"
                             else "the transaction bytes")
        self.expect(")", f"to close {word}")
        if word == "mbarrier_init":
            return self.build(tok, MbarrierInit, bar.buffer, bar.indices[0], n)
        return self.build(tok, MbarrierArrive, bar.buffer, bar.indices[0], n)

    def tensor_map(self, name: Any, dtype: str, shape, scope: str, strides) -> Buffer:
        """``... tensormap[box] swizzle(mode)``: a :class:`TensorMap` parameter."""
        tok = self.next()
        if scope != "global" or strides is not None:
            self.fail("a tensor map views a compact global tensor (no scope, no strides)", tok)
        box = self.int_list("tensor map box")
        self.expect("swizzle", "after the tensor map's box")
        self.expect("(", "after swizzle")
        mode = self.next()
        if mode.kind == "num" and self.peek().kind == "name":
            text = mode.text + self.next().text  # 128B lexes as a number and a name
        else:
            text = mode.text
        self.expect(")", "to close the swizzle mode")
        if name.text in self.syms:
            self.fail(f"'{name.text}' is defined twice", name)
        buf = self.build(name, TensorMap, name.text, dtype, shape, box, text)
        self.syms[name.text] = buf
        return buf
