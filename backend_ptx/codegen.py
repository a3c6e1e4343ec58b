"""Device IR kernel -> LLVM IR text for NVPTX.

One kernel (a ``PrimFunc`` of level ``Level.KERNEL``) becomes one LLVM module:

* on sm_90 and later, ``griddepcontrol.wait`` then ``griddepcontrol.launch_dependents`` as
  the kernel's first instructions, so that the runtime may launch it with programmatic
  dependent launch (``LoadedKernel``): it starts while the kernel before it in its stream
  finishes and waits for that kernel's results before it touches memory;
* an entry function with the ``ptx_kernel`` calling convention and ``nvvm.maxntid`` launch
  bounds from ``launch.block`` (``nvvm.minctasm`` from ``launch.min_blocks_per_sm``); every
  buffer parameter is ``ptr addrspace(1) noalias
  align 16 dereferenceable(bytes)``, plus ``readonly``/``writeonly`` where the body only
  loads or only stores it (read-only buffers then load through the non-coherent cache);
* shared buffers as ``addrspace(3)`` globals, or, where lowering placed them in dynamic
  shared memory (``Alloc.dyn_offset``), as offsets into one ``extern .shared`` array (an
  external ``addrspace(3)`` global ``[0 x i8]``, align 16) of ``launch.dynamic_shared_bytes``;
  local buffers as entry-block ``alloca`` s
  that SROA promotes to registers once indices are constant;
* ``For(kind="thread")`` binds its var to the special register (with a ``range``), guarded
  by ``if var < extent`` when the loop is shorter than the launch extent;
* a ``vectorize`` loop of at most :data:`VECTORIZE_UNROLL` iterations is emitted once per
  iteration, its variable a constant in each, so every access states the alignment proven
  for it (:mod:`.align`: the buffer's alignment and the factors of the index, never an
  assumption), and LLVM joins neighbouring accesses into vector loads and stores;
* other loops stay rolled (do-while form, the var a phi) with unroll metadata:
  ``unroll``/``vectorize`` -> ``llvm.loop.unroll.full``; a serial loop under an
  ``auto_unroll_max_step`` annotation -> full unroll when its iterations times the steps of
  its body fit the budget, else ``llvm.loop.unroll.count`` with the largest fitting divisor;
* float ``mul``/``add``/``sub`` carry the ``contract`` flag so NVPTX fuses them into
  ``fma.rn``; int32/int64 ``add``/``sub``/``mul`` carry ``nsw`` (C semantics: index
  arithmetic never wraps), which lets LLVM fold constant offsets into addresses;
* ``floordiv``/``floormod`` round to minus infinity: a power-of-two divisor is a shift or a
  mask, a positive constant with a provably non-negative dividend an unsigned division, and
  anything else a signed division with the sign correction;
* ``Select`` is a branch-free ``select`` unless a branch loads memory or divides by a
  non-constant (an unchosen branch must not fault), in which case it becomes a diamond of
  blocks and a phi; ``and``/``or`` short-circuit the same way;
* ``min``/``max`` on floats propagate NaN (``llvm.minimum``/``maximum``) as numpy does;
  float -> int casts saturate (``llvm.fptosi.sat``) instead of producing poison;
* transcendentals call the IR helpers of :mod:`.mathlib` (``tanh`` and ``erf`` of a 16-bit
  result the cheaper forms good to its rounding: ``mathlib.half_math_call``); ``sqrt`` is
  ``llvm.sqrt``
  (``sqrt.rn``), ``round`` rounds halfway cases away from zero (CUDA's ``roundf``, as the
  simulator does; ``numpy.round`` would round them to even).
"""

from __future__ import annotations

from dataclasses import replace

