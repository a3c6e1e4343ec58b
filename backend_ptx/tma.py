"""The TMA and mbarrier statements in PTX (sm_90 and later).

LLVM 22 has NVVM intrinsics for some of these, but their signatures moved between releases
(the shared::cluster address space of the bulk copies, the cta_group flag), so each is one
inline-PTX statement, written as the PTX ISA spells it, with a memory clobber so that no
access of shared memory moves across it:

* ``mbarrier.init.shared::cta.b64 [bar], count``;
* ``fence.mbarrier_init.release.cluster``;
* ``mbarrier.arrive[.expect_tx].shared::cta.b64 _, [bar][, tx]``;
* a loop on ``mbarrier.try_wait.parity.shared::cta.b64`` (the label made unique by
  ``${:uid}``);
* ``cp.async.bulk.tensor.Nd.shared::cluster.global.tile.mbarrier::complete_tx::bytes
  [dst], [map, {c_inner, ..., c_outer}], [bar]``: the PTX lists coordinates innermost
  first, the IR outermost first.

Shared addresses are 32-bit (``r``); the tensor map is the generic address of the kernel's
by-value ``.param .align 64 .b8 map[128]`` (``cvta.param`` of a ``nvvm.grid_constant``
byval parameter), so the map stays in the parameter space as the TMA unit requires.
"""

from __future__ import annotations

from ..ir.stmt_tma import FenceMbarrierInit, MbarrierArrive, MbarrierInit, MbarrierWait, TmaLoad
from .exprgen import CodegenError

TENSOR_MAP_PARAM = 'ptr byval([128 x i8]) align 64 "nvvm.grid_constant"'
"""The LLVM parameter of a :class:`~ptxforge.ir.stmt_tma.TensorMap`: NVPTX prints it as
``.param .align 64 .b8 name[128]`` and takes its address with ``cvta.param``."""

WAIT_LOOP = ("{\n\t.reg .pred p;\n\tLAB_WAIT_${:uid}:\n\t"
             "mbarrier.try_wait.parity.shared::cta.b64 p, [$0], $1;\n\t"
             "@!p bra LAB_WAIT_${:uid};\n\t}")


class TmaCodegen:
    """Mixin of :class:`~.codegen.KernelCodegen`: the TMA and mbarrier statements."""

    def _require_tma(self, what: str) -> None:
        if not self.target.has_tma:
            raise CodegenError(
                f"kernel {self.func.name}: {what} needs the tensor memory accelerator and "
                f"mbarrier transactions (sm_90 and later); the target is {self.target.arch}")

    def _asm(self, text: str, constraints: str, operands: list) -> None:
        cons = ",".join([constraints, "~{memory}"] if constraints else ["~{memory}"])
        args = ", ".join(operands)
        self.w.op(f'call void asm sideeffect "{text}", "{cons}"({args})')

    def _shared_address(self, buf, index) -> str:
        """The 32-bit shared-memory address of ``buf[index]``."""
        ptr, ref = self._address(buf, index)
        if ref.addrspace != 3:
            raise CodegenError(f"kernel {self.func.name}: {buf.name} is not in shared "
                               "memory; mbarriers and TMA destinations are")
        return self.w.value(f"ptrtoint ptr addrspace(3) {ptr} to i32", buf.name + ".sa")

    def _s_MbarrierInit(self, s: MbarrierInit) -> None:
        self._require_tma("mbarrier_init")
        bar = self._shared_address(s.barrier, s.index)
        self._asm("mbarrier.init.shared::cta.b64 [$0], $1;", "r,r",
                  [f"i32 {bar}", f"i32 {s.count}"])

    def _s_FenceMbarrierInit(self, s: FenceMbarrierInit) -> None:
        self._require_tma("fence_mbarrier_init")
        self._asm("fence.mbarrier_init.release.cluster;", "", [])

    def _s_MbarrierArrive(self, s: MbarrierArrive) -> None:
        self._require_tma("mbarrier_arrive")
        bar = self._shared_address(s.barrier, s.index)
        if s.tx_bytes is None:
            self._asm("mbarrier.arrive.shared::cta.b64 _, [$0];", "r", [f"i32 {bar}"])
        else:
            self._asm("mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], $1;", "r,r",
                      [f"i32 {bar}", f"i32 {s.tx_bytes}"])

    def _s_MbarrierWait(self, s: MbarrierWait) -> None:
        self._require_tma("mbarrier_wait")
        bar = self._shared_address(s.barrier, s.index)
        parity = self.expr(s.parity)
        self._asm(WAIT_LOOP, "r,r", [f"i32 {bar}", f"i32 {parity}"])

    def _s_TmaLoad(self, s: TmaLoad) -> None:
        self._require_tma("tma_load")
        tmap = self.tensor_maps.get(s.tmap)
        if tmap is None:
            raise CodegenError(f"kernel {self.func.name}: tma_load of {s.tmap.name}, which is "
                               "not one of its tensor map parameters")
        dst = self._shared_address(s.dst, s.dst_index)
        bar = self._shared_address(s.barrier, s.bar_index)
        addr = self.w.value(f"ptrtoint ptr {tmap} to i64", s.tmap.name + ".map")
        coords = [self.expr(c) for c in reversed(s.coords)]
        rank = len(coords)
        places = ", ".join(f"${3 + k}" for k in range(rank))
        text = (f"cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile."
                f"mbarrier::complete_tx::bytes [$0], [$1, {{{places}}}], [$2];")
        self._asm(text, ",".join(["r", "l", "r"] + ["r"] * rank),
                  [f"i32 {dst}", f"i64 {addr}", f"i32 {bar}"] + [f"i32 {c}" for c in coords])


__all__ = ["TENSOR_MAP_PARAM", "TmaCodegen"]
