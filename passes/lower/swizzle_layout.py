"""swizzle_layout: apply the ``swizzle`` of shared buffers to every access (flat indices)."""

from __future__ import annotations

from dataclasses import dataclass

from ...ir import dtype as dt
from ...ir.attrs import Level
from ...ir.expr import Expr, IntImm, Load, floordiv, floormod
from ...ir.stmt import AsyncCopy, For, PrimFunc, Store
from ...ir.traversal import map_loads, walk
from ..base import Pass
from ..registry import register_pass
from .common import LoweringError, is_wgmma_loop

CHUNK_BYTES = 16


def xor_bits(a: Expr, b: Expr, bits: int) -> Expr:
    """``a XOR b`` for ``0 <= a, b < 2**bits``, as bit-by-bit sums (the IR has no xor;
    LLVM turns the power-of-two divisions into shifts and masks)."""
    out: Expr = IntImm(0, a.dtype)
    for k in range(bits):
        ak = floormod(floordiv(a, 1 << k), 2) if k else floormod(a, 2)
        bk = floormod(floordiv(b, 1 << k), 2) if k else floormod(b, 2)
        out = out + floormod(ak + bk, 2) * (1 << k)
    return out


def swizzled(index: Expr, elems_per_chunk: int, bits: int) -> Expr:
    """The swizzled position of flat element ``index``: its 16-byte chunk ``c`` within its
    group ``g`` of ``2**bits`` chunks moves to ``c XOR (g mod 2**bits)``."""
    n = 1 << bits
    chunk = floordiv(index, elems_per_chunk)
    c = floormod(chunk, n)
    g = floormod(floordiv(chunk, n), n)
    return index + (xor_bits(c, g, bits) - c) * elems_per_chunk


def swizzle_layout(func: PrimFunc) -> PrimFunc:
    table = func.attrs.swizzle
    if not table:
        return func
    bufs = {}
    for s in walk(func.body):
        b = getattr(s, "buffer", None)
        if b is not None and b.name in table and b.scope == "shared":
            bits = int(table[b.name])
            esize = dt.nbytes(b.dtype)
            if CHUNK_BYTES % esize:
                raise LoweringError(f"swizzle {b.name}: {b.dtype} elements do not tile 16-byte "
                                    "chunks", stage=b.name)
            group = CHUNK_BYTES << bits
            if (b.size * esize) % group:
                raise LoweringError(
                    f"swizzle {b.name}: the buffer holds {b.size * esize} bytes, not a multiple "
                    f"of {group} (2**{bits} chunks of 16 bytes); pad it (storage_align) or use "
                    "fewer bits", stage=b.name)
            bufs[b] = (CHUNK_BYTES // esize, bits)
    if not bufs:
        return func

    def fix(i: Expr, b) -> Expr:
        return swizzled(i, *bufs[b])

    def load(x):
        if x.buffer in bufs:
            return Load(x.buffer, (fix(x.indices[0], x.buffer),))
        return None

    def fs(x):
        if isinstance(x, Store) and x.buffer in bufs:
            return Store(x.buffer, (fix(x.indices[0], x.buffer),), x.value)
        if isinstance(x, AsyncCopy) and x.dst in bufs:
            return x.replace(dst_index=fix(x.dst_index, x.dst))
        return None

    # a wgmma nest reads its tiles through descriptors of the swizzled layout: its loads
    # stay logical (the hardware applies the XOR), so the nest keeps matching the intrinsic
    keep = {x.var: x for x in walk(func.body) if is_wgmma_loop(x)}

    def fs_keep(x):
        if isinstance(x, For) and x.var in keep:
            return keep[x.var]
        return fs(x)

    return func.replace(body=map_loads(func.body, load, fstmt=fs_keep if keep else fs))


@register_pass
@dataclass(frozen=True)
class SwizzleLayout(Pass):
    """Rewrite the accesses of swizzled shared buffers (see the ``swizzle`` pass)."""

    name = "swizzle_layout"
    lowering = True
    levels = (Level.KERNEL,)

    def apply(self, module, ctx):
        return self.map_functions(module, swizzle_layout)


__all__ = ["SwizzleLayout", "swizzle_layout", "swizzled", "xor_bits"]
