"""Shared-memory bank conflicts of a kernel's warp-wide accesses, from its device IR.

Shared memory has 32 banks of 4 bytes; a warp's access is served in passes of 128 bytes
(all 32 lanes for accesses of up to 4 bytes, 16 lanes at a time for 8 bytes, 8 for 16),
and within a pass the lanes that reach different 4-byte words of one bank are served one
after the other. The *ways* of an access are the most words one bank serves in a pass (1:
conflict-free; lanes reading or writing the same word share it).

:func:`shared_access_ways` walks a kernel: for each warp of the block it runs the loops
(thread loops bound to the warp's lanes, the others over their values, both arms of an
``If``), evaluates the index of every shared ``Store`` and ``Load`` per lane, and of the
accumulator stores and loads (``store``/``load`` tensor intrinsics) per the fragment's
lane layout, and folds two neighbouring accesses of each lane into one 8-byte access
where the PTX backend and LLVM do (the two values of an innermost unrolled loop of extent
2, or a fragment's element pair, reaching adjacent aligned addresses). The operand reads
of ``ldmatrix``, ``wgmma`` and ``cp.async`` are not counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ....ir import dtype as dt
from ....ir.expr import Bin, Cast, Cmp, Expr, IntImm, Load, Not, Select, Var
from ....ir.intrin import ANNOTATION
from ....ir.intrin.registry import get_intrin
from ....ir.stmt import Alloc, For, If, Let, PrimFunc, Seq, Stmt, Store, walk_exprs

BANKS = 32
WARP = 32


@dataclass(frozen=True)
class SharedAccess:
    """One access site: ``buffer``, ``kind`` (``load``/``store``), ``how`` (``scalar`` or
    the intrinsic's name), ``width`` (bytes a lane moves in one instruction, after the
    folding) and ``ways`` (the worst over its executions and the block's warps)."""

    buffer: str
    kind: str
    how: str
    width: int
    ways: int


def bank_ways(lanes: list) -> int:
    """The ways of one warp-wide access: ``lanes`` ``(byte address, bytes)`` per lane, in
    lane order (inactive lanes left out)."""
    width = max(n for _, n in lanes)
    per_pass = WARP if width <= 4 else 4 * BANKS // width
    ways = 1
    for p in range(0, len(lanes), per_pass):
        words: dict = {}
        for addr, n in lanes[p:p + per_pass]:
            for word in range(addr // 4, (addr + n - 1) // 4 + 1):
                words.setdefault(word % BANKS, set()).add(word)
        ways = max(ways, max(len(v) for v in words.values()))
    return ways


class _Unknown(Exception):
    """An index that depends on data (a loaded value): not an address pattern."""


# evaluated on numpy arrays of the 32 lanes' values (or plain ints)
_BIN = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply,
    "floordiv": np.floor_divide, "floormod": np.mod,
    "div": lambda a, b: np.trunc(np.true_divide(a, b)).astype(np.int64),
    "mod": lambda a, b: a - b * np.trunc(np.true_divide(a, b)).astype(np.int64),
    "min": np.minimum, "max": np.maximum, "and": np.logical_and, "or": np.logical_or,
}
_CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
        "gt": np.greater, "ge": np.greater_equal}


def _eval(e: Expr, env: dict):
    """The value of integer expression ``e`` (an int, or an array over the lanes)."""
    if isinstance(e, IntImm):
        return e.value
    if isinstance(e, Var):
        if e not in env:
            raise _Unknown(e.name)
        v = env[e]
        return _eval(v, env) if isinstance(v, Expr) else v
    if isinstance(e, Bin):
        return _BIN[e.op](_eval(e.a, env), _eval(e.b, env))
    if isinstance(e, Cmp):
        return _CMP[e.op](_eval(e.a, env), _eval(e.b, env))
    if isinstance(e, Not):
        return np.logical_not(_eval(e.a, env))
    if isinstance(e, Select):
        return np.where(_eval(e.cond, env), _eval(e.t, env), _eval(e.f, env))
    if isinstance(e, Cast) and dt.is_int(e.dtype):
        return _eval(e.value, env)
    raise _Unknown(type(e).__name__)


