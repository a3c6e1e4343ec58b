"""flatten_buffers: every buffer becomes 1-D, indices become offsets (row-major, or the
buffer's padded strides from storage_align)."""

from __future__ import annotations

from dataclasses import dataclass

from ...ir.attrs import Level
from ...ir.expr import IntImm, Load
from ...ir.simplify import simplify
from ...ir.stmt import Alloc, Buffer, PrimFunc, Store, map_stmt
from ..base import Pass
from ..registry import register_pass
from .common import rewrite_loads


def flat_buffer(buf: Buffer) -> Buffer:
    return Buffer(buf.name, buf.dtype, (buf.size,), buf.scope)


def flat_index(buf: Buffer, indices) -> tuple:
    off = None
    for i, st in zip(indices, buf.compact_strides()):
        term = i if st == 1 else i * IntImm(st)
        off = term if off is None else off + term
    return (IntImm(0) if off is None else simplify(off),)


def flatten_buffers(func: PrimFunc) -> tuple:
    """Returns ``(flat function, {flat param buffer: original param buffer})``."""
    bmap: dict = {b: flat_buffer(b) for b in func.params}

    def get(b):
        if b not in bmap:
            bmap[b] = flat_buffer(b)
        return bmap[b]

    def fe(e):
        return rewrite_loads(e, lambda x: Load(get(x.buffer), flat_index(x.buffer, x.indices)))

    def fs(x):
        if isinstance(x, Store):
            return Store(get(x.buffer), flat_index(x.buffer, x.indices), x.value)
        if isinstance(x, Alloc):
            return x.replace(buffer=get(x.buffer))
        return None

    body = map_stmt(func.body, fstmt=fs, fexpr=fe)
    params = tuple(bmap[b] for b in func.params)
    attrs = func.attrs.with_launch(flat=True) if func.attrs.launch else func.attrs
    return (func.replace(params=params, body=body, attrs=attrs),
            {bmap[b]: b for b in func.params})


@register_pass
@dataclass(frozen=True)
class FlattenBuffers(Pass):
    """Make every buffer of every kernel 1-D (indices become offsets)."""

    name = "flatten_buffers"
    lowering = True
    levels = (Level.KERNEL,)

    def apply(self, module, ctx):
        return self.map_functions(module, lambda f: flatten_buffers(f)[0])
