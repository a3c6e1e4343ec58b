"""What one fused attention kernel computes: shapes, dtypes, masks and scale.

An :class:`AttentionWorkload` is the frozen description every piece of the fused attention
shares (the te op, the kernel builder, the knob space, the time estimate, the graph's
eligibility rule): ``out[b, h, i, :] = softmax(q[b, h, i] . k[b, h // G, j] * scale
(+ mask) (causal: j <= i)) @ v[b, h // G]`` with ``G = heads / kv_heads``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ....ir.expr import IRError

INPUT_DTYPES = ("float16", "bfloat16")
LAYOUTS = ("bhsd", "bshd")
"""How q, k, v and the output lie in memory: ``bhsd`` ``[batch, heads, seq, dim]``, or
``bshd`` ``[batch, seq, heads, dim]``, as a projection writes them (the head split and merge
transposes folded into the kernel's addressing)."""
HEAD_DIMS = (64, 80, 128)
"""The head dimensions the kernel is tested and tuned for; any multiple of 16 up to 256
builds (``check_workload``)."""


class AttentionError(IRError):
    """An attention workload or configuration the fused kernel cannot run; the message
    names the rule and what to change."""


@dataclass(frozen=True)
class AttentionMask:
    """A mask broadcast (right-aligned, as numpy) to the scores ``[B, Hq, L, S]``: a bool
    mask keeps a score where True, any other dtype is added to the scores."""

    shape: tuple
    dtype: str

    @property
    def additive(self) -> bool:
        return self.dtype != "bool"


@dataclass(frozen=True)
class OperandView:
    """q, k or v (``[B, S, H, D]``, layout ``bshd``) read out of a wider tensor, as the
    slices of a combined Q/K/V projection lie in its output: element ``(b, s, h, d)`` at
    ``(b S + s) row_stride + offset + h D + d`` of the tensor of shape ``base_shape``
    (its last dimension ``row_stride``, the others multiplying to ``B S``)."""

    row_stride: int
    offset: int
    base_shape: tuple

    def size(self) -> int:
        return math.prod(self.base_shape)


@dataclass(frozen=True)
class AttentionWorkload:
    """One attention problem (see the module's docstring). ``scale`` None is
    ``1 / sqrt(head_dim)``; ``layout`` one of :data:`LAYOUTS` (the mask broadcasts to
    the scores ``[B, Hq, L, S]`` in both)."""

    batch: int
    heads: int
    kv_heads: int
    q_len: int
    kv_len: int
    head_dim: int
    v_dim: int
    dtype: str = "float16"
    causal: bool = False
    scale: float | None = None
    mask: AttentionMask | None = None
    layout: str = "bhsd"
    views: tuple | None = None
    """None, or one :class:`OperandView` or None for each of q, k and v: the operands read
    through a row stride and an offset (layout ``bshd`` only)."""

    def view(self, which: int) -> OperandView | None:
        """The view of operand ``which`` (0 q, 1 k, 2 v), or None."""
        return self.views[which] if self.views is not None else None

    @property
    def group(self) -> int:
        """Query heads per key/value head (1: multi-head; more: grouped-query)."""
        return self.heads // self.kv_heads

    @property
    def softmax_scale(self) -> float:
        return self.scale if self.scale is not None else 1.0 / math.sqrt(self.head_dim)

    @property
    def flops(self) -> float:
        """Multiply-adds x 2 of the two products, halved under a causal mask (as
        FlashAttention counts), for TFLOP/s figures."""
        full = 2.0 * self.batch * self.heads * self.q_len * self.kv_len * (
            self.head_dim + self.v_dim)
        return full / 2 if self.causal else full

    def shapes(self) -> dict:
        """The tensors' shapes by name (q, k, v, [mask,] out)."""
        def shape(heads, seq, dim):
            if self.layout == "bshd":
                return (self.batch, seq, heads, dim)
            return (self.batch, heads, seq, dim)
        out = {"q": shape(self.heads, self.q_len, self.head_dim),
               "k": shape(self.kv_heads, self.kv_len, self.head_dim),
               "v": shape(self.kv_heads, self.kv_len, self.v_dim)}
        for which, name in enumerate("qkv"):
            if self.view(which) is not None:
                out[name] = tuple(self.view(which).base_shape)
        if self.mask is not None:
            out["mask"] = tuple(self.mask.shape)
        out["out"] = shape(self.heads, self.q_len, self.v_dim)
        return out

    def row_start(self, batch, head, row, heads: int, seq: int, dim: int):
        """The flat index of element 0 of ``row`` (a position) of ``head`` in ``batch`` of a
        tensor of ``heads`` x ``seq`` rows of ``dim`` in this layout (ints or index
        expressions)."""
        if self.layout == "bshd":
            return ((batch * seq + row) * heads + head) * dim
        return ((batch * heads + head) * seq + row) * dim

    def operand_start(self, which: int, batch, head, row, heads: int, seq: int, dim: int):
        """:meth:`row_start` of operand ``which`` (0 q, 1 k, 2 v) through its view, if it
        has one."""
        view = self.view(which)
        if view is None:
            return self.row_start(batch, head, row, heads, seq, dim)
        return (batch * seq + row) * view.row_stride + view.offset + head * dim


def check_workload(w: AttentionWorkload) -> None:
    """Raise :class:`AttentionError` naming the first rule ``w`` breaks."""
    if w.layout not in LAYOUTS:
        raise AttentionError(f"fused attention: layout must be one of {LAYOUTS} "
                             f"([B, H, L, E] or [B, L, H, E]), got {w.layout!r}")
    if w.dtype not in INPUT_DTYPES:
        raise AttentionError(f"fused attention runs {' and '.join(INPUT_DTYPES)} inputs on "
                             f"tensor cores, got {w.dtype}; cast q, k and v first")
    for name in ("batch", "heads", "kv_heads", "q_len", "kv_len"):
        if getattr(w, name) < 1:
            raise AttentionError(f"fused attention: {name} must be at least 1, got "
                                 f"{getattr(w, name)}")
    if w.heads > 65535 or w.batch > 65535:
        raise AttentionError(f"fused attention launches heads x batch blocks on the grid's "
                             f"y and z, at most 65535 each; got {w.heads} heads, batch "
                             f"{w.batch}: fold the batch into the heads or split it")
    if w.heads % w.kv_heads:
        raise AttentionError(f"{w.heads} query heads are not a multiple of the {w.kv_heads} "
                             "key/value heads (grouped-query attention needs a whole "
                             "number of query heads per key head)")
    for name in ("head_dim", "v_dim"):
        d = getattr(w, name)
        if d % 16 or not 16 <= d <= 256:
            raise AttentionError(f"fused attention: {name} {d} is not a multiple of 16 "
                                 "from 16 to 256 (the mma's k and n tiles); use the "
                                 "decomposed attention (decompose_attention) for it")
    if w.mask is not None:
        m = w.mask
        if len(m.shape) > 4:
            raise AttentionError(f"the mask {list(m.shape)} has more than 4 dimensions")
        full = (w.batch, w.heads, w.q_len, w.kv_len)
        for got, want in zip(reversed(m.shape), reversed(full)):
            if got not in (1, want):
                raise AttentionError(f"the mask {list(m.shape)} does not broadcast to the "
                                     f"scores {list(full)}")
        if m.dtype != "bool" and m.dtype not in ("float16", "bfloat16", "float32"):
            raise AttentionError(f"the mask must be bool or float16/bfloat16/float32, got "
                                 f"{m.dtype}")
    if w.views is not None:
        _check_views(w)
    biggest = max(w.batch * w.heads * w.q_len * max(w.head_dim, w.v_dim),
                  w.batch * w.kv_heads * w.kv_len * max(w.head_dim, w.v_dim),
                  *(v.size() for v in w.views or () if v is not None))
    if biggest >= 2**31:
        raise AttentionError(f"fused attention indexes its tensors in int32; a tensor of "
                             f"{biggest} elements is too large: split the batch")


COPY_ALIGN = 8
"""Elements of a 16-byte ``cp.async``: a view's row stride and offset are multiples of it,
so that every copy's source stays 16-byte aligned."""


def _check_views(w: AttentionWorkload) -> None:
    if not isinstance(w.views, tuple) or len(w.views) != 3:
        raise AttentionError(f"fused attention: views must be a tuple of three entries (q, "
                             f"k, v; each an OperandView or None), got {w.views!r}")
    if w.layout != "bshd" and any(v is not None for v in w.views):
        raise AttentionError("fused attention: operand views need layout 'bshd' (positions "
                             "outside heads, as a projection writes them), got "
                             f"{w.layout!r}")
    dims = ((w.q_len, w.heads, w.head_dim), (w.kv_len, w.kv_heads, w.head_dim),
            (w.kv_len, w.kv_heads, w.v_dim))
    for name, view, (seq, heads, dim) in zip("qkv", w.views, dims):
        if view is None:
            continue
        if not isinstance(view, OperandView):
            raise AttentionError(f"fused attention: the view of {name} must be an "
                                 f"OperandView or None, got {view!r}")
        base = tuple(view.base_shape)
        if not base or base[-1] != view.row_stride or math.prod(base[:-1]) != w.batch * seq:
            raise AttentionError(
                f"fused attention: {name} viewed in a tensor {list(base)}: its last "
                f"dimension must be the row stride {view.row_stride} and the others must "
                f"multiply to batch x positions = {w.batch * seq}")
        if view.offset < 0 or view.offset + heads * dim > view.row_stride:
            raise AttentionError(
                f"fused attention: {name}'s {heads} heads of {dim} from offset "
                f"{view.offset} do not fit in rows of {view.row_stride} elements")
        if view.row_stride % COPY_ALIGN or view.offset % COPY_ALIGN:
            raise AttentionError(
                f"fused attention: {name}'s row stride {view.row_stride} and offset "
                f"{view.offset} must be multiples of {COPY_ALIGN} elements (its tiles are "
                "copied 16 bytes at a time from 16-byte aligned addresses); copy the slice "
                "first")