from ..ir import dtype as dt
from ..ir.attrs import Level
from ..ir.expr import Bin, Call, Expr, Load, Var
from ..ir.intrin import ANNOTATION
from ..ir.intrin.tma import shared_align
from ..ir.intrin.wgmma import WGMMA_SHARED_ALIGN, require_wgmma, wgmma_operand_buffers
from ..ir.stmt import (
    Alloc,
    AsyncCopy,
    Barrier,
    Buffer,
    For,
    If,
    Let,
    PrimFunc,
    Seq,
    Stmt,
    Store,
    WgmmaSync,
    shared_memory,
    stmt_exprs,
    walk,
    walk_exprs,
)
from ..ir.stmt_tma import TensorMap, TmaLoad
from ..target import Target, as_target
from . import launch as launch_info
from . import nvptx
from . import wgmma as wgmma_ptx
from .align import access_align, known_multiple
from .async_copy import AsyncCopyCodegen
from .exprgen import BufRef, CodegenError, ExprCodegen, llvm_type
from .launch import LaunchInfo, ParamInfo
from .llvm_text import FunctionWriter, ModuleParts, int_literal, pointer_type, sanitize
from .mathlib import HALF_MATH_OPS, half_math_call
from .tma import TENSOR_MAP_PARAM, TmaCodegen

VECTORIZE_UNROLL = 16
"""``vectorize`` loops up to this extent are emitted unrolled, one copy of the body per
iteration (``KernelCodegen._vectorized_loop``); longer ones stay rolled with full-unroll
metadata."""

DYNAMIC_SHARED_SYMBOL = "__ptxforge_dyn_smem"
"""The kernel's dynamic shared memory (``extern __shared__`` in CUDA C)."""


def _check_launch(func: PrimFunc, target: Target) -> None:
    launch = func.launch
    grid, block = launch.grid, launch.block
    n = launch.threads_per_block
    if n > target.max_threads_per_block:
        raise CodegenError(
            f"kernel {func.name}: block {block} has {n} threads; a block holds at most "
            f"{target.max_threads_per_block} on {target.label}"
        )
    for axis, (b, lim) in enumerate(zip(block, target.max_block_dim)):
        if b > lim:
            raise CodegenError(
                f"kernel {func.name}: block dimension {'xyz'[axis]} is {b}, at most {lim}")
    for axis, (g, lim) in enumerate(zip(grid, target.max_grid_dim)):
        if g > lim:
            raise CodegenError(
                f"kernel {func.name}: grid dimension {'xyz'[axis]} is {g}, at most {lim}")


def _loop_steps(s: Stmt) -> int:
    """Statement instances one execution of ``s`` runs (thread loops count once)."""
    if isinstance(s, For):
        inner = _loop_steps(s.body)
        return inner if s.kind == "thread" else s.extent * inner
    if isinstance(s, Seq):
        return sum(_loop_steps(c) for c in s.stmts)
    if isinstance(s, If):
        return _loop_steps(s.then) + (0 if s.else_ is None else _loop_steps(s.else_))
    if isinstance(s, (Let, Alloc)):
        return _loop_steps(s.body)
    return 1


