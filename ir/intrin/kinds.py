"""Tensor-core instruction kinds as frozen data.

A :class:`TensorCoreKind` is one family of tensor-core instructions: its instruction tile,
the input and accumulator dtypes, where the accumulator lives (a warp's fragments or a
warpgroup's registers) and how many threads hold it, how its operands reach it (fragments
staged through ``ldmatrix``, or shared tiles read through wgmma descriptors), the tile its
accumulator store writes, and whether B may be kept as ``[K, N]``. Schedules ask a kind
for its intrinsics (:meth:`TensorCoreKind.mma`, :meth:`~TensorCoreKind.fill`,
:meth:`~TensorCoreKind.store`, :meth:`~TensorCoreKind.fragment_load`), which it looks up
by :class:`~.keys.IntrinKey`; a new tensor-core form is one more kind.
"""

from __future__ import annotations

from dataclasses import dataclass

from .keys import IntrinError, IntrinKey
from .registry import lookup


@dataclass(frozen=True)
class FragmentPlan:
    """How one operand's fragments are staged before each mma: ``rows`` of the fragment
    buffer per intrinsic call along ``axis`` (0: the operand's rows; 1: B kept as
    ``[K, N]``, whose tiles run along N), and the intrinsic's name."""

    rows: int
    axis: int
    intrin: str


@dataclass(frozen=True)
class TensorCoreKind:
    """One family of tensor-core instructions.

    ``m``, ``ns``, ``k``: the instruction tile (``ns`` every N it offers); ``inputs``:
    operand dtypes; ``accs``: accumulator dtypes; ``acc_scope``/``threads``: where the
    accumulator lives and how many threads hold it; ``operand_path``: ``"fragments"``
    (staged into registers by ``ldmatrix`` or lane by lane) or ``"descriptors"`` (shared
    tiles read in place); ``store_tile``: the (rows, cols) one accumulator store writes;
    ``b_kn``: whether B may be kept as ``[K, N]``; ``outs``: the dtypes a store may write.
    """

    name: str
    m: int
    ns: tuple
    k: int
    inputs: tuple
    accs: tuple
    acc_scope: str
    threads: int
    operand_path: str
    store_tile: tuple
    b_kn: bool
    outs: tuple = ("float32", "float16", "bfloat16")

    def _check(self, ab: str, acc: str) -> None:
        if ab not in self.inputs:
            raise IntrinError(f"{self.name} takes {' or '.join(self.inputs)} inputs, not {ab}")
        if acc not in self.accs:
            raise IntrinError(f"{self.name} accumulates in {' or '.join(self.accs)}, not {acc}")

    def mma(self, ab: str, acc: str = "float32", b_kn: bool = False, n: int = 0) -> str:
        """The product intrinsic on ``ab`` inputs into ``acc`` (``n``: the wgmma's N)."""
        self._check(ab, acc)
        if b_kn and not self.b_kn:
            raise IntrinError(f"{self.name} takes B as [N, K] only")
        op = "wgmma" if self.acc_scope == "warpgroup" else "mma"
        return lookup(IntrinKey(op, ab=ab, acc=acc, b_kn=b_kn,
                                n=n if op == "wgmma" else 0)).name

    def fill(self, acc: str = "float32", n: int = 0) -> str:
        """The intrinsic zeroing an accumulator tile."""
        wg = self.acc_scope == "warpgroup"
        return lookup(IntrinKey("fill", acc=acc, n=n if wg else 0, scope=self.acc_scope)).name

    def store(self, acc: str = "float32", out: str = "", scaled: bool = False) -> str:
        """The intrinsic storing a :attr:`store_tile` of the accumulator to memory as
        ``out`` (default: the accumulator's dtype); ``scaled``: each element multiplied by
        one float32 scalar first (warpgroup accumulators only)."""
        out = "" if out in ("", acc) else out
        return lookup(IntrinKey("store", operand="C", acc=acc, out=out,
                                scope=self.acc_scope, scaled=scaled)).name

    def fragment_load(self, operand: str, ab: str, b_kn: bool = False,
                      path: str = "ldmatrix", warp_cols: int = 16) -> FragmentPlan:
        """How ``operand`` (``"A"`` or ``"B"``) is staged into fragments: ``path``
        ``"ldmatrix"`` (four 8x8 matrices of A; of B four where the warp tile has a
        multiple of 16 columns, ``warp_cols``, else two) or ``"load"`` (lane by lane)."""
        if self.operand_path != "fragments":
            raise IntrinError(f"{self.name} reads its operands through descriptors; it "
                              "stages no fragments")
        if path not in ("ldmatrix", "load"):
            raise IntrinError(f"fragment loads are 'ldmatrix' or 'load', not {path!r}")
        b_kn = b_kn and operand == "B"
        axis = 1 if b_kn else 0
        if path == "load":
            rows = 16 if operand == "A" else 8
            return FragmentPlan(rows, axis, lookup(IntrinKey("load", operand, ab=ab,
                                                             b_kn=b_kn)).name)
        if operand == "A":
            return FragmentPlan(16, 0, lookup(IntrinKey("ldmatrix", "A", ab=ab, num=4)).name)
        wide = warp_cols % 16 == 0
        return FragmentPlan(16 if wide else 8, axis,
                            lookup(IntrinKey("ldmatrix", "B", ab=ab, b_kn=b_kn,
                                             num=4 if wide else 2)).name)


