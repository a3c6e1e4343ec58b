"""Tensor intrinsics on the simulator, with the PTX ISA's fragment layouts.

A fragment buffer (``warp`` scope) is held per lane, like registers: each lane keeps
``size / 32`` elements, and a tile occupies ``per_lane`` consecutive ones (see
``ir/intrin/layout.py``). The functions here run one intrinsic for every active warp of a
chunk at once, in the hardware's terms: ``ldmatrix`` computes each lane's row address and
delivers to each lane the elements the PTX ISA says; ``mma`` reads its operands from the
lanes' registers through the A, B and C layouts. What the hardware would not run raises:
a warp only partly active or with operands that differ between its lanes (the ``.sync
.aligned`` forms need the whole warp, uniform), an ldmatrix row address that is not 16-byte
aligned, a fragment slot or memory tile outside its buffer.
"""

from __future__ import annotations

import numpy as np

from ..ir.dtype import round_to
from ..ir.intrin import ROLES, WARP
from .errors import SimError, SimMemoryError


class SimTensorCoreError(SimError):
    """A warp-collective intrinsic the hardware would not execute as written."""


_MAPS = {name: role.element_map() for name, role in ROLES.items()}


def whole_groups(chunk, mask, size: int):
    """Indices (in the chunk) of the groups of ``size`` consecutive threads (a warp, a
    warpgroup) that run a collective instruction under ``mask``, and None; or None and
    the first thread left out of a group that runs it only in part."""
    n = chunk.lanes // size
    if mask is None:
        return np.arange(n), None
    m = np.asarray(mask).reshape(n, size)
    some, every = m.any(axis=1), m.all(axis=1)
    split = np.flatnonzero(some != every)
    if split.size:
        return None, int(split[0]) * size + int(np.argmax(~m[split[0]]))
    return np.flatnonzero(some), None


def _warps(chunk, mask, what: str) -> np.ndarray:
    """Indices (in the chunk) of the warps that run the intrinsic; all 32 lanes or none."""
    warps, lane = whole_groups(chunk, mask, WARP)
    if warps is None:
        raise SimTensorCoreError(
            f"kernel {chunk.kernel}: {what} runs on only some lanes of a warp ("
            f"{chunk.where(lane)} is left out); warp-collective intrinsics need the whole "
            "warp: keep them outside conditions and loops that split a warp")
    return warps


def _uniform(chunk, value, warps: np.ndarray, what: str) -> np.ndarray:
    """Per active warp, the value its lanes agree on."""
    if np.ndim(value) == 0:
        return np.full(warps.size, int(value), np.int64)
    v = np.asarray(value).reshape(-1, WARP)[warps].astype(np.int64)
    bad = np.flatnonzero((v != v[:, :1]).any(axis=1))
    if bad.size:
        w = int(warps[bad[0]])
        lane = w * WARP + int(np.argmax(v[bad[0]] != v[bad[0], 0]))
        raise SimTensorCoreError(
            f"kernel {chunk.kernel}: {what} differs between the lanes of a warp ("
            f"{chunk.where(lane)}); a warp-collective intrinsic takes warp-uniform operands")
    return v[:, 0]


def _lanes(warps: np.ndarray) -> np.ndarray:
    return warps[:, None] * WARP + np.arange(WARP)[None, :]


def _regs(chunk, frag, name: str, slot, warps, n: int, what: str):
    """Element indices ``(nw, 1, n)`` of the fragment registers at ``slot``."""
    s = _uniform(chunk, slot, warps, f"the fragment slot of {name} in {what}")
    size = frag.shape[0]
    bad = np.flatnonzero((s < 0) | (s + n > size))
    if bad.size:
        raise SimMemoryError(
            f"illegal fragment access: kernel {chunk.kernel}, {what} uses elements "
            f"[{int(s[bad[0]])}, {int(s[bad[0]]) + n}) of {name}, which holds {size} per lane")
    return s[:, None, None] + np.arange(n)[None, None, :]


