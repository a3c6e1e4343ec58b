"""compute_inline: substitute a stage's expression into its readers and drop the stage."""

from __future__ import annotations

from dataclasses import dataclass

from ...ir.expr import substitute
from ...ir.stmt import Alloc, Block, PrimFunc, Store, map_stmt, walk
from ...ir.traversal import replace_at, rewrite_loads
from ..params import Ref, positional
from ..registry import register_pass
from .common import (
    ScheduleError,
    SchedulePass,
    find_block,
    on_main,
    own_loop_top,
    paths_of,
)


def check_single_output(block: Block, primitive: str) -> None:
    """Raise a clear ScheduleError when ``block`` is a tuple compute's stage (it stores more
    than one buffer): ``primitive`` cannot take a stage with several outputs."""
    bufs = []
    for x in walk(block.body):
        if isinstance(x, Store) and not any(b is x.buffer for b in bufs):
            bufs.append(x.buffer)
    if len(bufs) > 1:
        raise ScheduleError(
            f"{primitive} {block.name}: it computes {len(bufs)} outputs "
            f"({', '.join(b.name for b in bufs)}), a tuple compute; a stage with several "
            "outputs cannot be inlined (each reader would recompute all of them, and TVM "
            "refuses it too): keep it at the root or compute_at it into its reader")


def inline_body(block: Block):
    """``(buffer, iter vars, value)`` of an inlinable block, or raise ScheduleError."""
    if block.init is not None:
        raise ScheduleError(
            f"compute_inline {block.name}: it is a reduction; only element-wise or injective "
            "stages (one plain store) can be inlined"
        )
    if any(iv.kind != "S" for iv in block.iter_vars):
        raise ScheduleError(f"compute_inline {block.name}: it has reduction axes")
    if block.predicate is not None:
        raise ScheduleError(
            f"compute_inline {block.name}: its loops were split unevenly (it has a predicate); "
            "inline before splitting it"
        )
    st = block.body
    if not isinstance(st, Store):
        check_single_output(block, "compute_inline")
        raise ScheduleError(f"compute_inline {block.name}: its body is not a single store")
    ivs = [iv.var for iv in block.iter_vars]
    if len(st.indices) != len(ivs) or any(i is not v for i, v in zip(st.indices, ivs)):
        raise ScheduleError(
            f"compute_inline {block.name}: it stores at {st.indices}, not at its own axes"
        )
    return st.buffer, ivs, st.value


def compute_inline(func: PrimFunc, stage: str) -> PrimFunc:
    path = find_block(func, stage)
    block: Block = path[-1]
    buf, ivs, value = inline_body(block)
    if buf in func.params:
        raise ScheduleError(
            f"compute_inline {stage}: it writes {buf.name}, an argument of the function; "
            "only intermediate stages can be inlined"
        )
    for other_name, other_path in paths_of(func.body).items():
        if other_name == stage:
            continue
        for s in walk(other_path[-1]):
            if isinstance(s, Store) and s.buffer is buf:
                raise ScheduleError(
                    f"compute_inline {stage}: block {other_name} also writes {buf.name}"
                )
    top = own_loop_top(path)
    body = replace_at(path[: top + 1], None)

    def rewrite(e):
        def load(x):
            if x.buffer is buf:
                return substitute(value, dict(zip(ivs, x.indices)))
            return None

        return rewrite_loads(e, load)

    def drop_alloc(x):
        if isinstance(x, Alloc) and x.buffer is buf:
            return x.body
        return None

    body = map_stmt(body, fstmt=drop_alloc, fexpr=rewrite)
    return func.replace(body=body)


@register_pass
@dataclass(frozen=True)
class ComputeInline(SchedulePass):
    """Inline an element-wise or injective stage into its readers.

    Parameters:
        stage: the stage to inline.
    """

    name = "compute_inline"
    stage: Ref = positional()

    def apply(self, module, ctx):
        return on_main(module, lambda f: compute_inline(f, self.stage))
