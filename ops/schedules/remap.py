"""Epilogues that store a product in another layout.

A stage that reads a product's result only through a permutation of its indices, each
product axis being one mixed-radix digit of one of the stage's axes, stores the product
in another layout: the head transpose back of an attention block,
``Y[s, h * 64 + d] = X[h, s, d]``, reads ``X`` at ``(c // 64, s, c % 64)``. Splitting the
stage's axes at those digits (``c`` into ``c.outer`` of 12 and ``c.inner`` of 64) and
reordering them into the product's order (``c.outer, s, c.inner``) gives loops that run
like the product's own axes, reading it at ``(c.outer, s, c.inner)``: the stage can be
the product's epilogue, which stores each element straight to its place in ``Y``.

:func:`output_remap` finds the digits by evaluating the read's indices where one axis of
the stage is non-zero, and accepts them only when the simplifier proves that the read,
with the stage's axes written as their digits, is the product at the digits themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...ir.expr import IntImm, Var, const, substitute
from ...ir.simplify import simplify
from ...ir.te import ComputeOp
from .analysis import reads_through


@dataclass(frozen=True)
class OutputRemap:
    """The digits of an epilogue's axes (see the module doc).

    Attributes:
        digits: per axis of the epilogue stage, ``(product axis, extent)`` for each of its
            digits, outermost first (no entry for an axis of extent 1).
        product_ndim: the product's number of axes.
    """

    digits: tuple
    product_ndim: int

    @property
    def contiguous_columns(self) -> bool:
        """Whether the product's last axis is the innermost digit of the epilogue's last
        axis, so that consecutive columns of the product are stored side by side."""
        return bool(self.digits and self.digits[-1]
                    and self.digits[-1][-1][0] == self.product_ndim - 1)

    def product_loops(self, stage) -> list:
        """Split the axes of epilogue ``stage`` (a schedule stage) into their digits and
        reorder them into the product's axis order; returns the loops, one per product
        axis of extent above 1, in that order (the stage's axes of extent 1 go first)."""
        loops: dict[int, object] = {}
        ones = []
        for axis, digits in zip(stage.op.axis, self.digits):
            if not digits:
                ones.append(axis)
                continue
            cur = axis
            for n, (k, _) in enumerate(digits[:-1]):
                inner = 1
                for _, e in digits[n + 1:]:
                    inner *= e
                outer, cur = stage.split(cur, factor=inner)
                loops[k] = outer
            loops[digits[-1][0]] = cur
        ordered = [loops[k] for k in range(self.product_ndim) if k in loops]
        stage.reorder(*ones, *ordered)
        return ordered


def _value(e, point: dict) -> int | None:
    v = simplify(substitute(e, {x: const(n, x.dtype) for x, n in point.items()}))
    return v.value if isinstance(v, IntImm) else None


def output_remap(consumer: ComputeOp, producer: ComputeOp, inlined: set) -> OutputRemap | None:
    """The :class:`OutputRemap` under which ``consumer`` (no reduction, one output) stores
    ``producer``'s result in its own layout, or None when it reads ``producer`` otherwise
    (at differing indices, through arithmetic on the indices that no digits undo, or
    not at all)."""
    if consumer.reduce_axis or consumer.num_outputs != 1:
        return None
    reads = [idx for t, idx in reads_through(consumer, inlined) if t.op is producer]
    if not reads:
        return None
    pshape = [int(n) for n in producer.shape]
    axes = [(a.var, int(a.extent)) for a in consumer.axis]
    index = reads[0]
    if len(index) != len(pshape):
        return None
    zero = {v: 0 for v, _ in axes}
    if any(_value(e, zero) != 0 for e in index):
        return None
    digits: list[tuple] = []
    used: set[int] = set()
    for v, extent in axes:
        found: list[tuple] = []
        step = 1
        while step < extent:
            at = [_value(e, {**zero, v: step}) for e in index]
            moved = [k for k, x in enumerate(at) if x != 0]
            if None in at or len(moved) != 1 or at[moved[0]] != 1:
                return None
            k = moved[0]
            if k in used or extent % (step * pshape[k]):
                return None
            used.add(k)
            found.append((k, pshape[k]))
            step *= pshape[k]
        digits.append(tuple(reversed(found)))
    if used != {k for k, n in enumerate(pshape) if n > 1}:
        return None
    remap = OutputRemap(tuple(digits), len(pshape))
    return remap if _proved(remap, axes, reads) else None


def _proved(remap: OutputRemap, axes: list, reads: list) -> bool:
    """Whether every read, with each axis written as its digits (fresh vars), simplifies
    to the product read at those digits."""
    ranges: dict = {}
    sub: dict = {}
    want: dict[int, object] = {}
    for (v, _), digits in zip(axes, remap.digits):
        total = const(0, v.dtype)
        scale = 1
        for k, e in reversed(digits):
            d = Var(f"{v.name}_d{k}", v.dtype)
            ranges[d] = (0, e - 1)
            want[k] = d
            total = d * scale + total if scale > 1 else d + total
            scale *= e
        sub[v] = total
    for index in reads:
        for k, e in enumerate(index):
            got = simplify(substitute(e, sub), ranges)
            if k in want:
                if got is not want[k]:
                    return False
            elif not (isinstance(got, IntImm) and got.value == 0):
                return False
    return True


def _stages_between(op: ComputeOp, epilogue: ComputeOp) -> set:
    """Ids of the element-wise and layout stages between ``op`` and ``epilogue`` (those
    the default schedule inlines into the epilogue)."""
    out: set = set()
    stack = list(epilogue.input_tensors)
    while stack:
        t = stack.pop()
        o = t.op
        if o is op or id(o) in out or not isinstance(o, ComputeOp):
            continue
        if o.reduce_axis or o.num_outputs != 1:
            continue
        out.add(id(o))
        stack.extend(o.input_tensors)
    return out


def epilogue_remap(op: ComputeOp, epilogue: ComputeOp | None) -> OutputRemap | None:
    """The :class:`OutputRemap` of ``epilogue`` over product ``op``, or None when it is no
    epilogue or a plain one (reading the product at its own index)."""
    if epilogue is None:
        return None
    inlined = _stages_between(op, epilogue)
    from .analysis import is_epilogue_of

    if is_epilogue_of(epilogue, op, inlined):
        return None
    return output_remap(epilogue, op, inlined)
