"""wgmma on sm_90a: ``wgmma.mma_async.sync.aligned.m64nNk16.f32.{f16,bf16}`` with both
operands in shared memory, read through 64-bit matrix descriptors, and the accumulator in
the registers of a warpgroup (4 consecutive warps, the first one's index divisible by 4).

What is here is the hardware's contract, shared by the simulator and the code generator:

* the **matrix descriptor** (PTX ISA, "Matrix Descriptor Format"): bits 0-13 the start
  address, 16-29 the leading-dimension byte offset (LBO), 32-45 the stride-dimension byte
  offset (SBO), each in units of 16 bytes; bits 49-51 the matrix base offset (0 here: tiles
  start on a 1024-byte boundary); bits 62-63 the swizzle mode (0 none, 1 128B, 2 64B, 3 32B);
* the **K-major shared layouts** the descriptors describe: with a swizzle of W bytes (32, 64
  or 128), an operand row of W bytes holds W / itemsize consecutive K elements, 8 rows form
  an atom of 8 * W bytes, atoms follow each other along M (or N) every SBO bytes, and the
  16-byte chunk c of row r of an atom is stored at chunk ``c ^ (r % 8)`` (for 32B and 64B
  only the low 1 or 2 bits of ``r`` take part). The XOR acts on the address bits (bits 4-6
  with bits 7-9 for 128B), so tiles start on a 1024-byte boundary and a K step inside an atom
  only moves the start address. Without swizzle, 8x16-byte core matrices are contiguous,
  LBO apart along K and SBO apart along M/N;
* the **accumulator layout** of m64nNk16: warp ``w`` of the warpgroup owns rows
  ``16 w .. 16 w + 15``; lane ``l`` (``g = l / 4``, ``t = l % 4``) holds, for each 8-column
  block ``j``, registers ``4 j .. 4 j + 3`` = ``(g, 8 j + 2 t)``, ``(g, 8 j + 2 t + 1)``,
  ``(g + 8, 8 j + 2 t)``, ``(g + 8, 8 j + 2 t + 1)`` (mma.sync's C layout, repeated along N);
* the **protocol**: ``wgmma.fence`` before the first wgmma and after the warpgroup touched
  the accumulator registers; ``fence.proxy.async.shared::cta`` between generic-proxy writes
  of shared memory (``st.shared`` and ``cp.async`` alike) and a wgmma that reads them;
  ``wgmma.commit_group`` closes the issued wgmmas into a group, ``wgmma.wait_group N`` waits
  until at most N groups are pending; the accumulators and the shared tiles of a pending
  group may not be touched.
* the **MN-major B** (``imm-trans-b`` = 1, 16-bit types only; PTX ISA, "Shared Memory
  Matrix Layout" / "Leading Dimension Byte Offset" / "Stride Dimension Byte Offset" /
  "Canonical Layouts" of the asynchronous warpgroup-level matrix instructions): B is read
  as ``[K, N]``. With the 128B swizzle an atom is 8 K-rows of 128 bytes (64 consecutive N
  elements); the canonical layout is ``Swizzle<3,4,3> o ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO))``
  (T = 8 16-bit elements per 16 bytes): **LBO** is the byte offset between atoms along N
  (64-element panels), **SBO** the byte offset between groups of 8 K-rows — the reverse
  of their roles for K-major operands. The address XOR is the same (bits 4-6 ^= 7-9).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..expr import IRError

WARPGROUP = 128
"""Threads of a warpgroup."""

SWIZZLE_MODES = {"none": 0, "128B": 1, "64B": 2, "32B": 3}
"""Descriptor bits 62-63 of each swizzle mode."""

SWIZZLE_BYTES = {"128B": 128, "64B": 64, "32B": 32}
"""Row width (bytes) of each swizzled layout's atom."""

WGMMA_N = (8, 16, 32, 64, 96, 128, 192, 256)
"""The N of ``m64nNk16`` this registry offers (the ISA allows every multiple of 8 to 256)."""

_F14 = (1 << 14) - 1


class WgmmaError(IRError):
    """A descriptor, layout or target that wgmma does not take."""