MMA_SYNC = TensorCoreKind(
    "mma.sync m16n8k16", 16, (8,), 16, ("float16", "bfloat16"), ("float32", "float16"),
    "warp", 32, "fragments", (16, 8), True)
"""Warp-level ``mma.sync m16n8k16`` on fp16/bf16 fragments (sm_80+)."""

MMA_SYNC_TF32 = TensorCoreKind(
    "mma.sync m16n8k8 tf32", 16, (8,), 8, ("float32",), ("float32",), "warp", 32,
    "fragments", (16, 8), False)
"""Warp-level ``mma.sync m16n8k8`` multiplying float32 fragments in TF32 (sm_80+)."""

WGMMA = TensorCoreKind(
    "wgmma m64nNk16", 64, (8, 16, 32, 64, 96, 128, 192, 256), 16, ("float16", "bfloat16"),
    ("float32",), "warpgroup", 128, "descriptors", (64, 8), True)
"""Warpgroup ``wgmma.mma_async m64nNk16`` on fp16/bf16 shared tiles (sm_90a)."""

WGMMA_FP8 = TensorCoreKind(
    "wgmma m64nNk32 fp8", 64, (8, 16, 32, 64, 96, 128, 192, 256), 32,
    ("float8_e4m3fn", "float8_e5m2"), ("float32",), "warpgroup", 128, "descriptors", (64, 8),
    False)
"""Warpgroup ``wgmma.mma_async m64nNk32`` on fp8 (e4m3, e5m2) shared tiles, K-major (sm_90a):
the same 32 bytes of K per instruction as :data:`WGMMA`, so the same descriptors, shared
layouts, accumulators and stores."""

KINDS = (MMA_SYNC, MMA_SYNC_TF32, WGMMA, WGMMA_FP8)


def mma_kind(ab: str, wgmma: bool = False) -> TensorCoreKind:
    """The kind that multiplies ``ab`` inputs: wgmma (``wgmma``; fp8 inputs only there),
    else mma.sync (TF32 for float32 inputs)."""
    if ab in WGMMA_FP8.inputs:
        if not wgmma:
            raise IntrinError(f"{ab} inputs run on {WGMMA_FP8.name} only (sm_90a)")
        return WGMMA_FP8
    if wgmma:
        return WGMMA
    return MMA_SYNC_TF32 if ab == "float32" else MMA_SYNC