class KernelCodegen(TmaCodegen, AsyncCopyCodegen, ExprCodegen):
    """Emits one kernel. Use :func:`codegen_kernel`."""

    def __init__(self, func: PrimFunc, target: Target | str | None = None,
                 prefetch_l2: tuple[str, ...] = ()):
        if func.level is not Level.KERNEL:
            raise CodegenError(
                f"function {func.name} is not a kernel (it is a {func.level.describe()} "
                "function); lower the module to device IR first"
            )
        self.func = func
        self.target = as_target(target)
        self.grid = func.launch.grid
        self.block = func.launch.block
        _check_launch(func, self.target)
        self.parts = ModuleParts()
        self.w = FunctionWriter()
        self.allocas: list[str] = []
        self.vars: dict[Var, str] = {}
        self.nonneg: set[Var] = set()
        self.bufs: dict[Buffer, BufRef] = {}
        # what the alignment proofs know: each buffer's first-element alignment, the values
        # of let-bound scalars and of the iterations of vectorized loops
        self.base_align: dict[Buffer, int] = {}
        self.known: dict[Var, object] = {}
        self.unroll_budget: int | None = None
        self.symbol = sanitize(func.name).replace(".", "_").replace("$", "_").replace("-", "_")
        self.static_shared = 0
        self.dynamic_shared = 0
        self.prefetch_l2 = tuple(prefetch_l2)
        self.tensor_maps: dict[TensorMap, str] = {}  # tensor map params -> their LLVM value
        self.tma_align: dict[Buffer, int] = {}  # TMA destinations -> their alignment

    # ------------------------------------------------------------------------------------
    # driver

    def run(self) -> tuple[str, LaunchInfo]:
        func = self.func
        loaded, stored = set(), set()
        for s in walk(func.body):
            if isinstance(s, Store):
                stored.add(s.buffer)
            elif isinstance(s, AsyncCopy):
                loaded.add(s.src)
            for root in stmt_exprs(s):
                for x in walk_exprs(root):
                    if isinstance(x, Load):
                        loaded.add(x.buffer)
        params, infos = [], []
        names = self.w.names
        for p in func.params:
            if not isinstance(p, Buffer):
                raise CodegenError(
                    f"kernel {func.name}: parameter {p!r} is not a buffer; kernels take "
                    "flat global buffers only")
            if p.scope != "global":
                raise CodegenError(
                    f"kernel {func.name}: parameter {p.name} has scope {p.scope}; kernel "
                    "parameters are global buffers")
            if isinstance(p, TensorMap):
                # the map by value in the parameter space (the runtime encodes it from the
                # buffer the host passes: backend_ptx/module.py)
                self._require_tma(f"tensor map parameter {p.name}")
                infos.append(ParamInfo(p.name, p.dtype, p.size, True, False))
                name = "%" + names.fresh(p.name)
                params.append(f"{TENSOR_MAP_PARAM} {name}")
                self.tensor_maps[p] = name
                continue
            info = ParamInfo(p.name, p.dtype, p.size, p not in stored, p not in loaded)
            infos.append(info)
            name = "%" + names.fresh(p.name)
            attrs = ["noalias"]
            if info.readonly:
                attrs.append("readonly")
            elif info.writeonly:
                attrs.append("writeonly")
            attrs.append(f"align {nvptx.PARAM_ALIGN}")
            if info.nbytes > 0:
                attrs.append(f"dereferenceable({info.nbytes})")
            params.append(f"ptr addrspace(1) {' '.join(attrs)} {name}")
            self.bufs[p] = BufRef(name, nvptx.SCOPE_ADDRSPACE["global"],
                                  nvptx.STORAGE_TYPES[p.dtype], dt.nbytes(p.dtype))
            self.base_align[p] = nvptx.PARAM_ALIGN
        self._plan_shared(func.body)
        if self.prefetch_l2:
            self._prefetch_to_l2(infos)
        dependent = self.target.has_dependent_launch
        if dependent:
            for asm in (launch_info.GRID_DEPENDENCY_WAIT, launch_info.GRID_DEPENDENTS_LAUNCH):
                self.w.op(f'call void asm sideeffect "{asm}", "~{{memory}}"()')
        self.stmt(func.body)
        self.w.op("ret void")
        self.w.lines[1:1] = self.allocas

        bx, by, bz = self.block
        fattrs = (f'nounwind "{nvptx.MAXNTID_ATTRIBUTE}"="{bx},{by},{bz}" '
                  f'"target-cpu"="{self.target.arch}"')
        min_blocks = func.launch.min_blocks_per_sm
        if min_blocks:
            fattrs += f' "{nvptx.MINCTASM_ATTRIBUTE}"="{int(min_blocks)}"'
        define = (f"define {nvptx.KERNEL_CALLING_CONV} void @{self.symbol}"
                  f"({', '.join(params)}) {fattrs} {{\n{self.w.text()}\n}}")
        out = [f"; kernel {func.name}: grid {self.grid}, block {self.block}",
               f'target datalayout = "{nvptx.DATA_LAYOUT}"',
               f'target triple = "{nvptx.TRIPLE}"', ""]
        if self.parts.globals:
            out += self.parts.globals + [""]
        out.append(define)
        for helper in self.parts.helpers.values():
            out += ["", helper]
        if self.parts.declarations:
            out += [""] + sorted(self.parts.declarations.values())
        if self.parts.metadata:
            out += [""] + self.parts.metadata
        launch = LaunchInfo(func.name, self.symbol, tuple(infos), self.grid, self.block,
                            self.static_shared, self.dynamic_shared, dependent)
        return "\n".join(out) + "\n", launch

    def _prefetch_to_l2(self, infos: list[ParamInfo]) -> None:
        """Before the grid dependency wait: thread 0 of every block asks the L2 cache for its
        share (1 / grid) of each buffer named in ``prefetch_l2`` (``cp.async.bulk.prefetch``,
        16-byte multiples), so that a network's weights stream in while the kernel before
        this one finishes. Name only buffers that nothing writes while the network runs
        (its constant weights); a prefetch brings no data into the kernel, so a wrong name
        costs bandwidth, never a wrong result (L2 is coherent). A parameter the kernel also
        writes is skipped."""
        if not self.target.has_l2_prefetch:
            raise CodegenError(f"kernel {self.func.name}: prefetch_l2 needs "
                               "cp.async.bulk.prefetch (sm_90a and later, PTX ISA 8.0); the "
                               f"target is {self.target.arch}")
        by_name = {i.name: i for i in infos}
        gx, gy, gz = self.grid
        blocks = gx * gy * gz
        w = self.w
        sreg = {k: self.parts.declare(nvptx.SREG_INTRINSICS[k], "i32 ()")
                for k in ("threadIdx.x", "threadIdx.y", "threadIdx.z",
                          "blockIdx.x", "blockIdx.y", "blockIdx.z")}
        reg = {k: w.value(f"call i32 {v}()", "pf." + k.replace(".", "_"))
               for k, v in sreg.items()}
        t = w.value(f"or i32 {reg['threadIdx.x']}, {reg['threadIdx.y']}", "pf.t")
        t = w.value(f"or i32 {t}, {reg['threadIdx.z']}", "pf.t")
        first = w.value(f"icmp eq i32 {t}, 0", "pf.first")
        b = w.value(f"mul i32 {reg['blockIdx.z']}, {gy}", "pf.b")
        b = w.value(f"add i32 {b}, {reg['blockIdx.y']}", "pf.b")
        b = w.value(f"mul i32 {b}, {gx}", "pf.b")
        b = w.value(f"add i32 {b}, {reg['blockIdx.x']}", "pf.b")
        b = w.value(f"zext i32 {b} to i64", "pf.b")
        for name in self.prefetch_l2:
            info = by_name.get(name)
            if info is None:
                raise CodegenError(
                    f"kernel {self.func.name}: prefetch_l2 names {name!r}, which is not one "
                    f"of its parameters ({', '.join(by_name)})")
            if not info.readonly or isinstance(self._param_buffer(name), TensorMap):
                # written here: its bytes come from this kernel, not a prefetch; or read by
                # TMA copies only (no pointer to it here)
                continue
            size = info.nbytes // 16 * 16
            if size == 0:
                continue
            per_block = -(-size // blocks)
            chunk = -(-per_block // 16) * 16
            start = w.value(f"mul i64 {b}, {chunk}", "pf.start")
            left = w.value(f"sub i64 {size}, {start}", "pf.left")
            left = w.value(f"call i64 @llvm.smax.i64(i64 {left}, i64 0)", "pf.left")
            self.parts.declare("llvm.smax.i64", "i64 (i64, i64)")
            n = w.value(f"call i64 @llvm.umin.i64(i64 {left}, i64 {chunk})", "pf.n")
            self.parts.declare("llvm.umin.i64", "i64 (i64, i64)")
            n = w.value(f"trunc i64 {n} to i32", "pf.n")
            n = w.value(f"select i1 {first}, i32 {n}, i32 0", "pf.n")
            ptr = self.bufs[self._param_buffer(name)].ptr
            addr = w.value(f"getelementptr i8, ptr addrspace(1) {ptr}, i64 {start}", "pf.at")
            addr = w.value(f"ptrtoint ptr addrspace(1) {addr} to i64", "pf.at")
            w.op('call void asm sideeffect "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, $1, 0;'
                 '\n\t@p cp.async.bulk.prefetch.L2.global [$0], $1;\n\t}", "l,r"'
                 f"(i64 {addr}, i32 {n})")

    def _param_buffer(self, name: str) -> Buffer:
        return next(p for p in self.func.params if p.name == name)

    def _plan_shared(self, body: Stmt) -> None:
        """Static shared buffers become ``addrspace(3)`` globals; buffers the IR places in
        dynamic shared memory (``Alloc.dyn_offset``) address one ``extern .shared`` array."""
        static, placed = shared_memory(self.func)
        dynamic = self.func.launch.dynamic_shared_bytes
        t = self.target
        if static > t.max_shared_memory_per_block:
            raise CodegenError(
                f"kernel {self.func.name}: static shared buffers need {static} bytes; a block "
                f"may declare at most {t.max_shared_memory_per_block} statically (place them "
                "in dynamic shared memory: the plan_dynamic_shared lowering pass)")
        if placed > dynamic:
            raise CodegenError(
                f"kernel {self.func.name}: shared buffers are placed up to byte {placed} of "
                f"dynamic shared memory, but the kernel launches with {dynamic} bytes")
        if static + dynamic > t.max_shared_memory_per_block_optin:
            raise CodegenError(
                f"kernel {self.func.name}: {static + dynamic} bytes of shared memory per "
                f"block; {t.arch} allows at most {t.max_shared_memory_per_block_optin}")
        self.static_shared = static
        self.dynamic_shared = dynamic
        # tiles wgmma reads start on a 1024-byte boundary (the 128B swizzle's atom)
        self.wgmma_bufs = wgmma_operand_buffers(body)
        if self.wgmma_bufs:
            require_wgmma(self.target)
        # TMA destinations start on their swizzle's period (1024 bytes for 128B)
        for s in walk(body):
            if isinstance(s, TmaLoad):
                self.tma_align[s.dst] = max(self.tma_align.get(s.dst, 16),
                                            shared_align(s.tmap.swizzle))
        if any(isinstance(s, Alloc) and s.dyn_offset is not None for s in walk(body)):
            align = WGMMA_SHARED_ALIGN if self.wgmma_bufs else 16
            align = max([align, *self.tma_align.values()])
            self.parts.globals.append(f"@{DYNAMIC_SHARED_SYMBOL} = external addrspace(3) "
                                      f"global [0 x i8], align {align}")

    # ------------------------------------------------------------------------------------
    # statements

    def stmt(self, s: Stmt) -> None:
        method = getattr(self, "_s_" + type(s).__name__, None)
        if method is None:
            raise CodegenError(
                f"kernel {self.func.name}: {type(s).__name__} statements cannot appear in "
                "device IR (lower the module first)")
        method(s)

    def _s_Seq(self, s: Seq) -> None:
        for c in s.stmts:
            self.stmt(c)

    def _s_Store(self, s: Store) -> None:
        if len(s.indices) != 1:
            raise CodegenError(
                f"kernel {self.func.name}: store to {s.buffer.name} has {len(s.indices)} "
                "indices; device IR buffers are flat")
        value = self.expr(s.value)
        ptr, ref = self._address(s.buffer, s.indices[0])
        if s.buffer.dtype == "bool":
            value = self.w.value(f"zext i1 {value} to i8", "b8")
        self.w.op(f"store {ref.elem} {value}, {pointer_type(ref.addrspace)} {ptr}, "
                  f"align {ref.align}")

    # named barriers: bar.sync id, n / bar.arrive id, n (the .aligned forms: a barrier sits
    # under warp-uniform conditions only, which the kernels that name them keep)
    NAMED_BARRIER_SYNC = "llvm.nvvm.barrier.cta.sync.aligned.count"
    NAMED_BARRIER_ARRIVE = "llvm.nvvm.barrier.cta.arrive.aligned.count"

    def _s_Barrier(self, s: Barrier) -> None:
        if not s.named:
            ref = self.parts.declare(nvptx.BARRIER_INTRINSIC, "void (i32)")
            self.w.op(f"call void {ref}(i32 0)")
            return
        name = self.NAMED_BARRIER_ARRIVE if s.arrive else self.NAMED_BARRIER_SYNC
        ref = self.parts.declare(name, "void (i32, i32)")
        self.w.op(f"call void {ref}(i32 {s.id}, i32 {s.threads})")

    def _s_WgmmaSync(self, s: WgmmaSync) -> None:
        require_wgmma(self.target)
        name = {"fence": wgmma_ptx.FENCE, "commit": wgmma_ptx.COMMIT, "wait": wgmma_ptx.WAIT,
                "fence_proxy_async": wgmma_ptx.FENCE_PROXY_ASYNC}[s.op]
        if s.op == "wait":
            ref = self.parts.declare(name, "void (i64)")
            self.w.op(f"call void {ref}(i64 {s.pending})")
        else:
            ref = self.parts.declare(name, "void ()")
            self.w.op(f"call void {ref}()")

    def _s_Let(self, s: Let) -> None:
        self.vars[s.var] = self.expr(s.value, s.var.name)
        if dt.is_int(s.var.dtype):
            if self._nonneg(s.value):
                self.nonneg.add(s.var)
            self.known[s.var] = s.value
        self.stmt(s.body)
        self.known.pop(s.var, None)

    def _address(self, buf: Buffer, index: Expr) -> tuple[str, BufRef]:
        """The element's pointer, and its buffer's reference with the alignment proven for
        this access (:mod:`.align`)."""
        split = self._vector_lane(index)
        if split is not None and buf in self.bufs:
            # base + k of a vectorized loop: the base's pointer, then k elements further, so
            # that LLVM sees the iterations' accesses as neighbours
            rest, k = split
            ptr, ref = super()._address(buf, rest)
            ptr = self.w.value(f"getelementptr inbounds {ref.elem}, "
                               f"{pointer_type(ref.addrspace)} {ptr}, i32 {k}",
                               buf.name + ".addr")
        else:
            ptr, ref = super()._address(buf, index)
        base = self.base_align.get(buf)
        if base is None:
            return ptr, ref
        align = access_align(base, ref.align, known_multiple(index, self.known))
        return ptr, (ref if align == ref.align else replace(ref, align=align))

    def _s_If(self, s: If) -> None:
        cond = self.expr(s.cond)
        then_l = self.w.label("if.then")
        else_l = self.w.label("if.else") if s.else_ is not None else None
        end_l = self.w.label("if.end")
        self.w.op(f"br i1 {cond}, label %{then_l}, label %{else_l or end_l}")
        self.w.start_block(then_l)
        self.stmt(s.then)
        self.w.op(f"br label %{end_l}")
        if s.else_ is not None:
            self.w.start_block(else_l)
            self.stmt(s.else_)
            self.w.op(f"br label %{end_l}")
        self.w.start_block(end_l)

    def _s_Alloc(self, s: Alloc) -> None:
        b = s.buffer
        elem = nvptx.STORAGE_TYPES[b.dtype]
        n = max(b.size, 1)
        self.base_align[b] = 16  # entry-block allocas
        if b.scope == "shared":
            if s.dyn_offset is not None:
                ptr = (f"getelementptr inbounds (i8, ptr addrspace(3) @{DYNAMIC_SHARED_SYMBOL}, "
                       f"i64 {s.dyn_offset})")
                # the extern array's alignment, lowered to what the offset keeps of it
                sym = max([WGMMA_SHARED_ALIGN if self.wgmma_bufs else 16,
                           *self.tma_align.values()])
                self.base_align[b] = access_align(sym, 1, int(s.dyn_offset))
            else:
                gname = self.parts.global_names.fresh(
                    sanitize(b.name).replace(".", "_").replace("-", "_"))
                align = WGMMA_SHARED_ALIGN if b in self.wgmma_bufs else 16
                align = max(align, self.tma_align.get(b, 16))
                self.parts.globals.append(f"@{gname} = internal addrspace(3) global [{n} x "
                                          f"{elem}] undef, align {align}")
                ptr = "@" + gname
                self.base_align[b] = align
            self.bufs[b] = BufRef(ptr, nvptx.SCOPE_ADDRSPACE["shared"], elem,
                                  dt.nbytes(b.dtype))
        elif b.scope == "warpgroup":
            # a wgmma accumulator: size / 128 registers per thread of the warpgroup
            name = "%" + self.w.names.fresh(b.name)
            self.allocas.append(f"  {name} = alloca [{max(n // 128, 1)} x {elem}], align 16")
            self.bufs[b] = BufRef(name, nvptx.SCOPE_ADDRSPACE["local"], elem,
                                  dt.nbytes(b.dtype))
        elif b.scope == "warp":
            # a fragment: size / 32 elements per lane (see backend_ptx/tensorcore.py)
            name = "%" + self.w.names.fresh(b.name)
            self.allocas.append(f"  {name} = alloca [{max(n // 32, 1)} x {elem}], align 16")
            self.bufs[b] = BufRef(name, nvptx.SCOPE_ADDRSPACE["local"], elem,
                                  dt.nbytes(b.dtype))
        elif b.scope == "local":
            name = "%" + self.w.names.fresh(b.name)
            self.allocas.append(f"  {name} = alloca [{n} x {elem}], align 16")
            self.bufs[b] = BufRef(name, nvptx.SCOPE_ADDRSPACE["local"], elem,
                                  dt.nbytes(b.dtype))
        else:
            raise CodegenError(
                f"kernel {self.func.name}: global buffer {b.name} is allocated inside the "
                "kernel; global temporaries belong to the host function")
        self.stmt(s.body)

    def _s_For(self, s: For) -> None:
        if ANNOTATION in s.annotations:
            from .tensorcore import emit_tensor_intrin

            emit_tensor_intrin(self, s)
            return
        if s.kind == "thread":
            self._thread_loop(s)
            return
        if s.kind == "vthread":
            raise CodegenError(
                f"kernel {self.func.name}: vthread loop {s.var.name} survived lowering; "
                "run vthread injection before codegen")
        if s.extent <= 0:
            return
        self.nonneg.add(s.var)
        outer_budget = self.unroll_budget
        budget = s.annotations.get("auto_unroll_max_step")
        if budget is not None:
            self.unroll_budget = int(budget)
        ty = llvm_type(s.var.dtype)
        if s.extent == 1:
            self.vars[s.var] = int_literal(0, ty)
            self.stmt(s.body)
            self.unroll_budget = outer_budget
            return
        if s.kind == "vectorize" and s.extent <= VECTORIZE_UNROLL:
            self._vectorized_loop(s)
            self.unroll_budget = outer_budget
            return
        props = self._unroll_properties(s)
        pre = self.w.block
        body_l = self.w.label(s.var.name + ".body")
        exit_l = self.w.label(s.var.name + ".exit")
        self.w.op(f"br label %{body_l}")
        self.w.start_block(body_l)
        phi = self.w.placeholder()
        iv = "%" + self.w.names.fresh(s.var.name)
        self.vars[s.var] = iv
        self.stmt(s.body)
        nxt = self.w.value(f"add nuw nsw {ty} {iv}, 1", s.var.name + ".next")
        more = self.w.value(f"icmp ult {ty} {nxt}, {s.extent}", s.var.name + ".more")
        md = ""
        if props:
            nodes = [self.parts.metadata_node(p) for p in props]
            md = ", !llvm.loop " + self.parts.metadata_node("{self}, " + ", ".join(nodes),
                                                            distinct=True)
        latch = self.w.block
        self.w.op(f"br i1 {more}, label %{body_l}, label %{exit_l}{md}")
        self.w.fill(phi, f"  {iv} = phi {ty} [ 0, %{pre} ], [ {nxt}, %{latch} ]")
        self.w.start_block(exit_l)
        self.unroll_budget = outer_budget

    def _e_Call(self, e: Call, hint: str | None) -> str:
        if e.op in HALF_MATH_OPS and e.dtype in ("float16", "bfloat16"):
            # a 16-bit result: the f32 form good to its rounding (mathlib.half_math_call)
            ty = llvm_type(e.dtype)
            x = self.w.value(f"fpext {ty} {self.expr(e.args[0])} to float", "t")
            r = self.w.value(f"call float {half_math_call(self.parts, e.op)}(float {x})", "t")
            return self.w.value(f"fptrunc float {r} to {ty}", hint or e.op)
        return super()._e_Call(e, hint)

    def _vector_lane(self, index: Expr) -> tuple[Expr, int] | None:
        """``(rest, k)`` where ``index`` (through let-bound names) is ``rest + v`` for the
        variable ``v`` of a vectorized loop at iteration ``k``, ``rest`` computes no load or
        call (emitting it again is free of effects) and is provably >= 0 (so that, below
        the accessed ``index``, its pointer is in bounds too), else None."""
        seen = 0
        while isinstance(index, Var) and isinstance(self.known.get(index), Expr) and seen < 8:
            index, seen = self.known[index], seen + 1
        if not (isinstance(index, Bin) and index.op == "add"):
            return None
        for lane, rest in ((index.b, index.a), (index.a, index.b)):
            k = self.known.get(lane) if isinstance(lane, Var) else None
            if isinstance(k, int) and k >= 0 and self._nonneg(rest) and not any(
                    isinstance(x, (Load, Call)) for x in walk_exprs(rest)):
                return rest, k
        return None

    def _vectorized_loop(self, s: For) -> None:
        """A ``vectorize`` loop, emitted once per iteration with its variable a constant,
        so that each access states its own alignment (:meth:`_address`): the first of four
        16-bit stores at a multiple of 4 elements is 8-byte aligned, the second 2-byte, and
        the load/store vectorizer joins them into one ``st.v4.b16``."""
        ty = llvm_type(s.var.dtype)
        for k in range(s.extent):
            self.vars[s.var] = int_literal(k, ty)
            self.known[s.var] = k
            self.stmt(s.body)
        self.known.pop(s.var, None)

    def _unroll_properties(self, s: For) -> list[str]:
        if s.kind in ("unroll", "vectorize"):
            return ['!"llvm.loop.unroll.full"']
        if self.unroll_budget is None or self.unroll_budget < 2:
            return []
        inner = _loop_steps(s.body)
        if s.extent * inner <= self.unroll_budget:
            return ['!"llvm.loop.unroll.full"']
        best = 1
        for d in range(2, s.extent):
            if s.extent % d == 0 and d * inner <= self.unroll_budget:
                best = d
        return [f'!"llvm.loop.unroll.count", i32 {best}'] if best > 1 else []

    def _thread_loop(self, s: For) -> None:
        which, axis = nvptx.thread_tag_axis(s.thread)
        launch = (self.block if which == "block" else self.grid)[axis]
        if s.extent > launch:
            raise CodegenError(
                f"kernel {self.func.name}: loop {s.var.name} bound to {s.thread} has extent "
                f"{s.extent} but the launch has {launch} ({which} = "
                f"{self.block if which == 'block' else self.grid})")
        if s.extent <= 0:
            return
        self.nonneg.add(s.var)
        ty = llvm_type(s.var.dtype)
        if launch == 1:
            self.vars[s.var] = int_literal(0, ty)
        else:
            ref = self.parts.declare(nvptx.SREG_INTRINSICS[s.thread], "i32 ()")
            v = self.w.value(f"call range(i32 0, {launch}) i32 {ref}()", s.var.name)
            if ty != "i32":
                v = self.w.value(f"zext i32 {v} to {ty}", s.var.name)
            self.vars[s.var] = v
        if s.extent < launch:
            cond = self.w.value(f"icmp ult {ty} {self.vars[s.var]}, {s.extent}",
                                s.var.name + ".inside")
            then_l = self.w.label(s.var.name + ".guard")
            end_l = self.w.label(s.var.name + ".end")
            self.w.op(f"br i1 {cond}, label %{then_l}, label %{end_l}")
            self.w.start_block(then_l)
            self.stmt(s.body)
            self.w.op(f"br label %{end_l}")
            self.w.start_block(end_l)
        else:
            self.stmt(s.body)


def codegen_kernel(func: PrimFunc, target: Target | str | None = None,
                   prefetch_l2: tuple[str, ...] = ()) -> tuple[str, LaunchInfo]:
    """LLVM IR text of one device-IR kernel for ``target`` (a :class:`~ptxforge.target.Target`,
    a target string such as ``"cuda -arch=sm_80"`` or an sm name; default: the current
    target), and what launching it needs. ``prefetch_l2``: read-only parameters (by name)
    whose contents no other kernel writes, prefetched into L2 before the kernel waits for
    its grid dependencies (sm_90 and later)."""
    return KernelCodegen(func, target, prefetch_l2).run()