def require_wgmma(target) -> None:
    """Raise unless ``target`` (a :class:`~ptxforge.target.Target` or spec) has wgmma."""
    from ...target import as_target

    t = as_target(target)
    if not t.has_wgmma:
        raise WgmmaError(
            f"wgmma needs sm_90a (the arch-specific Hopper target); target {t.arch} has no "
            "wgmma: build for 'cuda -arch=sm_90a', or use the mma.sync schedule "
            "(ops/schedules/gemm/) on this target")


@dataclass(frozen=True)
class MatrixDescriptor:
    """A decoded wgmma shared-memory matrix descriptor (byte quantities)."""

    address: int
    lbo: int
    sbo: int
    swizzle: str
    base_offset: int = 0

    def encode(self) -> int:
        """The 64-bit descriptor (an unsigned int)."""
        for what, v in (("start address", self.address), ("leading byte offset", self.lbo),
                        ("stride byte offset", self.sbo)):
            if v % 16 or not 0 <= v >> 4 <= _F14:
                raise WgmmaError(
                    f"wgmma descriptor: the {what} {v} is not a multiple of 16 in [0, "
                    f"{_F14 << 4}] (the descriptor keeps 14 bits of it in 16-byte units)")
        if self.swizzle not in SWIZZLE_MODES:
            raise WgmmaError(f"wgmma descriptor: unknown swizzle {self.swizzle!r} (one of "
                             f"{', '.join(SWIZZLE_MODES)})")
        if not 0 <= self.base_offset < 8:
            raise WgmmaError(f"wgmma descriptor: base offset {self.base_offset} not in [0, 8)")
        return ((self.address >> 4) | (self.lbo >> 4) << 16 | (self.sbo >> 4) << 32
                | self.base_offset << 49 | SWIZZLE_MODES[self.swizzle] << 62)

    @staticmethod
    def decode(desc: int) -> MatrixDescriptor:
        d = int(desc) & ((1 << 64) - 1)
        mode = {v: k for k, v in SWIZZLE_MODES.items()}[d >> 62]
        return MatrixDescriptor((d & _F14) << 4, ((d >> 16) & _F14) << 4,
                                ((d >> 32) & _F14) << 4, mode, (d >> 49) & 7)


def swizzle_address(addr, swizzle: str):
    """The shared byte address the hardware touches for the unswizzled ``addr``: bits 4..
    XOR bits 7.. (3 bits for 128B, 2 for 64B, 1 for 32B)."""
    addr = np.asarray(addr, np.int64)
    if swizzle == "none":
        return addr
    bits = {"128B": 7, "64B": 3, "32B": 1}[swizzle]
    return addr ^ (((addr >> 7) & bits) << 4)