class Mem:
    """A memory operand: the flat array, where the executing block's copy starts (shared,
    per lane, or None), its race tracker (or None), its elements per copy and name."""

    def __init__(self, array, offset, race, size: int, name: str, scope: str):
        self.array = array
        self.offset = offset
        self.race = race
        self.size = size
        self.name = name
        self.scope = scope

    def keys(self, chunk, base, warps, rel: np.ndarray, what: str) -> np.ndarray:
        """Flat positions of elements ``base + rel`` (rel: ``(nw, 32, n)``), checked."""
        b = _uniform(chunk, base, warps, f"the address of {self.name} in {what}")
        idx = b[:, None, None] + rel
        bad = (idx < 0) | (idx >= self.size)
        if bad.any():
            w, lane, _ = np.argwhere(bad)[0]
            raise SimMemoryError(
                f"illegal memory access: kernel {chunk.kernel}, buffer {self.name} index "
                f"{int(idx[w, lane].max())} outside [0, {self.size}) "
                f"({chunk.where(int(warps[w]) * WARP + int(lane))}) in {what}")
        if self.offset is not None:
            off = np.broadcast_to(np.asarray(self.offset), (chunk.lanes,))
            idx = idx + off[_lanes(warps)][:, :, None]
        return idx

    def read(self, chunk, keys, warps):
        if self.race is not None:
            full = np.zeros(chunk.lanes, np.int64)
            mask = np.zeros(chunk.lanes, bool)
            lanes = _lanes(warps).reshape(-1)
            mask[lanes] = True
            for e in range(keys.shape[2]):
                full[lanes] = keys[:, :, e].reshape(-1)
                self.race.read_check(full.copy(), mask)
        return self.array[keys]

    def write(self, chunk, keys, values, warps) -> None:
        if self.race is None:
            self.array[keys] = values
            return
        lanes = _lanes(warps).reshape(-1)
        for e in range(keys.shape[2]):
            full = np.zeros(chunk.lanes, np.int64)
            full[lanes] = keys[:, :, e].reshape(-1)
            vals = np.zeros(chunk.lanes, self.array.dtype)
            vals[lanes] = values[:, :, e].reshape(-1)
            self.race.write(self.array, full, vals, lanes)


def _tf32(x: np.ndarray) -> np.ndarray:
    """What the tensor cores read of an fp32 operand: the codegen converts it with
    ``cvt.rna.tf32.f32`` first (round to nearest, ties away), as the CUDA-core path's TF32
    does, so both units give the same products."""
    return round_to(np.asarray(x, np.float32), "tf32")


def _tile(regs: np.ndarray, role: str) -> np.ndarray:
    r, c = _MAPS[role]
    R = ROLES[role]
    out = np.empty((regs.shape[0], R.rows, R.cols), regs.dtype)
    out[:, r, c] = regs
    return out


def mma(chunk, mask, spec, c, c_slot, a, a_slot, b, b_slot) -> None:
    """``C += A x B^T`` on the registers of every active warp."""
    what = spec.name
    warps = _warps(chunk, mask, what)
    if not warps.size:
        return
    lanes = _lanes(warps)[:, :, None]
    roles = {n: spec.roles[n] for n in ("A", "B", "C")}
    vals = {}
    for name, frag, slot in (("A", a, a_slot), ("B", b, b_slot), ("C", c, c_slot)):
        n = ROLES[roles[name]].per_lane
        regs = frag[_regs(chunk, frag, name, slot, warps, n, what), lanes]
        vals[name] = _tile(regs, roles[name]).astype(np.float32)
    A, B, C = vals["A"], vals["B"], vals["C"]
    if ROLES[roles["B"]].kind != "b16t":
        B = B.transpose(0, 2, 1)  # [n, k] -> [k, n]
    if spec.dtypes["A"] == "float32":
        A, B = _tf32(A), _tf32(B)
    D = np.matmul(A.astype(np.float64), B.astype(np.float64)) + C
    r, cc = _MAPS[roles["C"]]
    n = ROLES[roles["C"]].per_lane
    c[_regs(chunk, c, "C", c_slot, warps, n, what), lanes] = D[:, r, cc].astype(c.dtype)


def fill(chunk, mask, spec, c, c_slot) -> None:
    warps = _warps(chunk, mask, spec.name)
    n = ROLES[spec.roles["C"]].per_lane
    c[_regs(chunk, c, "C", c_slot, warps, n, spec.name), _lanes(warps)[:, :, None]] = 0


