"""Chains of layout operators as strided views of one tensor.

A chain of ``strided_slice``, ``reshape``, ``nn.batch_flatten``, ``transpose``,
``expand_dims`` and ``squeeze`` calls (:data:`LAYOUT_OPS`) over one tensor moves elements
and computes nothing. Where it can be written as a strided view of the (contiguous) tensor
it reads, element ``idx`` of its result is element ``offset + sum(idx[d] * strides[d])`` of
that tensor's flat buffer: :func:`chain_view` composes the view one operator at a time,
and says None where a reshape merges dimensions that are not adjacent in memory (the head
transpose back of an attention block), which no strided view expresses.

``fuse_ops`` uses the view to decide whether a matrix product can read such a chain's
source directly (:func:`copyable_rows`): its shared-memory copies move 16 bytes at a time
along the operand's last axis, which needs that axis contiguous in the source and every
vector starting 16 bytes aligned.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...ir import dtype as dt
from ..ir import Call, Node, TensorType
from ..op import get_op

LAYOUT_OPS = frozenset({"strided_slice", "reshape", "nn.batch_flatten", "transpose",
                        "expand_dims", "squeeze"})
"""Operators that only move elements: each output element is one input element."""

COPY_BYTES = 16
"""The width of one vector copy into shared memory (``cp.async`` of 16 bytes)."""


@dataclass(frozen=True)
class StridedView:
    """Element ``idx`` of the view is element ``offset + sum(idx[d] * strides[d])`` of the
    flat source (strides and offset in elements)."""

    shape: tuple
    strides: tuple
    offset: int = 0

    @staticmethod
    def contiguous(shape: tuple) -> StridedView:
        strides, step = [], 1
        for n in reversed(shape):
            strides.append(step)
            step *= int(n)
        return StridedView(tuple(int(n) for n in shape), tuple(reversed(strides)), 0)

    def flat_indices(self):
        """The source's flat index of every element of the view (a numpy array of the
        view's shape), for tests and checks."""
        import numpy as np

        out = np.full(self.shape, self.offset, dtype=np.int64)
        for d, (n, s) in enumerate(zip(self.shape, self.strides)):
            shape = [1] * len(self.shape)
            shape[d] = n
            out = out + (np.arange(n, dtype=np.int64) * s).reshape(shape)
        return out


def _reshape(view: StridedView, new_shape: tuple) -> StridedView | None:
    """``view`` reshaped (row-major) without copying, or None when no strides do it."""
    old = [(n, s) for n, s in zip(view.shape, view.strides) if n != 1]
    new = [int(n) for n in new_shape]
    strides = [0] * len(new)
    i = 0  # next old dimension
    j = 0  # next new dimension
    while j < len(new):
        if new[j] == 1:
            strides[j] = 0
            j += 1
            continue
        if i >= len(old):
            return None
        # the smallest runs of old dims [i, i2) and new dims [j, j2) of equal size
        i2, j2 = i + 1, j + 1
        po, pn = old[i][0], new[j]
        while po != pn:
            if po < pn:
                if i2 >= len(old):
                    return None
                po *= old[i2][0]
                i2 += 1
            else:
                if j2 >= len(new):
                    return None
                pn *= new[j2]
                j2 += 1
        for k in range(i, i2 - 1):  # the merged old dims must be one block of memory
            if old[k][1] != old[k + 1][0] * old[k + 1][1]:
                return None
        step = old[i2 - 1][1]
        for k in range(j2 - 1, j - 1, -1):
            strides[k] = step if new[k] != 1 else 0
            step *= new[k]
        i, j = i2, j2
    if i != len(old):
        return None
    return StridedView(tuple(new), tuple(strides), view.offset)


def _apply(view: StridedView, call: Call) -> StridedView | None:
    """The view after one layout call (whose argument has ``view``'s shape)."""
    op = call.op
    out_shape = tuple(int(n) for n in call.shape)
    if op in ("reshape", "nn.batch_flatten", "squeeze", "expand_dims"):
        return _reshape(view, out_shape)
    if op == "transpose":
        from ..opdefs.transform import _transpose_axes

        axes = _transpose_axes(len(view.shape), call.attrs["axes"])
        return StridedView(tuple(view.shape[a] for a in axes),
                           tuple(view.strides[a] for a in axes), view.offset)
    if op == "strided_slice":
        from ..opdefs.transform import _slice_ranges

        ranges = _slice_ranges([TensorType(view.shape, call.dtype)], call.attrs)
        offset = view.offset + sum(b * s for (b, _, _), s in zip(ranges, view.strides))
        return StridedView(tuple(c for _, _, c in ranges),
                           tuple(st * s for (_, st, _), s in zip(ranges, view.strides)),
                           offset)
    return None


