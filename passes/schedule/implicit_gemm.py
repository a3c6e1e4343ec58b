"""implicit_gemm: compute a convolution-like reduction as a matrix product.

A reduction ``out[s...] += f(A[...], B[...])`` over reduce vars ``r...`` whose spatial vars
split into those only ``A`` reads (the rows, ``m``) and those only ``B`` reads (the
columns, ``n``) is rewritten into four stages (``X`` the stage)::

    X.A[m, k]    = A[...]           # the operand viewed as a matrix: im2col of the input
    X.B[k, n]    = B[...]           # (or [n, k]): the kernel as a matrix
    X.gemm[m, n] += f(X.A[m, k], X.B[k, n])
    X[s...]      = X.gemm[m(s), n(s)]

``m``, ``n`` and ``k`` are the row-major fusions of their vars, in the stage's order (for
``conv2d_nhwc``: ``m = (nn, yy, xx)``, ``n = ff``, ``k = (ry, rx, rc)``). Leading spatial
vars that both operands read (a batch_matmul's ``b``; or that neither reads, of extent 1)
are batch axes: they fuse into one leading axis ``b`` of every stage (``X.A[b, m, k]``,
``X.B[b, k, n]``, ``X.gemm[b, m, n]``), which is not padded. Each extent is
rounded up to a multiple of its ``pad_*`` with zeros in ``X.A`` and ``X.B`` (a padded row or
column of the product is never read back), so tiles of those sizes divide the product.
The operand stages are meant to be inlined into their shared-memory copies, so no matrix is
ever built in global memory (an implicit GEMM); the product is then scheduled as a dense
one (tensor cores: ``ops/schedules/tensorcore_conv.py``; dense, matmul and batch_matmul
of awkward sizes: ``ops/schedules/tensorcore_gemm.py``), and ``X`` is a copy inlined into
the epilogue.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import gcd
from typing import Literal

from ...ir import dtype as dt
from ...ir.expr import (
    Bin,
    Cmp,
    IntImm,
    Load,
    Select,
    Var,
    const,
    floordiv,
    floormod,
    free_vars,
    logical_and,
    substitute,
)
from ...ir.stmt import (
    Alloc,
    Block,
    BlockVar,
    Buffer,
    For,
    PrimFunc,
    Seq,
    Store,
    substitute_stmt,
)
from ...ir.traversal import block_paths, replace_at, rewrite_loads
from ..params import Ref, positional
from ..registry import register_pass
from .cache_read import unwrap_allocs, wrap_allocs
from .common import ScheduleError, SchedulePass, find_block, on_main, own_loop_top
from .names import fresh_name, implicit_gemm_names

GUARD_VECTOR = 8
"""Padding guards are written per group of this many elements (where the true extent
allows), so that a vectorized copy of a padded tile tests its guard once per vector."""

GUARD_BYTES = 16
"""... and of at least this many bytes of the operands (a 16-byte cp.async): 16 elements of
a one-byte dtype (fp8), whose copies are vectors of 16; a guard of 8 there would split each
vector in two halves with their own tests, which cp.async cannot copy."""


def guard_group(extent: int, elem_bytes: int) -> int:
    """The elements per group of the padding guard of a dimension of ``extent`` elements of
    ``elem_bytes`` bytes: :data:`GUARD_VECTOR`, or :data:`GUARD_BYTES` worth of elements
    where that is more, as much of it as divides ``extent``."""
    return gcd(extent, max(GUARD_VECTOR, GUARD_BYTES // max(elem_bytes, 1)))


@dataclass(frozen=True)
class GemmView:
    """How :func:`implicit_gemm` reads a stage as a product: the operand buffers, the
    vars of each fused dimension (outermost first) and the true and padded extents."""

    a: Buffer
    b: Buffer
    m_vars: tuple
    n_vars: tuple
    k_vars: tuple
    sizes: tuple            # (M, N, K)
    padded: tuple           # (Mp, Np, Kp)
    b_vars: tuple = ()      # leading batch axes: read by both operands (or an extent 1)


def _extent(ivs) -> int:
    n = 1
    for iv in ivs:
        n *= iv.extent
    return n


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def gemm_view(block: Block, pads=(1, 1, 1)) -> GemmView:
    """The product structure of reduction ``block``, or a ScheduleError saying which rule
    it breaks."""
    where = f"implicit_gemm {block.name}"
    if block.init is None or not any(iv.kind == "R" for iv in block.iter_vars):
        raise ScheduleError(f"{where}: the stage is not a reduction")
    st = block.body
    if not isinstance(st, Store):
        raise ScheduleError(f"{where}: its body is not a single store (a reduction with a "
                            "condition is not a product)")
    out = st.buffer
    spatial = [iv for iv in block.iter_vars if iv.kind == "S"]
    reduce = [iv for iv in block.iter_vars if iv.kind == "R"]
    if tuple(st.indices) != tuple(iv.var for iv in spatial):
        raise ScheduleError(f"{where}: it must store at its own spatial axes in order")
    v = st.value
    if not (isinstance(v, Bin) and v.op == "add" and isinstance(v.a, Load)
            and v.a.buffer is out):
        raise ScheduleError(f"{where}: the reduction is not a sum")
    loads = [x for x in _loads(v.b) if x.buffer is not out]
    bufs = []
    for x in loads:
        if x.buffer not in bufs:
            bufs.append(x.buffer)
    if len(bufs) != 2 or len(loads) != 2:
        raise ScheduleError(f"{where}: a product reads two operands once each; it reads "
                            f"{', '.join(b.name for b in bufs) or 'none'}")
    uses = [set().union(*(free_vars(i) for i in x.indices)) for x in loads]

    def batch_axis(iv) -> bool:  # both operands read it, or neither does and it is 1
        in0, in1 = iv.var in uses[0], iv.var in uses[1]
        return (in0 and in1) or (not in0 and not in1 and iv.extent == 1)

    nb = 0
    while nb < len(spatial) - 1 and batch_axis(spatial[nb]):
        nb += 1
    b_vars, rest = tuple(spatial[:nb]), spatial[nb:]
    a_idx = 0 if rest[0].var in uses[0] else 1
    ua, ub = uses[a_idx], uses[1 - a_idx]
    m_vars = tuple(iv for iv in rest if iv.var in ua and iv.var not in ub)
    n_vars = tuple(iv for iv in rest if iv.var in ub and iv.var not in ua)
    for iv in rest:
        if (iv.var in ua) == (iv.var in ub):
            raise ScheduleError(
                f"{where}: spatial axis {iv.var.name} is read by "
                f"{'both operands (a batch axis)' if iv.var in ua else 'neither operand'}"
                f"{' after a row or column axis' if iv.var in ua else ''}; each spatial "
                "axis must index exactly one operand, except batch axes, which lead")
    for ivs, buf in ((m_vars, bufs[a_idx]), (n_vars, bufs[1 - a_idx])):
        if not ivs:
            raise ScheduleError(f"{where}: no spatial axis indexes only {buf.name}")
    for p, what in zip(pads, ("pad_m", "pad_n", "pad_k")):
        if not isinstance(p, int) or p < 1:
            raise ScheduleError(f"{where}: {what} must be a positive int, got {p!r}")
    sizes = (_extent(m_vars), _extent(n_vars), _extent(reduce))
    padded = tuple(_round_up(s, p) for s, p in zip(sizes, pads))
    return GemmView(bufs[a_idx], bufs[1 - a_idx], m_vars, n_vars, tuple(reduce), sizes,
                    padded, b_vars)


def _loads(e) -> list:
    from ...ir.expr import children

    out, stack = [], [e]
    while stack:
        x = stack.pop()
        if isinstance(x, Load):
            out.append(x)
        stack.extend(reversed(children(x)))
    return out


def _unfuse(fused: Var, ivs) -> dict:
    """``{var: index}`` of the vars ``ivs`` (outermost first) from their row-major fusion."""
    out = {}
    stride = 1
    for k in range(len(ivs) - 1, -1, -1):
        iv = ivs[k]
        idx = fused if stride == 1 else floordiv(fused, IntImm(stride))
        if k > 0:
            idx = floormod(idx, IntImm(iv.extent))
        out[iv.var] = idx
        stride *= iv.extent
    return out


def _fuse(ivs, values: dict):
    """The row-major fusion of ``ivs`` with each var replaced by ``values[var]``."""
    e = None
    for iv in ivs:
        x = values[iv.var]
        e = x if e is None else e * IntImm(iv.extent) + x
    return e


def _guard(var: Var, extent: int, padded: int, elem_bytes: int):
    """``var < extent`` for a padded dimension (None when not padded), written on groups of
    :func:`guard_group` elements where ``extent`` allows."""
    if padded == extent:
        return None
    g = guard_group(extent, elem_bytes)
    if g > 1:
        return Cmp("lt", floordiv(var, IntImm(g)), IntImm(extent // g))
    return Cmp("lt", var, IntImm(extent))


def _and(conds):
    conds = [c for c in conds if c is not None]
    out = None
    for c in conds:
        out = c if out is None else logical_and(out, c)
    return out


def _nest(name: str, loops, ivs, body, init=None):
    """A loop nest of fresh loops (named ``loops``) around a block with fresh iteration vars
    for ``ivs`` (BlockVars whose vars ``body`` and ``init`` use), bound to them in order."""
    fresh = [BlockVar(Var(iv.var.name), iv.extent, iv.kind) for iv in ivs]
    vmap = {old.var: new.var for old, new in zip(ivs, fresh)}
    body = substitute_stmt(body, vmap)
    init = None if init is None else substitute_stmt(init, vmap)
    loop_vars = [Var(n) for n in loops]
    stmt = Block(name, fresh, loop_vars, body, init=init)
    for lv, iv in reversed(list(zip(loop_vars, fresh))):
        stmt = For(lv, iv.extent, stmt)
    return stmt


def implicit_gemm(func: PrimFunc, stage: str, pad_m: int = 1, pad_n: int = 1, pad_k: int = 1,
                  b_layout: str = "kn") -> PrimFunc:
    """Rewrite reduction ``stage`` into the stages of a matrix product (see the module
    doc). ``b_layout``: ``"kn"`` makes ``X.B`` ``[k, n]``, ``"nk"`` ``[n, k]``."""
    where = f"implicit_gemm {stage}"
    if b_layout not in ("kn", "nk"):
        raise ScheduleError(f"{where}: b_layout is 'kn' or 'nk', not {b_layout!r}")
    path = find_block(func, stage)
    block: Block = path[-1]
    top = own_loop_top(path)
    loops = [n for n in path[top:-1] if isinstance(n, For)]
    if (top != _top_level_index(path) or len(loops) != len(block.iter_vars)
            or any(b is not lp.var for b, lp in zip(block.bindings, loops))
            or any(lp.kind != "serial" or lp.annotations for lp in loops)
            or block.predicate is not None):
        raise ScheduleError(f"{where}: apply it to the stage as declared, before its loops "
                            "are split, fused, reordered, bound or computed at another stage")
    view = gemm_view(block, (pad_m, pad_n, pad_k))
    (M, N, K), (Mp, Np, Kp) = view.sizes, view.padded
    taken = set(block_paths(func.body))
    a_name, b_name, g_name = (fresh_name(n, taken) for n in implicit_gemm_names(stage))
    out = block.body.buffer
    # batch axes (if any) fuse into one leading axis of every stage
    vb = Var("vb")
    lead_n = (_extent(view.b_vars),) if view.b_vars else ()
    lead = (vb,) if view.b_vars else ()
    lead_ivs = [BlockVar(vb, lead_n[0], "S")] if view.b_vars else []
    lead_loops = ("b",) if view.b_vars else ()
    a_buf = Buffer(a_name, view.a.dtype, lead_n + (Mp, Kp))
    b_buf = Buffer(b_name, view.b.dtype, lead_n + ((Kp, Np) if b_layout == "kn" else (Np, Kp)))
    g_buf = Buffer(g_name, out.dtype, lead_n + (Mp, Np))
    vm, vn, vk = Var("vm"), Var("vn"), Var("vk")
    vmap = {**_unfuse(vb, view.b_vars), **_unfuse(vm, view.m_vars), **_unfuse(vn, view.n_vars),
            **_unfuse(vk, view.k_vars)}
    esize = min(dt.nbytes(view.a.dtype), dt.nbytes(view.b.dtype))
    gm, gn, gk = (_guard(vm, M, Mp, esize), _guard(vn, N, Np, esize),
                  _guard(vk, K, Kp, esize))

    def operand(buf, cond):
        load = next(x for x in _loads(block.body.value.b) if x.buffer is buf)
        value = Load(buf, tuple(substitute(i, vmap) for i in load.indices))
        if cond is not None:
            value = Select(cond, value, const(0, buf.dtype))
        return value

    a_ivs = lead_ivs + [BlockVar(vm, Mp, "S"), BlockVar(vk, Kp, "S")]
    a_nest = _nest(a_name, lead_loops + ("m", "k"), a_ivs,
                   Store(a_buf, lead + (vm, vk), operand(view.a, _and([gm, gk]))))
    b_idx = lead + ((vk, vn) if b_layout == "kn" else (vn, vk))
    b_ivs = [BlockVar(vk, Kp, "S"), BlockVar(vn, Np, "S")]
    if b_layout == "nk":
        b_ivs.reverse()
    b_nest = _nest(b_name, lead_loops + (("k", "n") if b_layout == "kn" else ("n", "k")),
                   lead_ivs + b_ivs, Store(b_buf, b_idx, operand(view.b, _and([gk, gn]))))

    def redirect(x):
        if x.buffer is view.a:
            return Load(a_buf, lead + (vm, vk))
        if x.buffer is view.b:
            return Load(b_buf, b_idx)
        return None

    src = substitute(rewrite_loads(block.body.value.b, redirect), vmap)
    acc = Load(g_buf, lead + (vm, vn))
    g_ivs = lead_ivs + [BlockVar(vm, Mp, "S"), BlockVar(vn, Np, "S"), BlockVar(vk, Kp, "R")]
    g_nest = _nest(g_name, lead_loops + ("m", "n", "k"), g_ivs,
                   Store(g_buf, lead + (vm, vn), Bin("add", acc, src)),
                   init=Store(g_buf, lead + (vm, vn), block.init.value))
    # the stage itself: a copy of the product's true rows and columns
    spatial = [iv for iv in block.iter_vars if iv.kind == "S"]
    values = {iv.var: iv.var for iv in spatial}
    lead_read = (_fuse(view.b_vars, values),) if view.b_vars else ()
    read = Load(g_buf, lead_read + (_fuse(view.m_vars, values), _fuse(view.n_vars, values)))
    copy = _nest(stage, [lp.var.name for lp in loops[:len(spatial)]], spatial,
                 Store(out, tuple(iv.var for iv in spatial), read))
    body = replace_at(path[: top + 1], Seq([a_nest, b_nest, g_nest, copy]))
    stmts, allocs = unwrap_allocs(body)
    return func.replace(body=wrap_allocs(stmts, allocs + [a_buf, b_buf, g_buf]))


def _top_level_index(path) -> int:
    """Index in ``path`` of the statement directly under the function's allocations and
    top-level sequence (the stage's outermost loop when it is not attached elsewhere)."""
    k = 0
    while k < len(path) and isinstance(path[k], (Alloc, Seq)):
        k += 1
    return k


@register_pass
@dataclass(frozen=True)
class ImplicitGemm(SchedulePass):
    """Compute a convolution-like reduction as a matrix product ``X.gemm[m, n]`` of an
    operand matrix ``X.A[m, k]`` and ``X.B[k, n]`` (or ``[n, k]``), each extent padded to a
    multiple of ``pad_*`` with zeros; the stage becomes a copy of the product.

    Parameters:
        stage: the reduction (unscheduled).
        pad_m: the rows (output pixels) are padded to a multiple of this.
        pad_n: the columns (output channels) likewise.
        pad_k: the reduction (kernel window times input channels) likewise.
        b_layout: ``"kn"`` or ``"nk"``: the layout of ``X.B``.
    """

    name = "implicit_gemm"
    stage: Ref = positional()
    pad_m: int = 1
    pad_n: int = 1
    pad_k: int = 1
    b_layout: Literal["kn", "nk"] = "kn"

    def apply(self, module, ctx):
        return on_main(module, lambda f: implicit_gemm(f, self.stage, self.pad_m, self.pad_n,
                                                       self.pad_k, self.b_layout))