def ldmatrix(chunk, mask, spec, frag, slots, mem: Mem, base, ld: int) -> None:
    """``ldmatrix.sync.aligned.m8n8.x{num}[.trans].shared.b16`` into the fragment tiles
    at ``slots`` (one per tile the load fills)."""
    what = spec.name
    warps = _warps(chunk, mask, what)
    if not warps.size:
        return
    role = ROLES[spec.roles["F"]]
    nb = len(role.blocks)
    lane = np.arange(WARP)
    # each lane's row address: lane l gives row l % 8 of matrix l // 8
    q = np.minimum(lane // 8, spec.num - 1)
    tile, blk = q // nb, q % nb
    dr, dc = spec.tile_step
    fr = tile * dr + np.array([role.blocks[p][0] for p in blk])
    fc = tile * dc + np.array([role.blocks[p][1] for p in blk])
    # the fragment tile is laid out as the memory tile (a .trans load only hands each
    # lane a column pair instead of a row pair)
    row_off = (fr + lane % 8) * ld + fc
    addr = mem.keys(chunk, base, warps, row_off[None, :, None], what)[:, :, 0]
    rel = addr - (0 if mem.offset is None else np.broadcast_to(
        np.asarray(mem.offset), (chunk.lanes,))[_lanes(warps)])
    # ldmatrix moves rows of 16 bytes: 8 16-bit elements (bfloat16 is held in float32
    # here) or 4 32-bit ones (the tf32 roles)
    wide = role.kind == "tf32"
    itemsize = 4 if wide else 2
    bad = np.argwhere((rel * itemsize) % 16 != 0)
    if bad.size:
        w, ln = bad[0]
        raise SimTensorCoreError(
            f"kernel {chunk.kernel}: {what}: the row address of "
            f"{chunk.where(int(warps[w]) * WARP + int(ln))} is {mem.name}[{int(rel[w, ln])}] "
            f"(byte {int(rel[w, ln]) * itemsize}), not 16-byte aligned; ldmatrix needs every "
            f"row of 16 bytes ({16 // itemsize} elements) 16-byte aligned: pad rows to a "
            f"multiple of {16 // itemsize} elements")
    # each lane's elements: register p (a pair of 16-bit elements, or one 32-bit one)
    # comes from matrix p, row l / 4
    g, t = lane // 4, lane % 4
    per = 1 if wide else 2
    src = np.empty((warps.size, WARP, per * spec.num), np.int64)
    for p in range(spec.num):
        if wide:
            src[:, :, p] = addr[:, 8 * p + g] + t
            continue
        for i in range(2):
            if spec.trans:
                src[:, :, 2 * p + i] = addr[:, 8 * p + 2 * t + i] + g
            else:
                src[:, :, 2 * p + i] = addr[:, 8 * p + g] + 2 * t + i
    values = mem.read(chunk, src, warps)
    lanes = _lanes(warps)[:, :, None]
    per_tile = per * nb
    for k, slot in enumerate(slots):
        idx = _regs(chunk, frag, "F", slot, warps, per_tile, what)
        frag[idx, lanes] = values[:, :, k * per_tile:(k + 1) * per_tile]


def load(chunk, mask, spec, frag, slot, mem: Mem, base, ld: int) -> None:
    """Each lane loads the elements of its fragment layout from memory."""
    warps = _warps(chunk, mask, spec.name)
    if not warps.size:
        return
    role = spec.roles["F"]
    r, c = _MAPS[role]
    keys = mem.keys(chunk, base, warps, (r * ld + c)[None], spec.name)
    values = mem.read(chunk, keys, warps)
    n = ROLES[role].per_lane
    frag[_regs(chunk, frag, "F", slot, warps, n, spec.name), _lanes(warps)[:, :, None]] = values


def store(chunk, mask, spec, mem: Mem, base, ld: int, frag, slot) -> None:
    """Each lane stores the elements of its fragment layout (cast to the memory's type)."""
    warps = _warps(chunk, mask, spec.name)
    if not warps.size:
        return
    role = spec.roles["F"]
    r, c = _MAPS[role]
    n = ROLES[role].per_lane
    regs = frag[_regs(chunk, frag, "F", slot, warps, n, spec.name), _lanes(warps)[:, :, None]]
    keys = mem.keys(chunk, base, warps, (r * ld + c)[None], spec.name)
    out = spec.dtypes["M"]
    values = round_to(regs, out) if out != spec.dtypes["F"] else regs
    mem.write(chunk, keys, np.asarray(values).astype(mem.array.dtype), warps)
