"""Compile a device-IR kernel into one Python function over numpy arrays.

The function runs every thread of a chunk of blocks at once. Its shape follows the kernel:
serial loops stay Python loops (their vars are ints), thread indices are int32 arrays over
lanes, a lane-dependent ``if`` runs its branches under boolean masks. Values that are the
same for every lane stay Python scalars. Index arithmetic is put in affine form and each
part is computed in the outermost loop where it can be, once, and shared by every access
that needs it. Bounds checks are left out where interval analysis proves them; the rest
cost one reduction over the lanes.
"""

from __future__ import annotations

import sys

import numpy as np

from ..ir import dtype as dt
from ..ir.expr import Bin, Cast, Cmp, Expr, IntImm, Load, Var, as_expr
from ..ir.intrin import ANNOTATION, WARP
from ..ir.intrin.layout import WARPGROUP
from ..ir.intrin.wgmma import WGMMA_SHARED_ALIGN, wgmma_operand_buffers
from ..ir.stmt import (
    Alloc,
    AsyncCommit,
    AsyncCopy,
    AsyncWait,
    Barrier,
    For,
    If,
    Let,
    PrimFunc,
    Seq,
    Stmt,
    Store,
    WgmmaSync,
    walk,
)
from ..ir.stmt_tma import TMA_STMTS
from . import mathfns, runtime, tensorcore
from . import wgmma as wgmma_sim
from .analysis import ARRAY, SCALAR, BufInfo, VarInfo
from .async_copy import AsyncCopies, AsyncCopyEmitter
from .emit import NEST_LIMIT, Block, Scope
from .errors import SimIRError
from .exprgen import ExprEmitter, lookup, np_type, storage_dtype
from .limits import launch_config, shared_bytes
from .shared_bytes import SharedBytesPlan, shares_bytes
from .tma import TmaEmitter, TmaState

TAG_CODE = {"threadIdx.x": "_tx", "threadIdx.y": "_ty", "threadIdx.z": "_tz",
            "blockIdx.x": "_bx", "blockIdx.y": "_by", "blockIdx.z": "_bz"}
RECURSION_LIMIT = 20000

_NAMESPACE = {
    "np": np,
    "_oob": runtime.out_of_bounds,
    "_wrap": mathfns.wrap,
    "_wrap32": mathfns.wrap_int32,
    "_fdiv": mathfns.floordiv_scalar,
    "_fmod": mathfns.floormod_scalar,
    "_tdiv": mathfns.trunc_div,
    "_tmod": mathfns.trunc_mod,
    "_f2i": mathfns.float_to_int,
    "_round": mathfns.round_half_away,
    "_rsqrt": mathfns.rsqrt,
    "_sigmoid": mathfns.sigmoid,
    "_erf": mathfns.erf,
    "_fma": mathfns.fma,
    "_full": mathfns.full,
    "_bf16": mathfns.round_bf16,
    "_fp8f": mathfns.fp8_value,
    "_fp8b": mathfns.fp8_bits,
    "_tf32": mathfns.round_tf32,
    "_f16": mathfns.to_f16,
    "_f32": mathfns.to_f32,
    "_fma_wide": mathfns.fma_wide,
    "_AsyncCopies": AsyncCopies,
    "_tc": tensorcore,
    "_shfl": runtime.shuffle_xor,
    "_WgmmaChunk": wgmma_sim.WgmmaChunk,
    "_TmaState": TmaState,
}