def layout_chain(node: Node) -> tuple[Node, list[Call]]:
    """The longest chain of layout calls ending at ``node``: its source and the calls from
    the source's reader to ``node`` (empty when ``node`` is no layout call)."""
    chain: list[Call] = []
    while isinstance(node, Call) and isinstance(node.op, str) and node.op in LAYOUT_OPS:
        chain.append(node)
        node = node.args[0]
    return node, list(reversed(chain))


def chain_view(source: Node, chain: list[Call]) -> StridedView | None:
    """The strided view of ``source`` that ``chain`` (calls from the source's reader on)
    computes, or None when one of them is no layout operator or no strided view does it."""
    view = StridedView.contiguous(tuple(source.shape))
    for call in chain:
        if not (isinstance(call.op, str) and call.op in LAYOUT_OPS):
            return None
        get_op(call.op)  # an unknown operator is an error, not a view
        view = _apply(view, call)
        if view is None:
            return None
    return view


def copyable_rows(view: StridedView, dtype: str) -> bool:
    """Whether copies of :data:`COPY_BYTES` along ``view``'s last axis read whole aligned
    vectors of the source: that axis contiguous (stride 1) and a whole number of vectors
    long, the offset and every other stride (of an axis longer than 1) whole vectors."""
    vec = COPY_BYTES // max(dt.bits(dtype) // 8, 1)
    if not view.shape or view.strides[-1] != 1 or view.shape[-1] % vec:
        return False
    if view.offset % vec:
        return False
    return all(s % vec == 0 for n, s in zip(view.shape[:-1], view.strides[:-1]) if n > 1)


def stored_view(chain: list[Call]) -> StridedView | None:
    """Where a chain of layout calls puts each element of its source, when every source
    axis lands in one digit of one output axis: the source as a strided view of the
    chain's (contiguous) result, with each source axis's extent times its stride within
    one output axis's span and the source axes of each output axis tiling it exactly
    (the head transpose back of an attention block: ``[12, 128, 64]`` into ``[128, 768]``
    is the view of strides ``(64, 768, 1)``). None for a slice (not every element is
    kept) or a chain whose source axes straddle output axes.

    A product's epilogue can then store the source's elements straight into the result
    (:mod:`ptxforge.ops.schedules.remap` finds the same digits in the te stages)."""
    if not chain or any(not (isinstance(c.op, str) and c.op in LAYOUT_OPS)
                        or c.op == "strided_slice" for c in chain):
        return None
    out = chain[-1]
    view = StridedView.contiguous(tuple(out.shape))
    for call in reversed(chain):  # undo each call, from the result back to the source
        src_shape = tuple(int(n) for n in call.args[0].shape)
        if call.op == "transpose":
            from ..opdefs.transform import _transpose_axes

            axes = _transpose_axes(len(src_shape), call.attrs["axes"])
            inverse = [0] * len(axes)
            for k, a in enumerate(axes):
                inverse[a] = k
            view = StridedView(tuple(view.shape[a] for a in inverse),
                               tuple(view.strides[a] for a in inverse), view.offset)
        else:
            view = _reshape(view, src_shape)
        if view is None:
            return None
    return view if _digits_tile(view, tuple(int(n) for n in out.shape)) else None


def _digits_tile(view: StridedView, out_shape: tuple) -> bool:
    out_strides = StridedView.contiguous(out_shape).strides
    per_axis: dict[int, list] = {}
    for n, s in zip(view.shape, view.strides):
        if n == 1:
            continue
        for a, (m, t) in enumerate(zip(out_shape, out_strides)):
            if s % t == 0 and t <= s and s * n <= t * m:
                per_axis.setdefault(a, []).append((s // t, n))
                break
        else:
            return False
    for a, m in enumerate(out_shape):
        step = 1
        for inner, n in sorted(per_axis.get(a, [])):
            if inner != step:
                return False
            step *= n
        if step != m:
            return False
    return True
