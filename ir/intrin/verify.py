"""The verifier's rules for fragments and tensorized loop nests (see ``ir/verify.py``).

At every level: a tensorized loop names a registered intrinsic, and tensorized nests do not
nest. In kernels (device IR), where the nests run as warp-collective instructions:

* a fragment (``warp`` buffer) is owned by one warp: allocated outside ``threadIdx.x``
  loops, in a block whose x extent is a multiple of 32, with whole registers per lane;
* a fragment is loaded and stored only inside tensorized nests;
* a tensorized nest is not inside a loop bound to ``threadIdx.x`` (the lanes of a warp):
  all 32 lanes run it with the same operands;
* the block's x extent is a multiple of 32, so every warp has one ``threadIdx.y/z``: the
  warp index, and every operand computed from it, is uniform across the warp;
* the nest matches its intrinsic and each fragment holds whole tiles of it.

A ``warpgroup`` buffer (a wgmma accumulator) follows the same rules with a warpgroup of 128
threads in place of a warp: blockDim.x is exactly 128 (``threadIdx.x`` is the thread in
the warpgroup, ``threadIdx.y/z`` the warpgroup), and the warpgroup intrinsics (``wgmma``,
the ``wg_c`` fills and stores) sit outside ``threadIdx.x`` loops.
"""

from __future__ import annotations

from . import ANNOTATION, WARP
from .layout import WARPGROUP
from .match import check_wgmma_swizzle, match_nest
from .registry import IntrinError, get_intrin


def check_tensorized(v, s) -> None:
    """Check the tensorized loop ``s`` for the verifier ``v`` (an ``_FuncVerifier``)."""
    name = s.annotations[ANNOTATION]
    try:
        get_intrin(name)
    except IntrinError as e:
        msg = str(e)
        v.fail(lambda n: f"loop {n(s.var)}: {msg}")
    if v.intrin_loop is not None:
        outer = v.intrin_loop
        v.fail(lambda n: f"tensorized loop {n(s.var)} is inside tensorized loop "
                         f"{n(outer.var)}; a tensor intrinsic's nest holds no other")
    if v.kind != "kernel":
        return
    lane_loop = v.hw_loops.get("threadIdx.x")
    if lane_loop is not None:
        v.fail(lambda n: f"tensorized loop {n(s.var)} ({name}) is inside loop "
                         f"{n(lane_loop.var)}, bound to threadIdx.x: the lanes of a warp "
                         "would run it with different operands; warp-collective intrinsics "
                         "sit outside the threadIdx.x loops")
    bx = v.launch.get("threadIdx.x", 1)
    if get_intrin(name).warpgroup and bx != WARPGROUP:
        v.fail(lambda n: f"tensorized loop {n(s.var)} ({name}) is run by a warpgroup in a "
                         f"kernel whose blockDim.x is {bx}; warpgroup intrinsics need "
                         f"blockDim.x to be exactly {WARPGROUP} (threadIdx.x: the thread in "
                         "the warpgroup; warpgroups along threadIdx.y/z)")
    if bx % WARP:
        v.fail(lambda n: f"tensorized loop {n(s.var)} ({name}) in a kernel whose blockDim.x "
                         f"is {bx}; warp-collective intrinsics need blockDim.x to be a "
                         f"multiple of {WARP} (so the warp index is uniform in a warp)")
    try:
        bound = match_nest(s, name, s.var.name, device=True)
    except IntrinError as e:
        msg = str(e)
        v.fail(lambda n: msg)
    if bound.intrin.kind == "wgmma":
        if v.target is not None and not v.target.has_wgmma:
            v.fail(lambda n: f"tensorized loop {n(s.var)} ({name}): wgmma needs sm_90a; the "
                             f"target is {v.target.arch}")
        try:
            check_wgmma_swizzle(v.func.attrs.swizzle, bound, s.var.name)
        except IntrinError as e:
            msg = str(e)
            v.fail(lambda n: msg)
    for opname, op in bound.operands.items():
        role = bound.intrin.role(opname)
        if role is not None and op.buffer.size % role.tile_elems:
            v.fail(lambda n, op=op, role=role: f"fragment {n(op.buffer)} holds "
                   f"{op.buffer.size} elements, not whole {role.rows}x{role.cols} tiles of "
                   f"{bound.intrin.name}")


def check_fragment_access(v, buf, what: str, indices: tuple = ()) -> None:
    """A plain load or store of a ``warp`` fragment is allowed only inside a tensorized
    nest. A ``warpgroup`` fragment (a wgmma accumulator) may also be accessed outside one
    as a *register access* (:mod:`.wgmma_regs`): the index is then the thread's register
    slot, the same for every thread of the warpgroup (free of ``threadIdx.x``)."""
    if buf.scope not in ("warp", "warpgroup") or v.kind != "kernel" or v.intrin_loop is not None:
        return
    if buf.scope == "warp":
        v.fail(lambda n: f"{what} fragment {n(buf)} outside a tensorized loop nest; "
                         "fragments are accessed only by tensor intrinsics (tensorize the "
                         "nest that touches it)")
    from ..expr import free_vars

    lane_loop = v.hw_loops.get("threadIdx.x")
    if lane_loop is not None and any(lane_loop.var in free_vars(i) for i in indices):
        v.fail(lambda n: f"register {what} of warpgroup fragment {n(buf)} at a slot that "
                         f"depends on {n(lane_loop.var)} (threadIdx.x); a register access "
                         "names the same register slot in every thread of the warpgroup "
                         "(its position in the tile follows from the thread: "
                         "ir/intrin/wgmma_regs.py)")


def check_fragment_alloc(v, buf) -> None:
    """A kernel's fragment is held by whole warps: blockDim.x a multiple of 32 (one warp
    index per warp) and whole registers per lane."""
    if buf.scope not in ("warp", "warpgroup") or v.kind != "kernel":
        return
    bx = v.launch.get("threadIdx.x", 1)
    if buf.scope == "warpgroup":
        if bx != WARPGROUP:
            v.fail(lambda n: f"warpgroup fragment {n(buf)} in a kernel whose blockDim.x is "
                             f"{bx}; a wgmma accumulator is owned by a warpgroup, which needs "
                             f"blockDim.x to be exactly {WARPGROUP}")
        if buf.size % WARPGROUP:
            v.fail(lambda n: f"warpgroup fragment {n(buf)} holds {buf.size} elements, not a "
                             f"multiple of the warpgroup's {WARPGROUP} threads")
    if bx % WARP:
        v.fail(lambda n: f"fragment {n(buf)} in a kernel whose blockDim.x is {bx}; a "
                         f"fragment is owned by one warp, which needs blockDim.x to be a "
                         f"multiple of {WARP}")
    if buf.size % WARP:
        v.fail(lambda n: f"fragment {n(buf)} holds {buf.size} elements, not a multiple of "
                         f"the warp's {WARP} lanes")
    lane_loop = v.hw_loops.get("threadIdx.x")
    if lane_loop is not None:
        v.fail(lambda n: f"fragment {n(buf)} is allocated inside loop {n(lane_loop.var)}, "
                         "bound to threadIdx.x; a fragment belongs to the whole warp")
