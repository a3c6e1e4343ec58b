"""Chains of layout operators as digit maps of one tensor's elements.

A chain of ``reshape``, ``transpose``, ``expand_dims``, ``squeeze``, ``nn.batch_flatten`` and
``broadcast_to`` calls (:data:`DIGIT_OPS`) over one tensor computes nothing: each element
of its result is one element of the tensor. :class:`DigitView` says which: every result
axis is a mixed-radix number whose digits ``(extent, stride)`` (most significant first)
each step through the source's flat buffer by ``stride``. Unlike a strided view
(:mod:`~ptxforge.graph.passes.layout_view`) it also describes a reshape that merges axes
not adjacent in memory (an attention's ``[B, H, L, E]`` head transpose merged into the
``[B * H, L, E]`` operand of a batched product) and a broadcast (a digit of stride 0: the
key heads an exported grouped-query attention repeats).

Two chains from one source compute the same map exactly when their
:meth:`DigitView.canonical` forms are equal, so a graph pass can prove that a chain it
replaces and the chain it writes read the same elements.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..ir import Call, Node

Digit = tuple[int, int]
"""``(extent, stride)``: one digit of a result axis and its step in the flat source."""

DIGIT_OPS = frozenset({"reshape", "transpose", "expand_dims", "squeeze", "nn.batch_flatten",
                       "broadcast_to"})
"""Operators whose result elements are elements of their argument, as digit maps."""


def _merged(digits) -> tuple[Digit, ...]:
    """``digits`` without extent-1 digits and with neighbours that step as one merged."""
    out: list[Digit] = []
    for n, s in digits:
        if n == 1:
            continue
        if out and out[-1][1] == n * s:
            out[-1] = (out[-1][0] * n, s)
        else:
            out.append((n, s))
    return tuple(out)


@dataclass(frozen=True)
class DigitView:
    """Element ``idx`` of the view is element ``sum_d sum_k digit_k(idx[d]) * stride_k`` of
    the flat source, where ``digit_k`` are the mixed-radix digits of ``idx[d]`` in the
    extents of ``dims[d]`` (most significant first)."""

    dims: tuple[tuple[Digit, ...], ...]

    @staticmethod
    def contiguous(shape) -> DigitView:
        """The identity view of a row-major tensor of ``shape``."""
        dims, step = [], 1
        for n in reversed(tuple(int(n) for n in shape)):
            dims.append(((n, step),))
            step *= n
        return DigitView(tuple(reversed(dims)))

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(math.prod(n for n, _ in d) for d in self.dims)

    def canonical(self) -> tuple[tuple[Digit, ...], ...]:
        """A form equal for two views exactly when they map every index alike."""
        return tuple(_merged(d) for d in self.dims)

    def reshape(self, shape) -> DigitView | None:
        """The view reshaped row-major to ``shape``, or None where an axis of ``shape``
        would cut a digit at a size that does not divide it."""
        shape = tuple(int(n) for n in shape)
        if math.prod(shape) != math.prod(self.shape):
            return None
        flat = list(_merged(d for dim in self.dims for d in dim))
        dims: list[tuple[Digit, ...]] = []
        for size in shape:
            taken: list[Digit] = []
            left = size
            while left > 1:
                n, s = flat.pop(0)
                if left % n == 0:
                    taken.append((n, s))
                    left //= n
                elif n % left == 0:  # the digit splits: its high part ends this axis
                    taken.append((left, s * (n // left)))
                    flat.insert(0, (n // left, s))
                    left = 1
                else:
                    return None
            dims.append(tuple(taken))
        return DigitView(tuple(dims))

    def transpose(self, axes) -> DigitView:
        return DigitView(tuple(self.dims[a] for a in axes))

    def broadcast(self, shape) -> DigitView:
        """The view stretched to ``shape`` (numpy's rules): new and stretched axes repeat
        (stride 0)."""
        shape = tuple(int(n) for n in shape)
        lead = len(shape) - len(self.dims)
        dims = [((n, 0),) for n in shape[:lead]]
        for n, dim, old in zip(shape[lead:], self.dims, self.shape):
            dims.append(dim if old == n else ((n, 0),))
        return DigitView(tuple(dims))


def apply_call(view: DigitView, call: Call) -> DigitView | None:
    """``view`` after one :data:`DIGIT_OPS` call reading it, or None."""
    if call.op == "transpose":
        from ..opdefs.transform import _transpose_axes

        return view.transpose(_transpose_axes(len(view.dims), call.attrs["axes"]))
    if call.op == "broadcast_to":
        return view.broadcast(call.shape)
    return view.reshape(call.shape)


def is_digit_call(node: Node) -> bool:
    return isinstance(node, Call) and isinstance(node.op, str) and node.op in DIGIT_OPS


def chain_digits(source: Node, chain: list[Call]) -> DigitView | None:
    """The view of ``source`` that ``chain`` (calls from the source's reader on) computes."""
    view: DigitView | None = DigitView.contiguous(source.shape)
    for call in chain:
        view = apply_call(view, call) if view is not None else None
    return view


def is_identity(view: DigitView, shape) -> bool:
    """Whether ``view`` reads its source in row-major order as a tensor of ``shape``."""
    return (view.shape == tuple(shape)
            and view.canonical() == DigitView.contiguous(shape).canonical())