def operand_addresses(desc: MatrixDescriptor, rows: int, k: int, itemsize: int,
                      mn_major: bool = False) -> np.ndarray:
    """``(rows, k)`` shared byte addresses of a K-major operand (A: 64 x 16, B: N x 16) as
    the hardware reads it through ``desc``; with ``mn_major`` (B with ``imm-trans-b`` = 1)
    the ``(k, rows)`` addresses of B read as ``[K, N]`` (``rows`` = N)."""
    if desc.base_offset:
        raise WgmmaError("wgmma descriptor: a nonzero matrix base offset is not modelled; "
                         "start swizzled tiles on a 1024-byte boundary")
    if mn_major:
        return _mn_major_addresses(desc, k, rows, itemsize)
    r = np.arange(rows)[:, None]
    kb = np.arange(k)[None, :] * itemsize
    if desc.swizzle == "none":
        # core matrices of 8 rows x 16 bytes: LBO apart along K, SBO apart along M/N
        plain = (desc.address + (r // 8) * desc.sbo + (kb // 16) * desc.lbo
                 + (r % 8) * 16 + kb % 16)
        return plain
    w = SWIZZLE_BYTES[desc.swizzle]
    if k * itemsize > w:
        raise WgmmaError(f"wgmma: a K slice of {k * itemsize} bytes exceeds the {w}-byte "
                         f"rows of the {desc.swizzle} swizzle")
    plain = desc.address + (r // 8) * desc.sbo + (r % 8) * w + kb
    return swizzle_address(plain, desc.swizzle)


def _mn_major_addresses(desc: MatrixDescriptor, k: int, n: int, itemsize: int) -> np.ndarray:
    """``(k, n)`` byte addresses of an MN-major operand through a swizzled ``desc``: the PTX
    ISA's canonical ``((T,W/16,m),(8,k)):((1,T,LBO),(W/16*T,SBO))`` in bytes: element n of
    K-row kk is at ``(n // per_row) * LBO + (kk // 8) * SBO + (kk % 8) * W + (n % per_row) *
    itemsize`` (W the swizzle's row bytes), then the address XOR of the swizzle."""
    if desc.swizzle == "none":
        raise WgmmaError("wgmma: the MN-major (transposed) operand is modelled with a "
                         "swizzled layout only (128B, 64B or 32B), not the interleaved one")
    w = SWIZZLE_BYTES[desc.swizzle]
    per_row = w // itemsize
    if n > per_row and desc.lbo < 8 * w:
        raise WgmmaError(f"wgmma MN-major descriptor: N = {n} spans several {per_row}-element "
                         f"atoms but the leading byte offset {desc.lbo} (between them) is "
                         f"smaller than an atom ({8 * w} bytes)")
    kk = np.arange(k)[:, None]
    nn = np.arange(n)[None, :]
    plain = (desc.address + (nn // per_row) * desc.lbo + (kk // 8) * desc.sbo
             + (kk % 8) * w + (nn % per_row) * itemsize)
    return swizzle_address(plain, desc.swizzle)


def tile_offsets_mn(k: int, n: int, itemsize: int, swizzle: str = "128B") -> np.ndarray:
    """``(k, n)`` byte offsets, from a 1024-byte aligned tile start, of a ``[k, n]`` tile
    stored MN-major (a B operand read as ``[K, N]``) in the canonical layout of
    ``swizzle``: ``n / (W / itemsize)`` panels of ``k`` rows of W bytes one after the other,
    each panel ``k / 8`` atoms of 8 rows (what :func:`descriptors_for_tile_mn` reads)."""
    if swizzle == "none":
        raise WgmmaError("wgmma: MN-major tiles are laid out swizzled (128B, 64B or 32B)")
    w = SWIZZLE_BYTES[swizzle]
    per_row = w // itemsize
    if k % 8 or n % per_row:
        raise WgmmaError(f"wgmma: an MN-major tile needs K rows in multiples of 8 and N in "
                         f"multiples of {per_row} (got {k} x {n})")
    kk = np.arange(k)[:, None]
    nn = np.arange(n)[None, :]
    plain = (nn // per_row) * (k * w) + kk * w + (nn % per_row) * itemsize
    return swizzle_address(plain, swizzle)


def descriptors_for_tile_mn(base: int, k: int, n: int, itemsize: int, swizzle: str = "128B",
                            k_step: int = 16) -> list:
    """The descriptors of each ``k_step`` slice of an MN-major tile stored by
    :func:`tile_offsets_mn` at shared byte ``base`` (1024-byte aligned): start at K-row
    ``k0`` (whole atoms: ``k0 * W`` bytes), LBO the panel stride ``k * W`` (between
    64-element N atoms), SBO ``8 * W`` (between groups of 8 K-rows)."""
    if base % 1024:
        raise WgmmaError(f"wgmma: a {swizzle}-swizzled tile must start on a 1024-byte "
                         f"boundary, not at byte {base}")
    if k_step % 8:
        raise WgmmaError(f"wgmma: an MN-major K slice of {k_step} rows is not whole atoms")
    w = SWIZZLE_BYTES[swizzle]
    return [MatrixDescriptor(base + k0 * w, k * w, 8 * w, swizzle) for k0 in range(0, k, k_step)]


def tile_offsets(rows: int, k: int, itemsize: int, swizzle: str) -> np.ndarray:
    """``(rows, k)`` byte offsets, from a 1024-byte aligned tile start, at which a K-major
    ``rows x k`` tile is stored in the canonical layout of ``swizzle`` (atoms of 8 rows x W
    bytes, M/N-major between atoms, then K): what a schedule's shared stores must write
    for :func:`descriptors_for_tile`'s descriptors to read the tile back."""
    r = np.arange(rows)[:, None]
    kb = np.arange(k)[None, :] * itemsize
    if swizzle == "none":
        # core matrices: along M/N every 128 bytes, then along K every rows*16 bytes
        return (kb // 16) * (rows * 16) + (r // 8) * 128 + (r % 8) * 16 + kb % 16
    w = SWIZZLE_BYTES[swizzle]
    if rows % 8:
        raise WgmmaError(f"wgmma: tile rows {rows} not a multiple of 8")
    plain = (kb // w) * (rows * w) + (r // 8) * (8 * w) + (r % 8) * w + kb % w
    return swizzle_address(plain, swizzle)


def descriptors_for_tile(base: int, rows: int, k: int, itemsize: int, swizzle: str,
                         k_step: int = 16) -> list:
    """The descriptors of each ``k_step`` slice of a tile stored by :func:`tile_offsets`
    at shared byte ``base`` (1024-byte aligned for swizzled layouts)."""
    if swizzle != "none" and base % 1024:
        raise WgmmaError(f"wgmma: a {swizzle}-swizzled tile must start on a 1024-byte "
                         f"boundary, not at byte {base}")
    out = []
    for k0 in range(0, k, k_step):
        kb = k0 * itemsize
        if swizzle == "none":
            d = MatrixDescriptor(base + (kb // 16) * rows * 16, rows * 16, 128, "none")
        else:
            w = SWIZZLE_BYTES[swizzle]
            d = MatrixDescriptor(base + (kb // w) * rows * w + kb % w, 16, 8 * w, swizzle)
        out.append(d)
    return out


def accumulator_map(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, cols)``, each ``(128, n / 2)``: the accumulator element that thread ``t`` of
    the warpgroup holds in its register ``i`` for m64nNk16 with an f32 accumulator."""
    tid = np.arange(WARPGROUP)[:, None]
    i = np.arange(n // 2)[None, :]
    w, lane = tid // 32, tid % 32
    g, t = lane // 4, lane % 4
    rows = 16 * w + g + 8 * ((i // 2) % 2)
    cols = 8 * (i // 4) + 2 * t + i % 2
    return np.broadcast_to(rows, (WARPGROUP, n // 2)), np.broadcast_to(cols, (WARPGROUP, n // 2))


@dataclass(frozen=True)
class WgmmaIntrin:
    """``wgmma.mma_async.sync.aligned.m64n{n}k{k}.f32.{ab}.{ab}``, A and B from shared
    memory through descriptors, D ``[64, n]`` f32 in the warpgroup's registers. A is
    K-major; B is K-major (``[N, K]``, ``imm-trans-b`` 0) or, with ``b_kn``, MN-major
    (``[K, N]``, ``imm-trans-b`` 1, name suffix ``_kn``; 16-bit inputs only). ``k`` is 16
    for fp16/bf16 and 32 for the fp8 formats (e4m3, e5m2): 32 bytes of K either way, so
    the descriptors and layouts are the same in bytes."""

    n: int
    ab: str
    b_kn: bool = False

    def __post_init__(self):
        _short(self.ab)  # a clear error for other inputs
        if self.b_kn and self.fp8:
            raise WgmmaError("wgmma reads fp8 operands K-major only (the ISA has no "
                             "imm-trans-b for 8-bit types): keep B as [N, K]")

    @property
    def name(self) -> str:
        from .keys import IntrinKey, intrin_name

        return intrin_name(IntrinKey("wgmma", ab=self.ab, acc="float32", n=self.n,
                                     b_kn=self.b_kn))

    @property
    def fp8(self) -> bool:
        """Whether the inputs are 8-bit floats (no transpose immediates in the PTX)."""
        return self.ab.startswith("float8")

    @property
    def k(self) -> int:
        from .keys import wgmma_k

        return wgmma_k(self.ab)

    @property
    def itemsize(self) -> int:
        """Bytes of one input element."""
        return 1 if self.fp8 else 2

    @property
    def tnsp_b(self) -> int:
        """The ``imm-trans-b`` immediate: 1 for B read MN-major (``[K, N]``)."""
        return int(self.b_kn)

    @property
    def ptx(self) -> str:
        s = _short(self.ab)
        return f"wgmma.mma_async.sync.aligned.m64n{self.n}k{self.k}.f32.{s}.{s}"

    @property
    def regs(self) -> int:
        """f32 accumulator registers per thread."""
        return self.n // 2


WGMMA_INPUTS = {"float16": "f16", "bfloat16": "bf16", "float8_e4m3fn": "e4m3",
                "float8_e5m2": "e5m2"}
"""The input types of the wgmma intrinsics here, with their PTX names."""


def _short(ab: str) -> str:
    try:
        return WGMMA_INPUTS[ab]
    except KeyError:
        raise WgmmaError(f"wgmma here takes {', '.join(WGMMA_INPUTS)} inputs, not {ab}"
                         ) from None


WGMMA_INTRINS = {it.name: it for it in (
    [WgmmaIntrin(n, ab, kn) for ab in ("float16", "bfloat16") for n in WGMMA_N
     for kn in (False, True)]
    + [WgmmaIntrin(n, ab) for ab in ("float8_e4m3fn", "float8_e5m2") for n in WGMMA_N])}
"""The registered wgmma intrinsics by name (``wgmma_m64n128k16_f16_f32``,
``wgmma_m64n64k16_bf16_f32_kn``, ``wgmma_m64n256k32_e4m3_f32``, ...)."""


def is_wgmma_loop(s) -> bool:
    """Whether statement ``s`` is a loop tensorized as a wgmma (its nest runs as one)."""
    from ..stmt import For
    from . import ANNOTATION
    from .registry import get_intrin

    if not isinstance(s, For) or ANNOTATION not in s.annotations:
        return False
    if get_intrin(s.annotations[ANNOTATION]).kind != "wgmma":
        return False
    return _bound(s).intrin.kind == "wgmma"  # not the zeroing nest of its reduction


def _bound(s):
    from . import ANNOTATION
    from .match import match_nest

    return match_nest(s, s.annotations[ANNOTATION], s.var.name, device=True)


def wgmma_operand_buffers(body) -> set:
    """The shared buffers the wgmma nests of ``body`` read (their A and B operands)."""
    from ..stmt import walk

    out = set()
    for s in walk(body):
        if is_wgmma_loop(s):
            bound = _bound(s)
            # not an A in registers (role wg_a16): a fragment, not a shared tile
            out.update(bound.operands[n].buffer for n in ("A", "B")
                       if bound.intrin.role(n) is None)
    return out


WGMMA_SHARED_ALIGN = 1024
"""Shared buffers wgmma reads start on a 1024-byte boundary (the 128B swizzle's atom: the
hardware XORs address bits 4-6 with bits 7-9)."""


def get_wgmma(n: int, ab: str = "float16", b_kn: bool = False) -> WgmmaIntrin:
    """The wgmma intrinsic of ``m64n{n}k16`` (``k32`` for fp8) on ``ab`` inputs (B MN-major
    with ``b_kn``), or a clear error."""
    if n not in WGMMA_N:
        raise WgmmaError(f"wgmma m64n{n}: N must be one of {WGMMA_N}")
    return WGMMA_INTRINS[WgmmaIntrin(n, ab, bool(b_kn)).name]


B_KN_LBO = 64 * 128
"""The leading byte offset of an MN-major B in the te schedules: the stride between the
64-element N panels of a tile of 64 K-rows of 128 bytes (``layout_panels(64)`` of a
``[64, N]`` shared tile; read by the wgmmas of N 128 and 256, unused at N 64). The nest
matcher holds a paneled B's panel stride to it."""

K_MAJOR_LBO = 16
"""The leading byte offset of K-major swizzled operands (unused by the hardware: 1 in
16-byte units, as the ISA assumes)."""


def descriptor_for(intrin: WgmmaIntrin, operand: str, address: int) -> MatrixDescriptor:
    """The 128B-swizzled descriptor the te backends build for ``operand`` ("A" or "B") of
    ``intrin`` starting at shared byte ``address``: K-major LBO 16 (unused), SBO 1024 (8
    rows of 128 bytes); an MN-major B (``_kn``) LBO :data:`B_KN_LBO` (between N atoms),
    SBO 1024 (between groups of 8 K-rows of 128 bytes)."""
    if operand == "B" and intrin.b_kn:
        return MatrixDescriptor(address, B_KN_LBO, 1024, "128B")
    return MatrixDescriptor(address, K_MAJOR_LBO, 1024, "128B")


def wgmma_of(spec) -> WgmmaIntrin:
    """The :class:`WgmmaIntrin` of a registered ``wgmma`` tensor intrinsic ``spec`` (its
    input type is B's: an ``_rs_cvt`` A holds float32 the instruction takes as B's type)."""
    return get_wgmma(spec.shapes["C"][1], spec.dtypes["B"], spec.key.b_kn)
