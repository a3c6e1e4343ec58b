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
"""

from __future__ import annotations

import numpy as np

from ..ir.dtype import round_to
from ..ir.intrin.wgmma import (
    WARPGROUP,
    MatrixDescriptor,
    WgmmaIntrin,
    accumulator_map,
    operand_addresses,
)
from .errors import SimError, SimMemoryError


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
        prod = a.astype(np.float64) @ b.astype(np.float64).T
        rows, cols = accumulator_map(spec.n)
        d = prod[rows, cols]
        if scale_d:
            d = d + self.acc[acc]
        self.acc[acc] = d.astype(np.float32)
        self.open.append((acc, np.concatenate([ra, rb])))

    def _operand(self, spec: WgmmaIntrin, desc: int, rows: int, what: str):
        dsc = MatrixDescriptor.decode(desc)
        addr = operand_addresses(dsc, rows, 16, 2)
        if addr.min() < 0 or addr.max() + 2 > self.smem.size:
            raise SimMemoryError(
                f"illegal shared access: kernel {self.kernel}, {spec.ptx} operand {what} "
                f"through descriptor {dsc} reads bytes up to {int(addr.max()) + 1}, outside "
                f"[0, {self.smem.size})")
        byts = (addr[..., None] + np.arange(2)).reshape(-1)
        if self.unfenced[byts].any():
            raise WgmmaProtocolError(
                f"kernel {self.kernel}: {spec.ptx} reads operand {what} from shared bytes "
                "written by ordinary stores (or cp.async) with no fence.proxy.async."
                "shared::cta since; fence the async proxy after the writes and the barrier")
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