class CompiledKernel:
    """A kernel compiled for the simulator: ``launch(arrays)`` runs it on flat arrays."""

    def __init__(self, func: PrimFunc, grid: tuple, block: tuple, source: str, fn,
                 track_races: bool):
        self.name = func.name
        self.params = func.params
        self.grid = grid
        self.block = block
        self.source = source
        self.shared_bytes = shared_bytes(func)
        self.shares_bytes = shares_bytes(func)
        self.track_races = track_races
        self._fn = fn

    def launch(self, arrays: list) -> None:
        """Run every block; ``arrays[i]`` is the flat array bound to param ``i``."""
        threads = self.block[0] * self.block[1] * self.block[2]
        nblocks = self.grid[0] * self.grid[1] * self.grid[2]
        per_chunk = 1 if self.shares_bytes else max(1, runtime.LANES_PER_CHUNK // threads)
        with np.errstate(all="ignore"):
            for first in range(0, nblocks, per_chunk):
                chunk = runtime.Chunk(self.name, self.grid, self.block, first,
                                      min(per_chunk, nblocks - first), self.track_races)
                self._fn(arrays, chunk)
                chunk.sync.finish()


def compile_kernel(func: PrimFunc, check_races: bool = True) -> CompiledKernel:
    """Generate, compile and wrap the Python function that simulates ``func``."""
    grid, block = launch_config(func)
    gen = _Generator(func, grid, block, check_races)
    limit = sys.getrecursionlimit()
    # the generator recurses over expression trees, a few frames per level
    sys.setrecursionlimit(max(limit, RECURSION_LIMIT))
    try:
        source = gen.generate()
    except RecursionError:
        raise SimIRError(f"kernel {func.name} has expressions too deeply nested for the "
                         "simulator") from None
    finally:
        sys.setrecursionlimit(limit)
    namespace = dict(_NAMESPACE)
    namespace.update(gen.constants)
    try:
        code = compile(source, f"<sim kernel {func.name}>", "exec")
    except (SyntaxError, RecursionError) as e:
        raise SimIRError(
            f"kernel {func.name} is too deeply nested for the simulator ({e})"
        ) from None
    exec(code, namespace)
    return CompiledKernel(func, grid, block, source, namespace["kernel"], gen.races)


class _Generator(TmaEmitter, AsyncCopyEmitter, ExprEmitter):
    """Builds the source of one kernel function."""

    def __init__(self, func: PrimFunc, grid: tuple, block: tuple, check_races: bool):
        super().__init__(func.name)
        self.func = func
        self.extent = dict(zip(("blockIdx.x", "blockIdx.y", "blockIdx.z"), grid))
        self.extent.update(zip(("threadIdx.x", "threadIdx.y", "threadIdx.z"), block))
        self.threads = block[0] * block[1] * block[2]
        self.nblocks = grid[0] * grid[1] * grid[2]
        self.per_block = self.nblocks > 1
        self.per_lane = self.threads * self.nblocks > 1
        self.races = check_races and self.threads > 1
        # a kernel whose shared buffers share bytes runs a block at a time, its dynamic
        # shared memory one byte array (runtime.Chunk.dynamic_shared)
        self.shares_bytes = shares_bytes(func)
        self.bytes_plan = SharedBytesPlan(func) if self.shares_bytes and self.races else None
        self.chunk_blocks = 1 if self.shares_bytes else max(
            1, runtime.LANES_PER_CHUNK // self.threads)
        self.chunk_lanes = self.chunk_blocks * self.threads
        self.tags: set = set()
        self._key_vars: dict = {}
        self._key_memo: dict = {}
        self._nz_memo: dict = {}
        self._flat_memo: dict = {}

    def tag_code(self, tag: str, dtype: str) -> str:
        self.tags.add(tag)
        code = TAG_CODE[tag]
        if dtype != "int32":
            code = f"{code}_{dtype}"
            self.tags.add((tag, dtype))
        return code

    # top level --------------------------------------------------------------------------
    def generate(self) -> str:
        func = self.func
        root_scope = Scope(0, None)
        root = Block(1, None, root_scope, None, None, 0)
        prelude = root.sub()
        prologue = root.sub()
        root_scope.prologue = prologue
        body = prologue.follow()
        for i, p in enumerate(func.params):
            if p.scope != "global":
                raise SimIRError(f"kernel {self.name}: param {p.name} must be a global buffer, "
                                 f"it is {p.scope}")
            code = f"g{i}"
            prelude.line(f"{code} = _bufs[{i}]")
            self.facts.buffers[p] = BufInfo(p.name, code, "global", p.size, p.dtype, False)
        self.allocate(func.body, prelude)
        if self.bytes_plan is not None:
            prelude.line(f"_SB = _C.shared_bytes_tracker({self.bytes_plan.overlaps!r})")
        self.async_setup(func.body, prelude, walk)
        self.tma_setup(func.body, prelude, walk)
        self.wgmma_setup(func.body, prelude)
        if self.has_tma and self.has_wgmma and self.tma_dsts & self.wgmma_bufs:
            prelude.line("_T.on_issue = _W.copy_hook")
            prelude.line("_W.read_hook = _T.wgmma_read")
        self.stmt(func.body, body)
        if self.has_tma:
            body.line("_T.finish()")
        head = ["_L = _C.lanes", "_lane = _C.lane", "_lane64 = _C.lane64", "_sync = _C.sync"]
        for t in sorted(x for x in self.tags if isinstance(x, str)):
            head.append(f"{TAG_CODE[t]} = _C.index[{t!r}]")
        for t in sorted((x for x in self.tags if isinstance(x, tuple)), key=str):
            head.append(f"{TAG_CODE[t[0]]}_{t[1]} = {TAG_CODE[t[0]]}.astype({np_type(t[1])})")
        prelude.items[:0] = head
        lines = ["def kernel(_bufs, _C):"]
        root.render(lines)
        return "\n".join(lines) + "\n"

    def wgmma_setup(self, body: Stmt, prelude: Block) -> None:
        """The chunk's wgmma state, tracking the shared buffers wgmmas read (and cp.async's
        writes to them: issue and landing)."""
        self.wgmma_bufs = wgmma_operand_buffers(body)
        self.has_wgmma = bool(self.wgmma_bufs) or any(
            isinstance(s, Alloc) and s.buffer.scope == "warpgroup" for s in walk(body))
        if not self.has_wgmma:
            return
        prelude.line("_W = _WgmmaChunk(_C)")
        for b in sorted(self.wgmma_bufs, key=lambda x: x.name):
            info = self.facts.buffers[b]
            prelude.line(f"_W.track({b.name!r}, {info.code})")
        for s in walk(body):
            if isinstance(s, Alloc) and s.buffer in self.wgmma_bufs and s.dyn_offset and \
                    s.dyn_offset % WGMMA_SHARED_ALIGN:
                raise SimIRError(
                    f"kernel {self.name}: wgmma reads {s.buffer.name}, placed at byte "
                    f"{s.dyn_offset} of dynamic shared memory, not on a "
                    f"{WGMMA_SHARED_ALIGN}-byte boundary (its swizzle atoms would be off)")
        if any(isinstance(s, AsyncCopy) and s.dst in self.wgmma_bufs for s in walk(body)):
            prelude.line("_A.on_write = _W.copy_hook")

    def allocate(self, body: Stmt, prelude: Block) -> None:
        """Every shared and local buffer is allocated once, when the kernel starts (as the
        GPU's static shared memory and registers are)."""
        for s in walk(body):
            if not isinstance(s, Alloc) or s.buffer in self.facts.buffers:
                continue
            b = s.buffer
            if b.scope == "global":
                raise SimIRError(
                    f"kernel {self.name} allocates global buffer {b.name}; global "
                    "temporaries belong to the host function"
                )
            n = len([x for x in self.facts.buffers.values() if x.scope == b.scope])
            if b.scope == "shared":
                code = f"s{n}"
                info = BufInfo(b.name, code, "shared", b.size, b.dtype, self.per_block)
                store = storage_dtype(b.dtype)
                if s.dyn_offset is not None and self.shares_bytes and \
                        np.dtype(store).itemsize == dt.nbytes(b.dtype):
                    # buffers placed in the same bytes are views of one byte array, so each
                    # sees the other's writes as on the GPU (a buffer held wider than on the
                    # GPU, bfloat16 as float32, keeps its own array)
                    dyn = self.func.launch.dynamic_shared_bytes
                    prelude.line(f"{code} = _C.dynamic_shared({s.dyn_offset}, {b.size}, "
                                 f"{store!r}, {dyn})")
                else:
                    prelude.line(f"{code} = _C.shared({b.size}, {store!r}, "
                                 f"{self.per_block})")
                if self.per_block:
                    kd = self.key_dtype(b.size)
                    info.offset = f"so{n}"
                    prelude.line(f"so{n} = _C.block_offset({b.size}, {kd!r})")
                if self.races:
                    info.race = f"r{n}"
                    prelude.line(f"r{n} = _C.race({b.name!r}, {b.size})")
            elif b.scope == "warpgroup":
                # a wgmma accumulator: each thread of the warpgroup holds size / 128
                if self.extent["threadIdx.x"] != WARPGROUP or b.size % WARPGROUP:
                    raise SimIRError(
                        f"kernel {self.name}: warpgroup fragment {b.name} ({b.size} "
                        f"elements) needs blockDim.x = {WARPGROUP} and a multiple of "
                        f"{WARPGROUP} elements; blockDim.x is {self.extent['threadIdx.x']}")
                code = f"wg{n}"
                info = BufInfo(b.name, code, "warpgroup", b.size // WARPGROUP, b.dtype, True)
                prelude.line(f"{code} = _C.local({b.size // WARPGROUP}, "
                             f"{storage_dtype(b.dtype)!r}, True)")
                # register accesses (ir/intrin/wgmma_regs.py) read and write it as a
                # thread's registers by slot, as a local buffer
                info.flat = f"wgf{n}"
                prelude.line(f"wgf{n} = {code}.reshape(-1)")
            elif b.scope == "warp":
                # a fragment: each lane holds size / 32 elements (shape (size / 32, lanes))
                if self.threads % WARP or b.size % WARP:
                    raise SimIRError(
                        f"kernel {self.name}: fragment {b.name} ({b.size} elements) needs "
                        f"a block of whole warps and a multiple of {WARP} elements; the "
                        f"block has {self.threads} threads")
                code = f"w{n}"
                info = BufInfo(b.name, code, "warp", b.size // WARP, b.dtype, True)
                prelude.line(f"{code} = _C.local({b.size // WARP}, "
                             f"{storage_dtype(b.dtype)!r}, True)")
            else:
                code = f"l{n}"
                info = BufInfo(b.name, code, "local", b.size, b.dtype, self.per_lane)
                prelude.line(f"{code} = _C.local({b.size}, {storage_dtype(b.dtype)!r}, "
                             f"{self.per_lane})")
                if self.per_lane:
                    info.flat = f"lf{n}"
                    prelude.line(f"lf{n} = {code}.reshape(-1)")
            self.facts.buffers[b] = info

    # statements -------------------------------------------------------------------------
    def room(self, B: Block) -> Block:
        """``B``, or an inner function opened in it when Python's block nesting runs out."""
        if B.nest < NEST_LIMIT:
            return B
        fname = self.tmp("_f")
        F = B.compound(f"def {fname}()", function=True)
        B.line(f"{fname}()")
        return F

    def stmt(self, s: Stmt, B: Block) -> None:
        names = None if self.bytes_plan is None else self.bytes_plan.steps.get(id(s))
        if names:
            B.line(f"_SB.check({names!r})")
        self.stmt_code(s, B)
        if names:
            B.line(f"_SB.step({names!r})")

    def stmt_code(self, s: Stmt, B: Block) -> None:
        if isinstance(s, Seq):
            for c in s.stmts:
                self.stmt(c, B)
        elif isinstance(s, Store):
            self.store(s, B)
        elif isinstance(s, For):
            self.loop(s, B)
        elif isinstance(s, If):
            self.branch(s, B)
        elif isinstance(s, Let):
            self.let(s, B)
        elif isinstance(s, Alloc):
            self.stmt(s.body, B)
        elif isinstance(s, Barrier):
            if s.named:
                B.line(f"_sync.named({s.id}, {s.threads}, {s.arrive}, {B.mask})")
            else:
                B.line(f"_sync.barrier({B.mask})")
                # a named barrier orders only its warps: the byte-sharing tracker's
                # intervals end at the block's barriers alone (conservative)
                if self.bytes_plan is not None:
                    B.line("_SB.barrier()")
        elif isinstance(s, WgmmaSync) and s.op == "fence_proxy_async" and \
                not self.has_wgmma:
            # orders generic-proxy accesses before TMA copies: nothing to simulate (the
            # copies land at the waits that observe them)
            if not self.has_tma:
                raise SimIRError(f"kernel {self.name}: {s.text} in a kernel without wgmma "
                                 "or TMA copies")
        elif isinstance(s, TMA_STMTS):
            self.tma_stmt(s, B)
        elif isinstance(s, WgmmaSync):
            if not self.has_wgmma:
                raise SimIRError(f"kernel {self.name}: {s.text} in a kernel without wgmma")
            B.line(f"_W.sync({s.op!r}, {s.pending}, {B.mask})")
        elif isinstance(s, (AsyncCopy, AsyncCommit, AsyncWait)):
            self.async_stmt(s, B)
        else:
            raise SimIRError(
                f"kernel {self.name}: a {type(s).__name__} statement cannot appear in device "
                "IR (lowering removes blocks; launches belong to the host function)"
            )

    def alias(self, var: Var, value: Expr) -> None:
        self._keep.append(value)
        self.facts.bind(var, VarInfo(None, SCALAR, None, 0, alias=value))

    def loop(self, s: For, B: Block) -> None:
        if ANNOTATION in s.annotations:
            from .tensorcore_emit import emit_tensor_intrin

            emit_tensor_intrin(self, s, B)
            return
        if s.kind == "thread":
            self.thread_loop(s, B)
            return
        if s.kind == "vthread":
            raise SimIRError(f"kernel {self.name}: vthread loop {s.var.name} was not "
                             "removed by lowering")
        n = s.extent
        if n <= 0:
            return
        if n == 1:
            self.alias(s.var, IntImm(0, s.var.dtype))
            self.stmt(s.body, B)
            return
        B = self.room(B)
        scope = Scope(B.scope.depth + 1, B.scope)
        v = self.tmp("i")
        P = B.compound(f"for {v} in range({n})", scope=scope)
        scope.prologue = P
        self.facts.bind(s.var, VarInfo(v, SCALAR, (0, n - 1), scope.depth))
        self.stmt(s.body, P.follow())

    def thread_loop(self, s: For, B: Block) -> None:
        ext = self.extent[s.thread]
        n = s.extent
        if n > ext:
            raise SimIRError(
                f"kernel {self.name}: loop {s.var.name} bound to {s.thread} has extent {n}, "
                f"but the launch has only {ext}; the iterations above {ext - 1} would never run"
            )
        if n <= 0:
            return
        if ext == 1:
            self.alias(s.var, IntImm(0, s.var.dtype))
            self.stmt(s.body, B)
            return
        code = self.tag_code(s.thread, s.var.dtype)
        self.facts.bind(s.var, VarInfo(code, ARRAY, (0, n - 1), 0))
        if n == ext:
            self.stmt(s.body, B)
            return
        cond = Cmp("lt", s.var, IntImm(n, s.var.dtype))
        self._keep.append(cond)
        self.stmt(s.body, self.masked(B, cond, False, s.body))

    def needs_nz(self, s: Stmt) -> bool:
        """Whether a masked region stores to memory that is indexed by lane lists."""
        key = id(s)
        if key not in self._nz_memo:
            self._nz_memo[key] = (s, any(isinstance(x, Store) and x.buffer.scope != "local"
                                         for x in walk(s)))
        return self._nz_memo[key][1]

    def masked(self, B: Block, cond: Expr, negate: bool, body: Stmt) -> Block:
        """A block that runs ``body`` for the lanes of ``B``'s mask where ``cond`` holds
        (or fails, with ``negate``), skipped when no lane is left."""
        B = self.room(B)
        f = self.facts
        c = self.mat(self.ex(cond, B), B)
        need_nz = self.needs_nz(body)
        term = f"~{c}" if negate else c
        if B.mask is None and f.pure(cond) and f.depth(cond) < B.scope.depth:
            # the mask and its lane list are as loop-invariant as the condition
            P = B.scope.at_depth(f.depth(cond)).prologue
            key = ("mask", negate, need_nz, f.key(cond))
            hit = lookup(P, key)
            if hit is None:
                m = c
                if negate:
                    m = self.tmp("m")
                    P.line(f"{m} = {term}")
                nz = None
                if need_nz:
                    nz = self.tmp("nz")
                    P.line(f"{nz} = np.flatnonzero({m})")
                hit = P.cse[key] = (m, nz)
            m, nz = hit
        else:
            m = c
            if B.mask is not None or negate:
                m = self.tmp("m")
                B.line(f"{m} = {B.mask} & {term}" if B.mask else f"{m} = {term}")
            nz = None
            if need_nz:
                nz = self.tmp("nz")
                B.line(f"{nz} = np.flatnonzero({m})")
        if nz is not None:
            return B.compound(f"if {nz}.size", mask=m, nz=nz)
        return B.compound(f"if {m}.any()", mask=m, nz=None)

    def branch(self, s: If, B: Block) -> None:
        cond = s.cond
        if isinstance(cond, IntImm):
            chosen = s.then if cond.value else s.else_
            if chosen is not None:
                self.stmt(chosen, B)
            return
        if self.facts.kind(cond) == SCALAR:
            B = self.room(B)
            c = self.ex(cond, B)
            T = B.compound(f"if {c}")
            with self.assuming(cond):
                self.stmt(s.then, T)
            if s.else_ is not None:
                E = B.compound("else")
                with self.assuming(cond, False):
                    self.stmt(s.else_, E)
            return
        T = self.masked(B, cond, False, s.then)
        with self.assuming(cond):
            self.stmt(s.then, T)
        if s.else_ is not None:
            E = self.masked(B, cond, True, s.else_)
            with self.assuming(cond, False):
                self.stmt(s.else_, E)

    def let(self, s: Let, B: Block) -> None:
        f = self.facts
        value = s.value
        if f.pure(value) and f.depth(value) < B.scope.depth:
            self.alias(s.var, value)  # computed once further out, shared by every use
            self.stmt(s.body, B)
            return
        code = self.ex(value, B)
        if code in self.views:
            code = f"{code}.copy()"
        name = self.tmp("v")
        B.line(f"{name} = {code}")
        scope = Scope(B.scope.depth + 1, B.scope)
        P = B.sub(scope=scope)
        scope.prologue = P
        iv = f.interval(value) if not dt.is_float(value.dtype) else None
        f.bind(s.var, VarInfo(name, f.kind(value), iv, scope.depth))
        self.stmt(s.body, P.follow())

    # memory -----------------------------------------------------------------------------
    def flat_index(self, buffer, indices: tuple) -> Expr:
        """The flat element index of ``buffer[indices]``."""
        if len(indices) == 1 and isinstance(indices[0], Expr):
            return indices[0]
        key = id(buffer), tuple(id(i) for i in indices)
        hit = self._flat_memo.get(key)
        if hit is not None:
            return hit[1]
        indices = tuple(as_expr(i) for i in indices)
        if not indices:
            flat: Expr = IntImm(0)
        elif len(indices) == 1:
            flat = indices[0]
        else:
            flat = None
            for i, st in zip(indices, buffer.compact_strides()):
                term = i if st == 1 else Bin("mul", i, IntImm(st, i.dtype))
                flat = term if flat is None else Bin("add", flat, term)
        self._flat_memo[key] = ((buffer, indices), flat)
        return flat

    def key_dtype(self, size: int) -> str:
        """int32 where every element of every copy in a chunk has an int32 position."""
        copies = max(self.chunk_blocks, self.chunk_lanes)
        return "int32" if size * copies < 2**31 else "int64"

    def key_var(self, name: str, code: str, kind: str, hi: int, dtype: str) -> Var:
        v = self._key_vars.get((code, dtype))
        if v is None:
            v = self._key_vars[(code, dtype)] = Var(name, dtype)
            self.facts.bind(v, VarInfo(code, kind, (0, hi), 0))
        return v

    def key_expr(self, b: BufInfo, index: Expr) -> Expr:
        """Where element ``index`` of the executing lane's copy of ``b`` lies in the flat
        array holding all copies (a pure expression, so it is hoisted like any index)."""
        memo = (b.code, id(index))
        hit = self._key_memo.get(memo)
        if hit is not None:
            return hit[1]
        kd = self.key_dtype(b.size)
        idx = index if index.dtype == kd else Cast(kd, index)
        if b.scope == "shared":
            off = self.key_var(b.offset, b.offset, ARRAY, (self.chunk_blocks - 1) * b.size, kd)
            key: Expr = Bin("add", off, idx)
        else:
            lane = self.key_var("lane", "_lane" if kd == "int32" else "_lane64", ARRAY,
                                self.chunk_lanes - 1, kd)
            lanes = self.key_var("lanes", "_L", SCALAR, self.chunk_lanes, kd)
            key = Bin("add", lane, Bin("mul", idx, lanes))
        self._key_memo[memo] = (index, key)
        return key

    def locate(self, b: BufInfo, index: Expr, B: Block, what: str) -> tuple[str, str]:
        """Bounds-check ``index`` (unless proven) and return (code, kind) of the position
        to access: the index itself, or for per-block and per-lane copies addressed by
        lane, the position in the flat array of all copies."""
        f = self.facts
        ik = f.kind(index)
        iv = f.guarded_interval(index)
        code = None
        if iv is None or iv[0] < 0 or iv[1] >= b.size:
            code = self.mat(self.ex(index, B), B)
            self.check(b, index, code, B, what)
        if b.copies and (b.scope == "shared" or ik == ARRAY):
            return self.mat(self.ex(self.key_expr(b, index), B), B), ARRAY
        if code is None:
            code = self.mat(self.ex(index, B), B)
        return code, ik

    def check(self, b: BufInfo, index: Expr, code: str, B: Block, what: str) -> None:
        call = f"_oob(_C, {b.name!r}, {code}, {b.size}, {B.mask}, {what!r})"
        if self.facts.kind(index) == SCALAR:
            B.line(f"if not 0 <= {code} < {b.size}: {call}")
            return
        d = index.dtype
        if d in ("int32", "int64"):
            test = f"{code}.view(np.uint{d[3:]}).max() >= {b.size}"
        elif dt.is_uint(d):
            test = f"{code}.max() >= {b.size}"
        else:
            test = f"({code}.min() < 0 or {code}.max() >= {b.size})"
        B.line(f"if {test}: {call}")

    def scalar_read(self, code: str, dtype: str) -> str:
        if dtype == "bool":
            return f"bool({code})"
        if dt.is_int(dtype):
            return f"int({code})"
        return code

    def not_fragment(self, buf, what: str, index: Expr | None = None,
                     B: Block | None = None) -> None:
        """Reject a plain access of a fragment, except a register access of a warpgroup
        fragment (:mod:`ptxforge.ir.intrin.wgmma_regs`): one slot of every thread's
        registers, checked against the wgmma protocol (not while a wgmma writing them is
        in flight; a later wgmma needs a ``wgmma.fence``)."""
        if buf.scope == "warpgroup" and index is not None:
            if self.facts.kind(index) != SCALAR:
                raise SimIRError(
                    f"kernel {self.name}: register {what} of warpgroup fragment {buf.name} "
                    f"at a slot that differs between threads ({index}); a register access "
                    "names one slot of every thread's registers")
            info = self.facts.buffer(buf)
            B.line(f"_W.touch_registers({info.code}, {buf.name!r}, {what!r}, {B.mask})")
            return
        if buf.scope in ("warp", "warpgroup"):
            raise SimIRError(f"kernel {self.name}: a plain {what} of fragment {buf.name}; "
                             "fragments are accessed only by tensor intrinsics (tensorize "
                             "the loop nest that touches it)")

    def load(self, e: Load, B: Block) -> str:
        index = self.flat_index(e.buffer, e.indices)
        self.not_fragment(e.buffer, "load", index, B)
        b = self.facts.buffer(e.buffer)
        pos, kind = self.locate(b, index, B, "load")
        if b.scope in ("local", "warpgroup") and b.copies:
            if kind == SCALAR:
                code = f"{b.code}[{pos}]"  # one row: this element of every lane
                self.views.add(code)
                return code
            return f"{b.flat}.take({pos}, mode='clip')"
        self.async_check(e.buffer, b.code, pos, B, "reads")
        if b.race:
            B.line(f"{b.race}.read_check({pos}, {B.mask})")
        if kind == ARRAY:
            return f"{b.code}.take({pos}, mode='clip')"
        return self.scalar_read(f"{b.code}[{pos}]", b.dtype)

    def store(self, s: Store, B: Block) -> None:
        index = self.flat_index(s.buffer, s.indices)
        self.not_fragment(s.buffer, "store", index, B)
        b = self.facts.buffer(s.buffer)
        vk = self.facts.kind(s.value)
        vc = self.ex(s.value, B)
        pos, kind = self.locate(b, index, B, "store")
        m, nz = B.mask, B.nz
        if b.scope in ("local", "warpgroup") and b.copies and kind == SCALAR:
            if m is None:
                B.line(f"{b.code}[{pos}] = {vc}")
            else:
                B.line(f"{b.code}[{pos}] = np.where({m}, {vc}, {b.code}[{pos}])")
            return
        target = b.flat if b.scope == "local" and b.copies else b.code
        self.async_check(s.buffer, b.code, pos, B, "stores to")
        if s.buffer in self.wgmma_bufs:
            B.line(f"_W.write({b.code}, {pos}, {B.mask})")
        if b.race:
            B.line(f"{b.race}.write({target}, {pos}, {vc}, {nz})")
            return
        if m is not None and nz is None:
            nz = self.mat(f"np.flatnonzero({m})", B)
        if kind == ARRAY:
            if m is None:
                B.line(f"{target}[{pos}] = {vc}")
            else:
                part = f"{vc}.take({nz})" if vk == ARRAY else vc
                B.line(f"{target}[{pos}.take({nz})] = {part}")
            return
        if vk == ARRAY:
            # every lane stores to one element: one of them wins, as on the GPU
            vc = f"{vc}[-1]" if m is None else f"{vc}[{nz}[-1]]"
        B.line(f"{target}[{pos}] = {vc}")

