"""Code generation of cp.async copies, commit groups and waits (sm_80 and later)."""

from __future__ import annotations

from ..ir.expr import IntImm, Select
from ..ir.stmt import AsyncCommit, AsyncCopy, AsyncWait
from . import nvptx
from .exprgen import CodegenError
from .llvm_text import pointer_type


class AsyncCopyCodegen:
    """Mixin of the kernel code generator: ``_s_AsyncCopy``, ``_s_AsyncCommit``,
    ``_s_AsyncWait`` as NVVM intrinsic calls."""

    def _need_cp_async(self, what: str) -> None:
        if not self.target.has_cp_async:
            raise CodegenError(
                f"kernel {self.func.name}: {what} needs sm_80 or later; the target is "
                f"{self.target.arch}. Drop async_copy / software_pipeline from the schedule "
                "for this target")

    def _s_AsyncCopy(self, s: AsyncCopy) -> None:
        self._need_cp_async("cp.async")
        dptr, dref = self._address(s.dst, s.dst_index)
        src_index = s.src_index
        if s.src_bytes is not None:
            # where nothing is read the address stays in the buffer all the same
            src_index = Select(s.src_bytes > IntImm(0, "int32"), src_index,
                               IntImm(0, src_index.dtype))
        sptr, sref = self._address(s.src, src_index)
        args = [f"{pointer_type(dref.addrspace)} {dptr}", f"{pointer_type(sref.addrspace)} {sptr}"]
        sig = f"void ({pointer_type(dref.addrspace)}, {pointer_type(sref.addrspace)}"
        if s.src_bytes is not None:
            args.append(f"i32 {self.expr(s.src_bytes)}")
            sig += ", i32"
        ref = self.parts.declare(nvptx.cp_async_intrinsic(s.bytes, s.src_bytes is not None),
                                 sig + ")")
        self.w.op(f"call void {ref}({', '.join(args)})")

    def _s_AsyncCommit(self, s: AsyncCommit) -> None:
        self._need_cp_async("cp.async.commit_group")
        ref = self.parts.declare(nvptx.CP_ASYNC_COMMIT_INTRINSIC, "void ()")
        self.w.op(f"call void {ref}()")

    def _s_AsyncWait(self, s: AsyncWait) -> None:
        self._need_cp_async("cp.async.wait_group")
        ref = self.parts.declare(nvptx.CP_ASYNC_WAIT_INTRINSIC, "void (i32)")
        self.w.op(f"call void {ref}(i32 {s.pending})")
