"""wgmma on the simulator: a warpgroup's asynchronous matrix products with the hardware's
rules (see :mod:`ptxforge.ir.intrin.wgmma` for the layouts and the protocol).

:class:`WarpgroupSim` holds one CTA's shared memory as bytes and one warpgroup's
accumulators as per-thread registers (``(128, N / 2)`` f32, in the ISA's layout). Operands
are read through their descriptors exactly as the hardware addresses them, swizzle
included, so a tile stored in the wrong layout gives wrong numbers, not right ones. What
the hardware does not allow raises :class:`WgmmaProtocolError`:

* a wgmma with no ``wgmma.fence`` since the warpgroup last touched its accumulators (or
  before its first wgmma);
* a wgmma reading shared bytes written through the generic proxy (``st.shared``,
  ``cp.async``) with no ``fence.proxy.async.shared::cta`` since the write;
* reading or writing accumulators of a wgmma not yet covered by a ``wgmma.wait_group``,
  writing shared bytes a pending wgmma reads, or a wait that leaves uncommitted wgmmas.

The product is computed when the wgmma is issued; the rules above make that
indistinguishable from any later moment before its wait.

:class:`WgmmaChunk` applies the same rules to te kernels (tensorized ``wgmma`` nests and
the ``WgmmaSync`` statements of ``inject_wgmma_sync``) for every warpgroup of a chunk of
the simulator, on the kernel's own shared buffers and ``warpgroup`` accumulators.
"""

from __future__ import annotations

import numpy as np

from ..ir.dtype import round_to
from ..ir.float8 import float8_from_bits
from ..ir.intrin.wgmma import (
    WARPGROUP,
    MatrixDescriptor,
    WgmmaIntrin,
    accumulator_map,
    descriptor_for,
    operand_addresses,
    wgmma_of,
)
from .errors import SimError, SimMemoryError
from .tensorcore import whole_groups


class WgmmaProtocolError(SimError):
    """A wgmma sequence the hardware would not run correctly (fence, commit, wait rules)."""


