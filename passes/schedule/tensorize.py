"""tensorize: the loop nest under a loop becomes a registered tensor intrinsic."""

from __future__ import annotations

from dataclasses import dataclass

from ...ir.intrin import ANNOTATION, IntrinError, get_intrin
from ...ir.intrin.match import check_wgmma_swizzle, match_nest
from ...ir.stmt import PrimFunc
from ...ir.traversal import replace_at
from ..params import Ref, positional
from ..registry import register_pass
from .common import ScheduleError, SchedulePass, find_loop, on_main


def tensorize(func: PrimFunc, loop: str, intrin: str) -> PrimFunc:
    """Check the nest under ``loop`` against ``intrin``'s declared computation and mark the
    loop with it; code generation then runs the intrinsic in place of the nest."""
    try:
        spec = get_intrin(intrin)
    except IntrinError as e:
        raise ScheduleError(f"tensorize {loop}: {e}") from None
    path, _ = find_loop(func, loop)
    node = path[-1]
    if ANNOTATION in node.annotations:
        raise ScheduleError(f"tensorize {loop}: the loop is already tensorized as "
                            f"{node.annotations[ANNOTATION]}")
    try:
        bound = match_nest(node, spec, loop)
        if spec.kind == "wgmma":
            check_wgmma_swizzle(func.attrs.swizzle, bound, loop)
            for name in ("A", "B"):
                buf = bound.operands[name].buffer
                if func.attrs.storage_align.get(buf.name):
                    raise IntrinError(
                        f"tensorize {loop} as {spec.name}: operand {name} is {buf.name}, whose "
                        "rows are padded (storage_align); the wgmma descriptors read rows "
                        "of exactly 128 bytes in the 128B-swizzled layout: drop the padding")
            _check_wgmma_panels(func, bound, loop)
    except IntrinError as e:
        raise ScheduleError(str(e)) from None
    outer_thread = [n for n in path if getattr(n, "thread", "") == "threadIdx.x"]
    if outer_thread and spec.warpgroup:
        raise ScheduleError(
            f"tensorize {loop} as {spec.name}: the nest is inside loop "
            f"{outer_thread[-1].var.name}, bound to threadIdx.x; a warpgroup intrinsic is run "
            "by the 128 threads of a warpgroup, which are threadIdx.x (blockDim.x exactly "
            "128, bound by the cooperative copies): bind warpgroups to threadIdx.y/z and keep "
            "the nest outside threadIdx.x loops")
    if outer_thread:
        raise ScheduleError(
            f"tensorize {loop} as {spec.name}: the nest is inside loop "
            f"{outer_thread[-1].var.name}, bound to threadIdx.x; a tensor intrinsic is run by "
            "a whole warp: bind warps to threadIdx.y/z and leave threadIdx.x (32 lanes) "
            "to the cooperative copies")
    new = node.replace(annotations={**node.annotations, ANNOTATION: spec.name})
    return func.replace(body=replace_at(path, new))


def _check_wgmma_panels(func: PrimFunc, bound, loop: str) -> None:
    """An MN-major B (``_kn``) wider than one 64-column swizzle atom is read in panels of
    64 columns: its shared stage must be stored so (``layout_panels(64)``)."""
    from ...ir.intrin.match import PANEL_WIDTH

    spec = bound.intrin
    n = spec.shapes["C"][1]
    if not spec.name.endswith("_kn") or n <= PANEL_WIDTH:
        return
    buf = bound.operands["B"].buffer
    width = func.attrs.panels.get(buf.name)
    if width != PANEL_WIDTH:
        now = "no panel layout" if width is None else f"panels of {width}"
        raise IntrinError(
            f"tensorize {loop} as {spec.name}: operand B is {buf.name} with {now}; an "
            f"MN-major B of N = {n} is read as {n // PANEL_WIDTH} panels of {PANEL_WIDTH} "
            f"columns (128-byte swizzle rows): store the shared stage with "
            f"layout_panels({PANEL_WIDTH}) before tensorizing")


@register_pass
@dataclass(frozen=True)
class Tensorize(SchedulePass):
    """Replace the loop nest under a loop by a tensor intrinsic (``ir/intrin``).

    Parameters:
        loop: the loop, ``<stage>.<loop>``; the perfect nest under it (this loop included)
            must compute the intrinsic's declaration exactly.
        intrin: the intrinsic's registered name, e.g. ``"mma_m16n8k16_f16_f32"``.
    """

    name = "tensorize"
    loop: Ref = positional()
    intrin: str = positional()

    def apply(self, module, ctx):
        return on_main(module, lambda f: tensorize(f, self.loop, self.intrin))
