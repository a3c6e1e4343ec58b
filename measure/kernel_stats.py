"""Static statistics of device-IR kernels: work, memory traffic per scope, launch shape.

The simulator runner's analytical time model and its estimate of how long a simulation
would take both start from these numbers, and the builder computes them while it still
holds the lowered module, so they travel with the build artifact.

Counts are per thread, averaged over the threads of the launch: a statement inside serial
loops counts once per iteration, a thread loop shorter than its launch extent counts for the
fraction of threads that run it, both branches of an ``if`` count (an upper bound). Memory
traffic is modelled per warp: the index of every access is evaluated for the 32 lanes of
the first warp, which gives the 32-byte sectors a global access touches (coalescing) and
the worst bank's load for a shared access (bank conflicts).

A tensorized loop nest (``tensorize``: mma.sync, ldmatrix, wgmma, their fills and stores)
is the work of a whole warp (32 threads) or warpgroup (128), so its counts are divided
among those threads (its index arithmetic is the instruction's: not counted); the
multiply-adds of an ``mma`` nest are tensor-core work
(``mma_flops``), those of a ``wgmma`` nest too (``wgmma_flops``), not CUDA-core flops, and
the shared tiles a wgmma reads through its descriptors are no thread's shared accesses.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir import dtype as dt
from ..ir.expr import Bin, Call, Cast, Cmp, Expr, FloatImm, IntImm, Load, Not, Select, Var
from ..ir.stmt import Alloc, Barrier, For, If, Let, Module, PrimFunc, Seq, Stmt, Store

WARP = 32
SECTOR_BYTES = 32
BANKS = 32


@dataclass(frozen=True)
class KernelStats:
    """Per-kernel numbers for the analytical model (per-thread values are averages)."""

    name: str
    grid: tuple
    block: tuple
    shared_bytes: int  # static shared memory per block
    local_bytes: int  # local (register or stack) arrays per thread
    flops: float  # floating-point operations per thread
    int_ops: float  # integer and logical operations per thread
    global_load_bytes: float  # bytes requested from global memory per thread
    global_store_bytes: float
    global_sector_bytes: float  # bytes moved in 32-byte sectors per thread (coalescing)
    shared_bytes_accessed: float  # shared bytes per thread, times bank-conflict degree
    barriers: float  # barriers each thread passes
    global_footprint: int  # bytes of the global buffers the kernel touches
    sim_ops: float  # expression nodes the simulator evaluates per lane program
    mma_flops: float = 0.0  # mma.sync tensor-core operations per thread
    wgmma_flops: float = 0.0  # wgmma tensor-core operations per thread

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def blocks(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]

    @property
    def total_flops(self) -> float:
        return self.flops * self.threads * self.blocks


def analyze_module(module: Module) -> tuple[KernelStats, ...]:
    """Statistics of every kernel of a device-IR module, in launch order."""
    return tuple(analyze_kernel(k) for k in module.kernels())


def analyze_kernel(func: PrimFunc) -> KernelStats:
    """Statistics of one kernel (a function of level ``Level.KERNEL``)."""
    grid, block = func.launch.grid, func.launch.block
    w = _Walker(block)
    w.stmt(func.body, 1.0)
    footprint = sum(p.size * dt.nbytes(p.dtype) for p in func.params if p in w.touched)
    return KernelStats(
        name=func.name, grid=grid, block=block,
        shared_bytes=w.alloc_bytes.get("shared", 0), local_bytes=w.alloc_bytes.get("local", 0),
        flops=w.flops, int_ops=w.int_ops, global_load_bytes=w.gload, global_store_bytes=w.gstore,
        global_sector_bytes=w.gsector, shared_bytes_accessed=w.shared, barriers=w.barriers,
        global_footprint=int(footprint), sim_ops=w.sim_ops, mma_flops=w.mma_flops,
        wgmma_flops=w.wgmma_flops)


class _Walker:
    def __init__(self, block: tuple):
        self.block = block
        self.lanes = min(WARP, block[0] * block[1] * block[2])
        lane = np.arange(self.lanes, dtype=np.int64)
        bx, by = block[0], block[1]
        self.lane_index = {"threadIdx.x": lane % bx, "threadIdx.y": lane // bx % by,
                           "threadIdx.z": lane // (bx * by)}
        self.thread_vars: dict = {}  # Var -> lane values (thread indices, let-bound indices)
        self.flops = self.int_ops = 0.0
        self.gload = self.gstore = self.gsector = self.shared = 0.0
        self.barriers = 0.0
        self.sim_ops = 0.0
        self.mma_flops = self.wgmma_flops = 0.0
        self.alloc_bytes: dict = {}
        self.touched: set = set()
        self._warp_cache: dict = {}

    # statements -----------------------------------------------------------------------
    def stmt(self, s: Stmt, mult: float) -> None:
        if isinstance(s, Seq):
            for c in s.stmts:
                self.stmt(c, mult)
        elif isinstance(s, For) and _intrin_kind(s) is not None:
            self.tensorized(s, mult)
        elif isinstance(s, For):
            if s.kind == "thread":
                if s.thread.startswith("threadIdx"):
                    launch = self.block["xyz".index(s.thread[-1])]
                    self.thread_vars[s.var] = self.lane_index[s.thread]
                    frac = min(1.0, s.extent / launch) if launch else 1.0
                else:
                    frac = 1.0
                self.stmt(s.body, mult * frac)
            else:
                self.stmt(s.body, mult * s.extent)
        elif isinstance(s, If):
            self.expr(s.cond, mult)
            self.stmt(s.then, mult)
            if s.else_ is not None:
                self.stmt(s.else_, mult)
        elif isinstance(s, Let):
            self.expr(s.value, mult)
            value = _eval(s.value, self.thread_vars, self.lanes)
            if value is not None:  # index arithmetic shared by several accesses
                self.thread_vars[s.var] = value
            self.stmt(s.body, mult)
            self.thread_vars.pop(s.var, None)
        elif isinstance(s, Alloc):
            b = s.buffer
            self.alloc_bytes[b.scope] = self.alloc_bytes.get(b.scope, 0) + b.size * dt.nbytes(
                b.dtype)
            self.stmt(s.body, mult)
        elif isinstance(s, Store):
            for i in s.indices:
                self.expr(i, mult)
            self.expr(s.value, mult)
            self.access(s.buffer, s.indices, mult, store=True)
            self.sim_ops += mult
        elif isinstance(s, Barrier):
            self.barriers += mult
            self.sim_ops += mult

    def tensorized(self, s: For, mult: float) -> None:
        """A tensorized nest: the work of its warp or warpgroup, a share per thread."""
        kind, group = _intrin_kind(s)
        before = (self.flops, self.int_ops, self.gload, self.gstore, self.gsector, self.shared,
                  self.sim_ops)
        self.stmt(s.replace(annotations={}), mult)
        after = (self.flops, self.int_ops, self.gload, self.gstore, self.gsector, self.shared,
                 self.sim_ops)
        share = [b + (a - b) / group for a, b in zip(after, before)]
        (self.flops, self.int_ops, self.gload, self.gstore, self.gsector, self.shared,
         self.sim_ops) = share
        self.int_ops = before[1]  # the nest's indices are the instruction's, not the thread's
        if kind in ("mma", "wgmma"):
            work = self.flops - before[0]
            self.flops = before[0]
            if kind == "wgmma":
                self.wgmma_flops += work
                self.shared = before[5]  # the descriptors read the tiles, no thread does
            else:
                self.mma_flops += work

    # expressions ----------------------------------------------------------------------
    def expr(self, e: Expr, mult: float) -> None:
        stack = [e]
        while stack:
            x = stack.pop()
            self.sim_ops += mult
            if isinstance(x, Load):
                self.access(x.buffer, x.indices, mult, store=False)
                stack.extend(x.indices)
            elif isinstance(x, Bin):
                if dt.is_float(x.dtype):
                    self.flops += mult
                else:
                    self.int_ops += mult
                stack += [x.a, x.b]
            elif isinstance(x, Call):
                self.flops += mult * (2 if x.op == "fma" else 1)
                stack.extend(x.args)
            elif isinstance(x, Cmp):
                self.int_ops += mult
                stack += [x.a, x.b]
            elif isinstance(x, Select):
                self.int_ops += mult
                stack += [x.cond, x.t, x.f]
            elif isinstance(x, (Not, Cast)):
                stack.append(x.a if isinstance(x, Not) else x.value)

    def access(self, buf, indices, mult: float, store: bool) -> None:
        nbytes = dt.nbytes(buf.dtype)
        if buf.scope == "global":
            self.touched.add(buf)
            if store:
                self.gstore += mult * nbytes
            else:
                self.gload += mult * nbytes
            sectors = self._warp_pattern(buf, indices, nbytes)[0]
            self.gsector += mult * sectors * SECTOR_BYTES / self.lanes
        elif buf.scope == "shared":
            degree = self._warp_pattern(buf, indices, nbytes)[1]
            self.shared += mult * nbytes * degree

    def _warp_pattern(self, buf, indices, nbytes: int) -> tuple:
        """(sectors touched, bank-conflict degree) of one access by the first warp."""
        key = (id(buf), tuple(id(i) for i in indices))
        hit = self._warp_cache.get(key)
        if hit is not None:
            return hit
        flat = None
        if len(indices) == 1:
            flat = _eval(indices[0], self.thread_vars, self.lanes)
        if flat is None:  # unknown pattern: assume fully coalesced and conflict-free
            out = (max(1, -(-self.lanes * nbytes // SECTOR_BYTES)), 1)
        else:
            addr = np.broadcast_to(flat, (self.lanes,)) * nbytes
            sectors = len(np.unique(addr // SECTOR_BYTES))
            words = np.unique(addr // 4)
            banks = np.bincount(words % BANKS, minlength=BANKS)
            out = (sectors, max(1, int(banks.max())))
        self._warp_cache[key] = out
        return out


def _intrin_kind(s: For):
    """``(kind, threads running it)`` of a tensorized loop, or None."""
    from ..ir.intrin import ANNOTATION, get_intrin

    name = s.annotations.get(ANNOTATION) if s.annotations else None
    if name is None:
        return None
    it = get_intrin(name)
    return it.kind, (128 if it.warpgroup else WARP)


def _eval(e: Expr, env: dict, lanes: int):
    """The int value of ``e`` per lane (thread vars from ``env``, other vars 0), or None
    where it cannot be evaluated (a load inside an index)."""
    if isinstance(e, IntImm):
        return np.int64(e.value)
    if isinstance(e, FloatImm):
        return None
    if isinstance(e, Var):
        return env.get(e, np.int64(0))
    if isinstance(e, Cast):
        return _eval(e.value, env, lanes)
    if isinstance(e, Bin):
        a = _eval(e.a, env, lanes)
        b = _eval(e.b, env, lanes)
        if a is None or b is None:
            return None
        op = e.op
        if op == "add":
            return a + b
        if op == "sub":
            return a - b
        if op == "mul":
            return a * b
        if op in ("floordiv", "div"):
            return np.floor_divide(a, np.where(b == 0, 1, b))
        if op == "floormod":
            return np.mod(a, np.where(b == 0, 1, b))
        if op == "min":
            return np.minimum(a, b)
        if op == "max":
            return np.maximum(a, b)
        if op == "and":
            return np.logical_and(a, b)
        if op == "or":
            return np.logical_or(a, b)
        return None
    if isinstance(e, Cmp):
        a = _eval(e.a, env, lanes)
        b = _eval(e.b, env, lanes)
        if a is None or b is None:
            return None
        return {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
                "gt": np.greater, "ge": np.greater_equal}[e.op](a, b)
    if isinstance(e, Not):
        a = _eval(e.a, env, lanes)
        return None if a is None else np.logical_not(a)
    if isinstance(e, Select):
        c = _eval(e.cond, env, lanes)
        t = _eval(e.t, env, lanes)
        f = _eval(e.f, env, lanes)
        if c is None or t is None or f is None:
            return None
        return np.where(c, t, f)
    return None