class WarpgroupSim:
    """One CTA's shared memory (``nbytes``) and one warpgroup's accumulator registers."""

    def __init__(self, nbytes: int, kernel: str = "kernel"):
        self.smem = np.zeros(nbytes, np.uint8)
        self.kernel = kernel
        self.unfenced = np.zeros(nbytes, bool)  # generic writes not yet proxy-fenced
        self.acc: dict = {}  # name -> (128, n/2) float32
        self.fenced = False  # wgmma.fence since the last register access
        self.open: list = []  # issued, not committed: (acc name, byte addresses read)
        self.groups: list = []  # committed, not waited: lists like open

    # -- generic-proxy side ------------------------------------------------------------
    def store_shared(self, byte_offset, values: np.ndarray) -> None:
        """``st.shared`` (or cp.async) of ``values`` at ``byte_offset`` (int or an array of
        per-element byte offsets)."""
        v = np.ascontiguousarray(values)
        offs = np.asarray(byte_offset, np.int64)
        if offs.ndim == 0:
            offs = offs + np.arange(v.size) * v.itemsize
        offs = offs.reshape(-1)
        raw = v.reshape(-1).view(np.uint8).reshape(-1, v.itemsize)
        idx = offs[:, None] + np.arange(v.itemsize)[None, :]
        if idx.min() < 0 or idx.max() >= self.smem.size:
            raise SimMemoryError(f"illegal shared access: kernel {self.kernel}, bytes "
                                 f"[{idx.min()}, {idx.max()}] outside [0, {self.smem.size})")
        pending = self._pending_reads()
        if pending is not None and pending[idx.reshape(-1)].any():
            raise WgmmaProtocolError(
                f"kernel {self.kernel}: a store writes shared bytes that a wgmma not yet "
                "waited for reads; wgmma.wait_group on its group before reusing the buffer")
        self.smem[idx.reshape(-1)] = raw.reshape(-1)
        self.unfenced[idx.reshape(-1)] = True

    def fence_proxy_async(self) -> None:
        """``fence.proxy.async.shared::cta``: earlier generic writes become visible to wgmma."""
        self.unfenced[:] = False

    # -- accumulators ------------------------------------------------------------------
    def zero_accumulator(self, name: str, n: int) -> None:
        self._touch(name, "zeroes")
        self.acc[name] = np.zeros((WARPGROUP, n // 2), np.float32)

    def accumulator(self, name: str) -> np.ndarray:
        """The registers of accumulator ``name`` (reading them is a register access)."""
        self._touch(name, "reads")
        return self.acc[name].copy()

    def accumulator_tile(self, name: str) -> np.ndarray:
        """The ``[64, N]`` matrix the warpgroup's registers of ``name`` hold."""
        regs = self.accumulator(name)
        rows, cols = accumulator_map(2 * regs.shape[1])
        out = np.empty((64, 2 * regs.shape[1]), np.float32)
        out[rows, cols] = regs
        return out

    def _touch(self, name: str, what: str) -> None:
        busy = {a for a, _ in self.open} | {a for g in self.groups for a, _ in g}
        if name in busy:
            raise WgmmaProtocolError(
                f"kernel {self.kernel}: the warpgroup {what} accumulator {name} while a wgmma "
                "writing it is in flight; wgmma.commit_group and wgmma.wait_group first")
        self.fenced = False

    # -- the async side ----------------------------------------------------------------
    def fence(self) -> None:
        """``wgmma.fence.sync.aligned``."""
        self.fenced = True

    def mma_async(self, spec: WgmmaIntrin, acc: str, desc_a: int, desc_b: int,
                  scale_d: bool = True) -> None:
        """``D = A * B^T (+ D)`` for m64nNk16, A ``[64, 16]`` and B ``[N, 16]`` K-major in
        shared memory through their descriptors."""
        if not self.fenced:
            raise WgmmaProtocolError(
                f"kernel {self.kernel}: {spec.ptx} with no wgmma.fence.sync.aligned since the "
                "warpgroup last accessed its registers (or before the first wgmma)")
        if acc not in self.acc:
            self.acc[acc] = np.zeros((WARPGROUP, spec.regs), np.float32)
        if self.acc[acc].shape[1] != spec.regs:
            raise WgmmaProtocolError(f"kernel {self.kernel}: accumulator {acc} holds "
                                     f"{self.acc[acc].shape[1]} registers, {spec.ptx} needs "
                                     f"{spec.regs}")
        a, ra = self._operand(spec, desc_a, 64, "A")
        b, rb = self._operand(spec, desc_b, spec.n, "B")
        # fp8 products are exact in float64 (4 + 4 significant bits), as 16-bit ones are
        prod = a.astype(np.float64) @ b.astype(np.float64).T
        rows, cols = accumulator_map(spec.n)
        d = prod[rows, cols]
        if scale_d:
            d = d + self.acc[acc]
        self.acc[acc] = d.astype(np.float32)
        self.open.append((acc, np.concatenate([ra, rb])))

    def _operand(self, spec: WgmmaIntrin, desc: int, rows: int, what: str):
        dsc = MatrixDescriptor.decode(desc)
        eb = spec.itemsize
        addr = operand_addresses(dsc, rows, spec.k, eb)
        if addr.min() < 0 or addr.max() + eb > self.smem.size:
            raise SimMemoryError(
                f"illegal shared access: kernel {self.kernel}, {spec.ptx} operand {what} "
                f"through descriptor {dsc} reads bytes up to {int(addr.max()) + 1}, outside "
                f"[0, {self.smem.size})")
        byts = (addr[..., None] + np.arange(eb)).reshape(-1)
        if self.unfenced[byts].any():
            raise WgmmaProtocolError(
                f"kernel {self.kernel}: {spec.ptx} reads operand {what} from shared bytes "
                "written by ordinary stores (or cp.async) with no fence.proxy.async."
                "shared::cta since; fence the async proxy after the writes and the barrier")
        if spec.fp8:
            return float8_from_bits(self.smem[byts].reshape(addr.shape), spec.ab), byts
        bits = self.smem[byts].view(np.uint16).reshape(addr.shape)
        if spec.ab == "float16":
            vals = bits.view(np.float16).astype(np.float32)
        else:
            vals = (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)
        return vals, byts

    def commit_group(self) -> None:
        """``wgmma.commit_group.sync.aligned``."""
        if self.open:
            self.groups.append(self.open)
        else:
            self.groups.append([])
        self.open = []

    def wait_group(self, n: int) -> None:
        """``wgmma.wait_group.sync.aligned n``: at most ``n`` groups stay pending."""
        if self.open:
            raise WgmmaProtocolError(
                f"kernel {self.kernel}: wgmma.wait_group {n} with wgmmas issued but not "
                "committed; wgmma.commit_group first (a wait covers committed groups only)")
        keep = max(0, len(self.groups) - n)
        self.groups = self.groups[keep:] if n else []

    def _pending_reads(self):
        reads = [r for g in self.groups for _, r in g] + [r for _, r in self.open]
        if not reads:
            return None
        mask = np.zeros(self.smem.size, bool)
        mask[np.concatenate(reads)] = True
        return mask


def to_bits(x: np.ndarray, ab: str) -> np.ndarray:
    """Host ``x`` as the 16-bit patterns of ``ab`` (what shared memory holds)."""
    if ab == "float16":
        return np.asarray(x, np.float16).view(np.uint16)
    r = round_to(np.asarray(x, np.float32), "bfloat16")
    return (r.view(np.uint32) >> np.uint32(16)).astype(np.uint16)


# ---------------------------------------------------------------------------------------
# te kernels: the wgmma intrinsics of tensorized nests, for every warpgroup of a chunk


class WgmmaChunk:
    """The wgmma state of one chunk of blocks of a te kernel (the simulator runs its lanes
    in lock step, so the warpgroups of the chunk issue each step together).

    Shared buffers that wgmmas read are *tracked*: every generic-proxy write to them
    (``st.shared``, a cp.async's issue and its landing) is checked against the bytes that
    wgmmas not yet waited for read, and marks its elements unfenced until a
    ``fence.proxy.async``. The accumulators are ``warpgroup`` fragments: per thread, rows
    of registers in the layout of :func:`~ptxforge.ir.intrin.wgmma.accumulator_map`.
    """

    def __init__(self, chunk):
        self.chunk = chunk
        self.fenced = False
        self.open: list = []  # issued, not committed: (accumulator array id, reads)
        self.groups: list = []  # committed, not waited: lists like open
        self.unfenced: dict = {}  # id(shared array) -> bool per element
        self.pending: dict = {}  # id(shared array) -> pending wgmma reads per element
        self.names: dict = {}
        # called with (name, shared array, keys, what) for each operand a wgmma reads: the
        # TMA state refuses elements its copies have in flight (backend_sim/tma.py)
        self.read_hook = None

    def track(self, name: str, array: np.ndarray) -> None:
        self.unfenced[id(array)] = np.zeros(array.size, bool)
        self.pending[id(array)] = np.zeros(array.size, np.int32)
        self.names[id(array)] = name

    # generic-proxy writes --------------------------------------------------------------
    def write(self, array: np.ndarray, keys, mask=None, landed: bool = True) -> None:
        """A generic-proxy write of ``keys`` (flat positions in ``array``) by the lanes in
        ``mask``; ``landed=False``: a cp.async issued (its bytes may land at any time)."""
        aid = id(array)
        if aid not in self.unfenced:
            return
        k = np.asarray(keys, np.int64)
        if mask is not None and k.ndim and k.shape[0] == self.chunk.lanes:
            k = k[np.asarray(mask, bool)]
        k = k.reshape(-1)
        if self.pending[aid][k].any():
            raise WgmmaProtocolError(
                f"kernel {self.chunk.kernel}: a {'cp.async' if not landed else 'store'} "
                f"writes {self.names[aid]} while a wgmma not yet waited for reads those "
                "elements; wgmma.wait_group on its group before the tile is overwritten")
        if landed:
            self.unfenced[aid][k] = True

    def copy_hook(self, array: np.ndarray, keys, landed: bool) -> None:
        self.write(array, keys, None, landed)

    # the protocol ------------------------------------------------------------------------
    def sync(self, op: str, pending: int, mask) -> None:
        self._groups(mask, f"wgmma sync {op}")
        if op == "fence":
            self.fenced = True
        elif op == "fence_proxy_async":
            for m in self.unfenced.values():
                m[:] = False
        elif op == "commit":
            self.groups.append(self.open)
            self.open = []
        else:
            if self.open:
                raise WgmmaProtocolError(
                    f"kernel {self.chunk.kernel}: wgmma.wait_group {pending} with wgmmas "
                    "issued but not committed; wgmma.commit_group first (a wait covers "
                    "committed groups only)")
            keep = len(self.groups) - pending if pending else len(self.groups)
            for g in self.groups[:max(0, keep)]:
                for _, reads in g:
                    for aid, k in reads:
                        np.subtract.at(self.pending[aid], k, 1)
            self.groups = self.groups[max(0, keep):]

    def _busy(self, acc: np.ndarray) -> bool:
        """Whether a wgmma not yet waited for writes ``acc`` or (an RS wgmma's A, recorded
        as ``-id``) reads it."""
        ids = (id(acc), -id(acc))
        return any(a in ids for a, _ in self.open) or any(
            a in ids for g in self.groups for a, _ in g)

    def _written(self, regs: np.ndarray) -> bool:
        """Whether a wgmma not yet waited for writes ``regs`` (its accumulator)."""
        return any(a == id(regs) for a, _ in self.open) or any(
            a == id(regs) for g in self.groups for a, _ in g)

    def _touch(self, acc: np.ndarray, name: str, what: str) -> None:
        if self._busy(acc):
            raise WgmmaProtocolError(
                f"kernel {self.chunk.kernel}: the warpgroup {what} accumulator {name} while a "
                "wgmma writing it is in flight; wgmma.commit_group and wgmma.wait_group "
                "first")
        self.fenced = False

    def touch_registers(self, acc: np.ndarray, name: str, what: str, mask=None) -> None:
        """A register access (``ir/intrin/wgmma_regs.py``) of the accumulator ``acc`` by
        the lanes in ``mask``: not while a wgmma writing it is in flight, and the next
        wgmma needs a ``wgmma.fence`` first."""
        if mask is not None and not np.any(mask):
            return
        self._touch(acc, name, "register " + ("reads" if what == "load" else "writes"))

    def _groups(self, mask, what: str) -> np.ndarray:
        """Indices of the chunk's warpgroups that run ``what``: all 128 threads or none."""
        c = self.chunk
        groups, lane = whole_groups(c, mask, WARPGROUP)
        if groups is None:
            raise WgmmaProtocolError(
                f"kernel {c.kernel}: {what} runs on only some threads of a warpgroup "
                f"({c.where(lane)} is left out); warpgroup instructions need all 128")
        return groups

    def _uniform(self, value, groups: np.ndarray, what: str) -> np.ndarray:
        if np.ndim(value) == 0:
            return np.full(groups.size, int(value), np.int64)
        v = np.asarray(value).reshape(-1, WARPGROUP)[groups].astype(np.int64)
        bad = np.flatnonzero((v != v[:, :1]).any(axis=1))
        if bad.size:
            lane = int(groups[bad[0]]) * WARPGROUP + int(np.argmax(v[bad[0]] != v[bad[0], 0]))
            raise WgmmaProtocolError(
                f"kernel {self.chunk.kernel}: {what} differs between the threads of a "
                f"warpgroup ({self.chunk.where(lane)}); warpgroup instructions take uniform "
                "operands")
        return v[:, 0]

    def _regs(self, frag: np.ndarray, name: str, slot, groups, n: int, what: str):
        """(element rows ``(ng, 1, n)``, lanes ``(ng, 128, 1)``) of the registers at ``slot``."""
        s = self._uniform(slot, groups, f"the register slot of {name} in {what}")
        if (s < 0).any() or (s + n > frag.shape[0]).any():
            raise SimMemoryError(
                f"illegal fragment access: kernel {self.chunk.kernel}, {what} uses "
                f"registers [{int(s.min())}, {int(s.max()) + n}) of {name}, which holds "
                f"{frag.shape[0]} per thread")
        lanes = groups[:, None] * WARPGROUP + np.arange(WARPGROUP)[None, :]
        return s[:, None, None] + np.arange(n)[None, None, :], lanes[:, :, None]

    # the intrinsics ------------------------------------------------------------------------
    def fill(self, mask, spec, frag, name: str, slot) -> None:
        groups = self._groups(mask, spec.name)
        self._touch(frag, name, "zeroes")
        n = spec.shapes["C"][0] * spec.shapes["C"][1] // WARPGROUP
        rows, lanes = self._regs(frag, name, slot, groups, n, spec.name)
        frag[rows, lanes] = 0

    def store(self, mask, spec, mem, base, ld: int, frag, name: str, slot,
              alpha=None) -> None:
        """A 64x8 tile of the accumulator to memory, each thread its 4 elements (times the
        float32 scalar ``alpha``, per thread, in a scaled store)."""
        from ..ir.intrin.layout import ROLES

        groups = self._groups(mask, spec.name)
        self._touch(frag, name, "reads")
        r, cc = ROLES["wg_c"].element_map()
        rows, lanes = self._regs(frag, name, slot, groups, 4, spec.name)
        regs = frag[rows, lanes]
        if alpha is not None:
            a = np.asarray(alpha, np.float32)
            regs = regs.astype(np.float32) * (a if a.ndim == 0 else a.reshape(-1)[lanes])
        out = spec.dtypes["M"]
        values = round_to(regs, out) if out != "float32" else regs
        keys = self._mem_keys(mem, base, groups, (r * ld + cc)[None], spec.name)
        _write(self.chunk, mem, keys, np.asarray(values).astype(mem.array.dtype), lanes)

    def _mem_keys(self, mem, base, groups, rel: np.ndarray, what: str) -> np.ndarray:
        b = self._uniform(base, groups, f"the address of {mem.name} in {what}")
        idx = b[:, None, None] + rel
        if idx.min() < 0 or idx.max() >= mem.size:
            raise SimMemoryError(
                f"illegal memory access: kernel {self.chunk.kernel}, {what}: buffer "
                f"{mem.name} index {int(idx.max())} outside [0, {mem.size})")
        if mem.offset is not None:
            off = np.broadcast_to(np.asarray(mem.offset), (self.chunk.lanes,))
            lanes = groups[:, None] * WARPGROUP + np.arange(WARPGROUP)[None, :]
            idx = idx + off[lanes][:, :, None]
        return idx

    def _require_fence(self, intrin) -> None:
        if not self.fenced:
            raise WgmmaProtocolError(
                f"kernel {self.chunk.kernel}: {intrin.ptx} with no wgmma.fence.sync.aligned "
                "since the warpgroup last accessed its registers (or before the first wgmma)")

    def mma(self, mask, spec, acc, acc_name: str, acc_slot, a, a_base, b, b_base) -> None:
        """``wgmma.mma_async`` for every warpgroup: D (registers) += A x B^T, A and B read
        from shared memory through the 128B-swizzled descriptors of their tiles."""
        groups = self._groups(mask, spec.name)
        if not groups.size:
            return
        intrin = wgmma_of(spec)
        self._require_fence(intrin)
        n = intrin.n
        va, ra = self._operand(intrin, a, a_base, 64, groups, "A")
        vb, rb = self._operand(intrin, b, b_base, n, groups, "B")
        # (ng, 64, n) in float64; an MN-major B arrives as (ng, 16, n), a K-major one (ng, n, 16)
        prod = va @ (vb if intrin.b_kn else vb.transpose(0, 2, 1))
        rows, cols = accumulator_map(n)
        regs, lanes = self._regs(acc, acc_name, acc_slot, groups, n // 2, spec.name)
        d = prod[:, rows, cols] + acc[regs, lanes]
        acc[regs, lanes] = d.astype(np.float32)
        for aid, k in (ra, rb):
            np.add.at(self.pending[aid], k, 1)
        self.open.append((id(acc), (ra, rb)))

    def mma_rs(self, mask, spec, acc, acc_name: str, acc_slot, a, a_name: str, a_slot,
               b, b_base) -> None:
        """``wgmma.mma_async`` with A from registers: D += A x B, A the 64 x 16 16-bit
        fragment (role ``wg_a16``: the f32 accumulator's layout of 16 columns) that each
        thread holds in 8 registers from ``a_slot``, B from shared memory through its
        descriptor. A's registers, like D's, may not be touched until the wait."""
        groups = self._groups(mask, spec.name)
        if not groups.size:
            return
        intrin = wgmma_of(spec)
        self._require_fence(intrin)
        if self._written(a):
            raise WgmmaProtocolError(
                f"kernel {self.chunk.kernel}: {intrin.ptx} reads A from {a_name} while a "
                "wgmma writing those registers is in flight")
        n = intrin.n
        rows16, cols16 = accumulator_map(16)
        regs, lanes = self._regs(a, a_name, a_slot, groups, 8, spec.name)
        va = np.zeros((groups.size, 64, 16), np.float64)
        vals = a[regs, lanes]
        if spec.dtypes["A"] != spec.dtypes["B"]:  # float32 registers taken as 16 bits
            vals = round_to(vals.astype(np.float32), spec.dtypes["B"])
        va[:, rows16, cols16] = vals.astype(np.float64)
        vb, rb = self._operand(intrin, b, b_base, n, groups, "B")
        prod = va @ (vb if intrin.b_kn else vb.transpose(0, 2, 1))
        rows, cols = accumulator_map(n)
        dregs, dlanes = self._regs(acc, acc_name, acc_slot, groups, n // 2, spec.name)
        acc[dregs, dlanes] = (prod[:, rows, cols] + acc[dregs, dlanes]).astype(np.float32)
        aid, k = rb
        np.add.at(self.pending[aid], k, 1)
        # both register operands are the group's until its wait (A read: -id, so other
        # wgmmas may read it too, but no thread may write it)
        self.open.append((id(acc), (rb,)))
        self.open.append((-id(a), ()))

    def _operand(self, intrin: WgmmaIntrin, mem, base, rows: int, groups, what: str):
        """Values ``(ng, rows, k)`` (float64) of an operand tile and its element keys;
        ``(ng, k, rows)`` for the B of an MN-major (``_kn``) intrinsic (fp8 decoded)."""
        c = self.chunk
        arr = mem.array
        if id(arr) not in self.unfenced:
            raise SimError(f"kernel {c.kernel}: wgmma operand {mem.name} is not tracked")
        b = self._uniform(base, groups, f"the tile address of {mem.name} in {intrin.ptx}")
        eb = intrin.itemsize
        start = b * eb  # bytes (2 for 16-bit operands, 1 for fp8); the buffer 1024-aligned
        mn = what == "B" and intrin.b_kn
        if mn:
            # an MN-major k16 slice is 16 K-rows of 128 bytes: it starts on an atom
            bad = np.flatnonzero(start % 1024 != 0)
            if bad.size:
                raise WgmmaProtocolError(
                    f"kernel {c.kernel}: {intrin.ptx} MN-major operand B starts at "
                    f"{mem.name}[{int(b[bad[0]])}] (byte {int(start[bad[0]])}), not on a "
                    "1024-byte swizzle atom (a K step of 8 rows of 128 bytes)")
        bad = np.flatnonzero((start % 1024 >= 128) | (start % 32 != 0))
        if bad.size and not mn:
            raise WgmmaProtocolError(
                f"kernel {c.kernel}: {intrin.ptx} operand {what} starts at "
                f"{mem.name}[{int(b[bad[0]])}] (byte {int(start[bad[0]])}), not a "
                f"k{intrin.k} step (32 bytes) inside the first row of a 1024-byte swizzle atom")
        # the tile through its descriptor (encoded and decoded, as the hardware reads it),
        # once per distinct start (warpgroups of different blocks share theirs)
        starts, which = np.unique(start, return_inverse=True)
        tiles = np.stack([operand_addresses(MatrixDescriptor.decode(
            descriptor_for(intrin, what, int(s)).encode()), rows, intrin.k, eb, mn_major=mn)
            // eb for s in starts])
        k = tiles[which.reshape(-1)]  # (ng, rows, k) element positions ((ng, k, rows) MN-major)
        if k.max() >= mem.size:
            raise SimMemoryError(
                f"illegal shared access: kernel {c.kernel}, {intrin.ptx} operand {what} "
                f"reads {mem.name}[{int(k.max())}], outside [0, {mem.size})")
        if mem.offset is not None:
            off = np.broadcast_to(np.asarray(mem.offset), (c.lanes,))
            k = k + off[groups * WARPGROUP][:, None, None]
        flat = k.reshape(-1)
        if self.read_hook is not None:
            self.read_hook(mem.name, arr, flat, f"{intrin.ptx} operand {what}")
        if self.unfenced[id(arr)][flat].any():
            raise WgmmaProtocolError(
                f"kernel {c.kernel}: {intrin.ptx} reads operand {what} from {mem.name}, "
                "written by ordinary stores (or cp.async) with no fence.proxy.async."
                "shared::cta since; fence the async proxy after the writes and the barrier")
        if mem.race is not None:
            # the wgmma's reads, as reads by the warpgroup's threads (a barrier must
            # separate them from other threads' writes)
            per = k.reshape(groups.size, WARPGROUP, -1)
            full = np.zeros(c.lanes, np.int64)
            m = np.zeros(c.lanes, bool)
            lanes = (groups[:, None] * WARPGROUP + np.arange(WARPGROUP)).reshape(-1)
            m[lanes] = True
            for e in range(per.shape[2]):
                full[lanes] = per[:, :, e].reshape(-1)
                mem.race.read_check(full.copy(), m)
        vals = (float8_from_bits(arr[k], intrin.ab) if intrin.fp8 else arr[k]).astype(np.float64)
        return vals, (id(arr), flat)


def _write(chunk, mem, keys, values, lanes) -> None:
    """Store ``values`` at ``keys`` (both ``(ng, 128, n)``) through the race tracker."""
    if mem.race is None:
        mem.array[keys] = values
        return
    flat_lanes = lanes.reshape(-1)
    for e in range(keys.shape[2]):
        full = np.zeros(chunk.lanes, np.int64)
        full[flat_lanes] = keys[:, :, e].reshape(-1)
        vals = np.zeros(chunk.lanes, mem.array.dtype)
        vals[flat_lanes] = values[:, :, e].reshape(-1)
        mem.race.write(mem.array, full, vals, flat_lanes)
