"""Structured keys of tensor intrinsics: what an intrinsic does, and the one place its name
is spelled.

An :class:`IntrinKey` names a registered intrinsic by what it does (an ``mma`` of fp16
inputs into f32 accumulators with B kept as ``[K, N]``; an ``ldmatrix`` of four 8x8
matrices of B, transposed), so no schedule builds an intrinsic's name from strings:
:func:`~.registry.lookup` returns the intrinsic of a key. The names themselves
(``mma_m16n8k16_f16_f32_kn``) stay what pipelines and record logs store;
:func:`intrin_name` is the one place that spells them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..expr import IRError


class IntrinError(IRError):
    """An unknown intrinsic, or a loop nest that does not match one."""


SHORT = {"float16": "f16", "bfloat16": "bf16", "float32": "f32", "float8_e4m3fn": "e4m3",
         "float8_e5m2": "e5m2"}
"""The short dtype names intrinsic names and PTX use."""


def wgmma_k(ab: str) -> int:
    """The K of one wgmma on ``ab`` inputs: 32 bytes of K per row, so 16 of a 16-bit type
    and 32 of an 8-bit one."""
    return 32 if ab.startswith("float8") else 16


def short(dtype: str) -> str:
    """``f16``, ``bf16`` or ``f32`` for a tensor-core dtype, or a clear error."""
    try:
        return SHORT[dtype]
    except KeyError:
        raise IntrinError(f"no tensor intrinsic takes {dtype!r} elements (one of "
                          f"{', '.join(SHORT)})") from None


@dataclass(frozen=True)
class IntrinKey:
    """What an intrinsic does, as the registry indexes it.

    ``op``: one of the registry's kinds (``mma``, ``wgmma``, ``ldmatrix``, ``load``,
    ``store``, ``fill``). ``operand``: the matrix a fragment load or store moves (``"A"``,
    ``"B"``, ``"C"``; empty for mma/wgmma/fill). ``ab``: the input element dtype (mma,
    wgmma, fragment loads of A and B; ``float32`` is TF32). ``acc``: the accumulator dtype
    (mma, wgmma, fill, loads and stores of C). ``out``: a store's memory dtype (empty: the
    accumulator's). ``b_kn``: B kept as ``[K, N]`` (ldmatrix ``.trans``). ``n``: the
    instruction's N where it has several (wgmma and its zeroing). ``num``: ldmatrix's count
    of 8x8 matrices. ``scope``: where the accumulator lives, ``warp`` or ``warpgroup``.
    ``scaled``: a store that multiplies each accumulator element by one float32 scalar
    first (the per-tensor scales of an FP8 GEMM). ``a_regs``: a wgmma whose A operand is a
    fragment in the warpgroup's registers (role ``wg_a16``), not a shared tile; with
    ``a_cvt`` that fragment holds float32 values the instruction takes rounded to ``ab``
    (an accumulator's registers read as the next product's A: the conversion is the
    intrinsic's, two values into one 32-bit register).
    """

    op: str
    operand: str = ""
    ab: str = ""
    acc: str = ""
    out: str = ""
    b_kn: bool = False
    n: int = 0
    num: int = 0
    scope: str = "warp"
    scaled: bool = False
    a_regs: bool = False
    a_cvt: bool = False

    def __str__(self) -> str:
        fields = [f"{k}={v!r}" for k, v in self.__dict__.items()
                  if v not in ("", 0, False) and not (k == "scope" and v == "warp")]
        return f"IntrinKey({', '.join(fields)})"


def intrin_name(key: IntrinKey) -> str:
    """The registered name of ``key``'s intrinsic: the one place names are spelled (records
    store them, so they never change)."""
    kn = "_kn" if key.b_kn else ""
    if key.op == "mma":
        if key.ab == "float32":
            return "mma_m16n8k8_tf32_f32"
        return f"mma_m16n8k16_{short(key.ab)}_{short(key.acc)}{kn}"
    if key.op == "wgmma":
        # the ISA's "RS" form: A in registers, B in shared; _cvt: A held as float32
        rs = ("_rs_cvt" if key.a_cvt else "_rs") if key.a_regs else ""
        return f"wgmma_m64n{key.n}k{wgmma_k(key.ab)}_{short(key.ab)}_{short(key.acc)}{kn}{rs}"
    if key.op == "fill":
        if key.scope == "warpgroup":
            return f"fill_wg_m64n{key.n}_{short(key.acc)}"
        return f"fill_m16n8_{short(key.acc)}"
    if key.op == "store":
        out = "" if key.out in ("", key.acc) else f"_{short(key.out)}"
        pre = "store_wg" if key.scope == "warpgroup" else "store_c"
        return f"{pre}_{short(key.acc)}{out}{'_scaled' if key.scaled else ''}"
    if key.op == "ldmatrix":
        r = key.operand.lower()
        if key.ab == "float32":
            return f"ldmatrix_{r}_x{key.num}_tf32"
        return f"ldmatrix_{r}_x{key.num}{'_trans' if key.b_kn else ''}_{short(key.ab)}"
    if key.op == "load":
        if key.operand == "C":
            return f"load_c_{short(key.acc)}"
        r = key.operand.lower()
        if key.ab == "float32":
            return f"load_{r}_tf32"
        return f"load_{r}_{short(key.ab)}{kn}"
    raise IntrinError(f"{key}: unknown intrinsic op {key.op!r}")