class _Walker:
    def __init__(self, func: PrimFunc, warp: int):
        self.bx = func.attrs.launch.block[0]
        self.threads: list = []  # (var, axis) of the thread loops around the visit
        self.tids = [32 * warp + lane for lane in range(WARP)]
        self.offsets: dict = {}
        self.found: dict = {}  # site -> [buffer, kind, how, width, ways]

    # lanes
    def lane_env(self, env: dict) -> dict:
        """``env`` with the thread loops' variables bound to the warp's lanes."""
        tids = np.array(self.tids, dtype=np.int64)
        e = dict(env)
        for var, axis in self.threads:
            e[var] = tids % self.bx if axis == "threadIdx.x" else tids // self.bx
        return e

    def record(self, site, buffer, kind: str, how: str, lanes: list) -> None:
        ways = bank_ways(lanes)
        width = max(n for _, n in lanes)
        old = self.found.get(site)
        if old is None:
            self.found[site] = [buffer.name, kind, how, width, ways]
        else:
            old[3], old[4] = max(old[3], width), max(old[4], ways)

    def address(self, buffer, index: Expr, env: dict) -> list:
        """The byte address of ``buffer[index]`` in each lane."""
        at = _eval(index, env) * dt.nbytes(buffer.dtype) + self.offsets.get(buffer.name, 0)
        return [int(a) for a in np.broadcast_to(at, (WARP,))]

    # statements
    def accesses(self, s: Store | None, reads: list, env: dict) -> list:
        """``(site, buffer, kind, per-lane addresses)`` of the shared accesses of a store
        (``s``, with its value and index) or of the expressions ``reads`` (a bound value, a
        condition)."""
        out = []
        lanes = self.lane_env(env)
        sites = []
        if s is not None:
            reads = [s.value, *s.indices]
            if s.buffer.scope == "shared":
                sites.append((s, s.buffer, "store", s.indices[0]))
        for root in reads:
            for e in walk_exprs(root):
                if isinstance(e, Load) and e.buffer.scope == "shared":
                    sites.append((e, e.buffer, "load", e.indices[0]))
        for site, buf, kind, index in sites:
            try:
                addrs = self.address(buf, index, lanes)
            except _Unknown:
                continue
            out.append((id(site), buf, kind, addrs))
        return out

    def visit(self, s: Stmt | None, env: dict, sink: list) -> None:
        if s is None:
            return
        if isinstance(s, Seq):
            for x in s.stmts:
                self.visit(x, env, sink)
        elif isinstance(s, Alloc):
            if s.dyn_offset is not None:
                self.offsets[s.buffer.name] = s.dyn_offset
            self.visit(s.body, env, sink)
        elif isinstance(s, Let):
            sink.extend(self.accesses(None, [s.value], env))
            self.visit(s.body, {**env, s.var: s.value}, sink)
        elif isinstance(s, If):
            sink.extend(self.accesses(None, [s.cond], env))
            self.visit(s.then, env, sink)
            self.visit(s.else_, env, sink)
        elif isinstance(s, Store):
            sink.extend(self.accesses(s, [], env))
        elif isinstance(s, For):
            self.visit_for(s, env, sink)

    def visit_for(self, s: For, env: dict, sink: list) -> None:
        if s.annotations and ANNOTATION in s.annotations:
            self.intrinsic(s, env)
            return
        if s.kind == "thread":
            if s.thread.startswith("blockIdx"):
                self.visit(s.body, {**env, s.var: 0}, sink)
            else:
                self.threads.append((s.var, s.thread))
                self.visit(s.body, env, sink)
                self.threads.pop()
            return
        runs = []
        for v in range(s.extent):
            got: list = []
            self.visit(s.body, {**env, s.var: v}, got)
            runs.append(got)
        if s.kind == "unroll" and s.extent == 2 and len(runs[0]) == len(runs[1]):
            for a, b in zip(*runs):
                self.emit_pair(a, b)
        else:
            for got in runs:
                for acc in got:
                    self.emit(acc)

    def emit(self, acc, width: int | None = None) -> None:
        site, buf, kind, addrs = acc
        n = width or dt.nbytes(buf.dtype)
        self.record(site, buf, kind, "scalar", [(a, n) for a in addrs])

    def emit_pair(self, a, b) -> None:
        """Two accesses of each lane that LLVM folds into one of twice the width where
        they are neighbours at an address aligned to the pair."""
        n = dt.nbytes(a[1].dtype)
        if a[0] == b[0] and all(y == x + n and x % (2 * n) == 0 for x, y in zip(a[3], b[3])):
            self.emit(a, 2 * n)
        else:
            self.emit(a)
            self.emit(b)

    def intrinsic(self, s: For, env: dict) -> None:
        intrin = get_intrin(s.annotations[ANNOTATION])
        if intrin.kind not in ("store", "load"):
            return
        role = intrin.role("F")
        inner = s.body
        while isinstance(inner, For):
            inner = inner.body
        iv, jv = s.var, s.body.var
        if intrin.kind == "store":
            buf, index = inner.buffer, inner.indices[0]
        else:
            load = next(e for e in walk_exprs(inner.value) if isinstance(e, Load))
            buf, index = load.buffer, load.indices[0]
        rows, cols = role.element_map()
        lanes = self.lane_env(env)
        n = dt.nbytes(buf.dtype)
        per_lane = rows.shape[1]
        t = np.array(self.tids) % role.threads
        by_elem = [self.address(buf, index, {**lanes, iv: rows[t, e].astype(np.int64),
                                             jv: cols[t, e].astype(np.int64)})
                   for e in range(per_lane)]
        addrs = [[by_elem[e][lane] for e in range(per_lane)] for lane in range(WARP)]
        e = 0
        while e < per_lane:
            pair = e + 1 < per_lane and all(
                a[e + 1] == a[e] + n and a[e] % (2 * n) == 0 for a in addrs)
            w = 2 * n if pair else n
            self.record((id(s), e % 2 if pair else e), buf, intrin.kind, intrin.name,
                        [(a[e], w) for a in addrs])
            e += 2 if pair else 1


def shared_access_ways(func: PrimFunc) -> list:
    """Every shared access site of kernel ``func`` with its ways (the worst over its
    executions and the block's warps), as :class:`SharedAccess` records."""
    warps = func.attrs.launch.threads_per_block // WARP
    found: dict = {}
    for warp in range(warps):
        w = _Walker(func, warp)
        w.visit(func.body, {}, [])
        for site, rec in w.found.items():
            old = found.get(site)
            if old is None:
                found[site] = list(rec)
            else:
                old[3], old[4] = max(old[3], rec[3]), max(old[4], rec[4])
    return [SharedAccess(*rec) for rec in found.values()]
