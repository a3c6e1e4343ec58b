"""The tensor intrinsics registry: each intrinsic's meaning as a small te computation.

An intrinsic is a warp-collective operation on matrix fragments (buffers in the ``warp``
scope, see :mod:`.layout`) and memory tiles. Its meaning is declared as a te compute over
small tensors, e.g. ``C[i, j] += f32(A[i, k]) * f32(B[j, k])`` for ``mma.sync m16n8k16``;
``tensorize`` checks a loop nest against that declaration, and both backends execute the
nest as the intrinsic. Operands are named after the declaration's tensors; fragment
operands carry a :class:`~.layout.FragmentRole`, the others are memory (shared or global;
``ldmatrix`` reads shared memory only).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from .keys import IntrinError, IntrinKey, intrin_name
from .layout import ROLES, WARP, FragmentRole

KINDS = ("mma", "ldmatrix", "load", "store", "fill", "wgmma")

RS_BACKENDS = ("sim", "ptx")
"""The backends lowering wgmma with A from registers (the ``_rs`` intrinsics): the
simulator, and the PTX backend (``backend_ptx/tensorcore.py``'s ``wg_wgmma`` hands these
nests to ``backend_ptx/wgmma_regs.py``'s ``emit_wgmma_rs``)."""


@dataclass(frozen=True)
class TensorIntrin:
    """One registered intrinsic.

    ``operands``: the declaration's tensor names, output first. ``roles``: operand ->
    fragment role name, for the fragment operands. ``num``/``trans``: ldmatrix's count of
    8x8 16-bit matrices (8 rows of 16 bytes: 8x4 for 32-bit elements) and ``.trans``,
    and ``tile_step`` the (rows, cols) from one fragment tile it fills to the next.
    ``init``: the intrinsic that zeroes the output of a reduction (what its ``init`` nest
    becomes). ``dtypes``: operand -> element dtype. ``key``: what it does, the
    :class:`~.keys.IntrinKey` :func:`lookup` finds it by. ``scalars``: operands declared
    as a one-element tensor read at 0 that the nest may compute as any scalar expression
    invariant in its loops (a scaled store's factor: ``scale_a[0] * scale_b[0]``).
    ``backends``: the backends that lower it (``"sim"``, ``"ptx"``); a schedule that needs
    it on another asks first (:func:`lowered_for`).
    """

    name: str
    kind: str
    shapes: dict
    dtypes: dict
    roles: dict
    operands: tuple
    num: int = 0
    trans: bool = False
    init: str | None = None
    tile_step: tuple = (0, 0)
    ptx: str = ""
    doc: str = ""
    scalars: tuple = ()
    backends: tuple = ("sim", "ptx")
    key: IntrinKey | None = field(default=None, compare=False)
    _decl: tuple = field(default=(), repr=False, compare=False)

    @property
    def warpgroup(self) -> bool:
        """Whether a warpgroup of 128 threads runs it (wgmma, and the fills and stores of
        its accumulators) rather than a warp."""
        return self.kind == "wgmma" or any(ROLES[r].threads > WARP for r in self.roles.values())

    def role(self, operand: str) -> FragmentRole | None:
        r = self.roles.get(operand)
        return None if r is None else ROLES[r]

    @functools.cached_property
    def declaration(self):
        """The te tensor the intrinsic computes (its output operand)."""
        return _declare(self)


_REGISTRY: dict = {}
_BY_KEY: dict = {}


def register(intrin: TensorIntrin) -> TensorIntrin:
    """Add ``intrin`` to the registry (and, with a key, to :func:`lookup`)."""
    if intrin.kind not in KINDS:
        raise IntrinError(f"intrinsic {intrin.name}: unknown kind {intrin.kind!r}")
    if intrin.key is not None:
        if intrin_name(intrin.key) != intrin.name:
            raise IntrinError(f"intrinsic {intrin.name}: its key {intrin.key} names "
                              f"{intrin_name(intrin.key)}")
        _BY_KEY[intrin.key] = intrin
    _REGISTRY[intrin.name] = intrin
    return intrin


def lookup(key: IntrinKey) -> TensorIntrin:
    """The registered intrinsic that does what ``key`` says, or an error listing the
    registered keys of the same op."""
    try:
        return _BY_KEY[key]
    except KeyError:
        same = sorted(str(k) for k in _BY_KEY if k.op == key.op)
        raise IntrinError(f"no tensor intrinsic registered for {key}; the {key.op} "
                          f"intrinsics are: {'; '.join(same[:12])}"
                          f"{' ...' if len(same) > 12 else ''}") from None


def get_intrin(name: str) -> TensorIntrin:
    """The registered intrinsic ``name``, or an error listing the close names."""
    try:
        return _REGISTRY[name]
    except KeyError:
        import difflib

        close = difflib.get_close_matches(name, list(_REGISTRY), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise IntrinError(f"unknown tensor intrinsic {name!r}{hint} (known: "
                          f"{', '.join(sorted(_REGISTRY))})") from None


def lowered_for(key: IntrinKey, backend: str) -> bool:
    """Whether the intrinsic of ``key`` is lowered by ``backend`` (``"sim"`` or ``"ptx"``)."""
    return backend in lookup(key).backends


def list_intrins() -> list:
    return sorted(_REGISTRY)


def _declare(it: TensorIntrin):
    from .. import te

    sh, dts = it.shapes, it.dtypes
    if it.kind in ("mma", "wgmma"):
        a = te.placeholder(sh["A"], dts["A"], name="A")
        b = te.placeholder(sh["B"], dts["B"], name="B")
        m, n = sh["C"]
        k = te.reduce_axis((0, sh["A"][1]), name="k")
        acc = dts["C"]

        b_kn = it.key.b_kn if it.key is not None else it.roles.get("B", "").endswith("_kn")

        a_cvt = it.key is not None and it.key.a_cvt

        def body(i, j):
            x, y = a[i, k], (b[k, j] if b_kn else b[j, k])
            if a_cvt:  # float32 registers rounded to B's 16-bit type as they are read
                x, y = x.astype(dts["B"]).astype(acc), y.astype(acc)
            elif x.dtype != acc:
                x, y = x.astype(acc), y.astype(acc)
            return te.sum(x * y, axis=k)

        return te.compute((m, n), body, name="C")
    if it.kind == "fill":
        from ..expr import const

        return te.compute(sh["C"], lambda i, j: const(0.0, dts["C"]), name="C")
    src_name, dst_name = it.operands[1], it.operands[0]
    src = te.placeholder(sh[src_name], dts[src_name], name=src_name)
    out_dtype = dts[dst_name]
    scale = [te.placeholder((1,), dts[n], name=n) for n in it.scalars]

    def copy(i, j):
        v = src[i, j]
        for x in scale:
            v = v * x[0]
        return v if v.dtype == out_dtype else v.astype(out_dtype)

    return te.compute(sh[dst_name], copy, name=dst_name)


def _b16(dtype: str) -> str:
    return {"float16": "f16", "bfloat16": "bf16"}[dtype]


def _register_all() -> None:
    for ab in ("float16", "bfloat16"):
        s = _b16(ab)
        accs = ("float32", "float16") if ab == "float16" else ("float32",)
        for acc in accs:
            a = "f32" if acc == "float32" else "f16"
            for kn in (False, True):
                key = IntrinKey("mma", ab=ab, acc=acc, b_kn=kn)
                register(TensorIntrin(
                    intrin_name(key), "mma",
                    {"A": (16, 16), "B": (16, 8) if kn else (8, 16), "C": (16, 8)},
                    {"A": ab, "B": ab, "C": acc},
                    {"A": "a16", "B": "b16_kn" if kn else "b16", "C": "c"},
                    ("C", "A", "B"), init=intrin_name(IntrinKey("fill", acc=acc)), key=key,
                    ptx=f"mma.sync.aligned.m16n8k16.row.col.{a}.{s}.{s}.{a}",
                    doc=f"C[16,8] += A[16,16] * {'B[16,8]' if kn else 'B[8,16]^T'}, {s} "
                        f"inputs, {a} accumulate"))
        # ldmatrix: A tiles (x4); B tiles [n, k] (x2: one, x4: two, x1: an 8x8 one); B
        # kept [k, n] through .trans (the registers are the same B fragment)
        for num, role, shape, step in ((4, "a16", (16, 16), (0, 0)),
                                       (2, "b16", (8, 16), (0, 0)),
                                       (4, "b16", (16, 16), (8, 0)),
                                       (1, "b8", (8, 8), (0, 0)),
                                       (2, "b16_kn", (16, 8), (0, 0)),
                                       (4, "b16_kn", (16, 16), (0, 8)),
                                       (1, "b8_kn", (8, 8), (0, 0))):
            trans = ROLES[role].kind == "b16t"
            r = "a" if role == "a16" else "b"
            key = IntrinKey("ldmatrix", r.upper(), ab=ab, b_kn=trans, num=num)
            register(TensorIntrin(
                intrin_name(key), "ldmatrix", {"F": shape, "S": shape}, {"F": ab, "S": ab},
                {"F": role}, ("F", "S"), num=num, trans=trans, tile_step=step, key=key,
                ptx=f"ldmatrix.sync.aligned.m8n8.x{num}{'.trans' if trans else ''}"
                    ".shared.b16",
                doc=f"{shape[0]}x{shape[1]} {r.upper()} fragment ({role}) from shared "
                    f"memory, {num} 8x8 matrices"))
        for r, role in (("a", "a16"), ("b", "b16"), ("b", "b16_kn")):
            R = ROLES[role]
            key = IntrinKey("load", r.upper(), ab=ab, b_kn=role.endswith("_kn"))
            register(TensorIntrin(
                intrin_name(key), "load",
                {"F": (R.rows, R.cols), "M": (R.rows, R.cols)},
                {"F": ab, "M": ab}, {"F": role}, ("F", "M"), key=key,
                doc=f"{r.upper()} fragment ({role}) from shared or global memory, lane by "
                    "lane"))
    for r, role in (("a", "a_tf32"), ("b", "b_tf32")):
        R = ROLES[role]
        key = IntrinKey("load", r.upper(), ab="float32")
        register(TensorIntrin(
            intrin_name(key), "load", {"F": (R.rows, R.cols), "M": (R.rows, R.cols)},
            {"F": "float32", "M": "float32"}, {"F": role}, ("F", "M"), key=key,
            doc=f"{r.upper()} fragment of m16n8k8 tf32 from memory"))
    # ldmatrix of 32-bit elements: an "8x8 b16 matrix" is 8 rows of 16 bytes, i.e. 8 rows
    # of 4 fp32 values, and lane l receives row l / 4, 32-bit column l % 4 of each: one
    # element of an 8x4 sub-matrix of the tf32 roles. A: one x4 (rows 0-7 / 8-15, cols
    # 0-3 / 4-7); B as [n, k]: x2 for one n8 tile, x4 for two (n 0-7, 8-15). The
    # registers hold the fp32 bit patterns (the mma rounds them to TF32). There is no
    # .trans of 32-bit elements: B kept as [k, n] has no ldmatrix here.
    for num, r, role, shape, step in ((4, "a", "a_tf32", (16, 8), (0, 0)),
                                      (2, "b", "b_tf32", (8, 8), (0, 0)),
                                      (4, "b", "b_tf32", (16, 8), (8, 0))):
        key = IntrinKey("ldmatrix", r.upper(), ab="float32", num=num)
        register(TensorIntrin(
            intrin_name(key), "ldmatrix", {"F": shape, "S": shape},
            {"F": "float32", "S": "float32"}, {"F": role}, ("F", "S"), num=num, key=key,
            tile_step=step, ptx=f"ldmatrix.sync.aligned.m8n8.x{num}.shared.b16",
            doc=f"{shape[0]}x{shape[1]} fp32 {r.upper()} fragment ({role}) of m16n8k8 tf32 "
                f"from shared memory, {num} matrices of 8 rows x 4 fp32 (16 bytes)"))
    register(TensorIntrin(
        "mma_m16n8k8_tf32_f32", "mma", {"A": (16, 8), "B": (8, 8), "C": (16, 8)},
        {"A": "float32", "B": "float32", "C": "float32"},
        {"A": "a_tf32", "B": "b_tf32", "C": "c"}, ("C", "A", "B"), init="fill_m16n8_f32",
        key=IntrinKey("mma", ab="float32", acc="float32"),
        ptx="mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32",
        doc="C[16,8] += A[16,8] * B[8,8]^T in TF32 (inputs keep 10 mantissa bits)"))
    for acc in ("float32", "float16"):
        a = "f32" if acc == "float32" else "f16"
        fill, load = IntrinKey("fill", acc=acc), IntrinKey("load", "C", acc=acc)
        register(TensorIntrin(intrin_name(fill), "fill", {"C": (16, 8)}, {"C": acc},
                              {"C": "c"}, ("C",), key=fill,
                              doc=f"zero a {a} accumulator tile"))
        register(TensorIntrin(intrin_name(load), "load", {"F": (16, 8), "M": (16, 8)},
                              {"F": acc, "M": acc}, {"F": "c"}, ("F", "M"), key=load,
                              doc=f"{a} accumulator tile from memory"))
        outs = ("float32", "float16", "bfloat16") if acc == "float32" else ("float16",)
        for out in outs:
            o = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}[out]
            key = IntrinKey("store", "C", acc=acc, out="" if out == acc else out)
            register(TensorIntrin(intrin_name(key), "store", {"M": (16, 8), "F": (16, 8)},
                                  {"M": out, "F": acc}, {"F": "c"}, ("M", "F"), key=key,
                                  doc=f"{a} accumulator tile to memory as {o}"))


def _register_wgmma() -> None:
    """wgmma (sm_90a): ``C[64, N] += f32(A[64, 16]) * f32(B[N, 16])`` with A and B K-major in
    shared memory, and ``..._kn``: ``B[16, N]`` MN-major (``imm-trans-b`` 1), all read
    through descriptors of the 128B-swizzled layout (see :mod:`.wgmma`), C in a
    warpgroup's registers (role ``wg_c``); its zeroing, and the accumulator tiles' stores
    to memory (with the cast to f16/bf16)."""
    from .wgmma import WGMMA_N, get_wgmma

    for ab in ("float16", "bfloat16"):
        for n in WGMMA_N:
            spec = get_wgmma(n, ab)
            fill = intrin_name(IntrinKey("fill", acc="float32", n=n, scope="warpgroup"))
            register(TensorIntrin(
                spec.name, "wgmma", {"A": (64, 16), "B": (n, 16), "C": (64, n)},
                {"A": ab, "B": ab, "C": "float32"}, {"C": "wg_c"}, ("C", "A", "B"),
                init=fill, ptx=spec.ptx, key=IntrinKey("wgmma", ab=ab, acc="float32", n=n),
                doc=f"C[64,{n}] += A[64,16] * B[{n},16]^T, {_b16(ab)} operands in shared memory "
                    "(128B swizzle), f32 accumulators in a warpgroup's registers"))
            kn = get_wgmma(n, ab, b_kn=True)
            register(TensorIntrin(
                kn.name, "wgmma", {"A": (64, 16), "B": (16, n), "C": (64, n)},
                {"A": ab, "B": ab, "C": "float32"}, {"C": "wg_c"}, ("C", "A", "B"),
                init=fill, ptx=kn.ptx,
                key=IntrinKey("wgmma", ab=ab, acc="float32", n=n, b_kn=True),
                doc=f"C[64,{n}] += A[64,16] * B[16,{n}], {_b16(ab)} operands in shared memory "
                    "(128B swizzle; B MN-major: rows of 64 N elements, imm-trans-b 1), f32 "
                    "accumulators in a warpgroup's registers"))
        for n in WGMMA_N:
            for kn in (False, True):
                # A from registers (the accumulator of a product before, cast to 16 bits)
                key = IntrinKey("wgmma", ab=ab, acc="float32", n=n, b_kn=kn, a_regs=True)
                spec = get_wgmma(n, ab, b_kn=kn)
                b = f"B[16,{n}]" if kn else f"B[{n},16]^T"
                register(TensorIntrin(
                    intrin_name(key), "wgmma",
                    {"A": (64, 16), "B": (16, n) if kn else (n, 16), "C": (64, n)},
                    {"A": ab, "B": ab, "C": "float32"}, {"C": "wg_c", "A": "wg_a16"},
                    ("C", "A", "B"), ptx=spec.ptx, key=key, backends=RS_BACKENDS,
                    init=intrin_name(IntrinKey("fill", acc="float32", n=n, scope="warpgroup")),
                    doc=f"C[64,{n}] += A[64,16] * {b}, A a {_b16(ab)} fragment in the "
                        "warpgroup's registers (role wg_a16), B in shared memory (128B "
                        f"swizzle{'; MN-major' if kn else ''}), f32 accumulators in registers"))
                # A held as float32 (an accumulator), rounded to 16 bits by the intrinsic
                key = IntrinKey("wgmma", ab=ab, acc="float32", n=n, b_kn=kn, a_regs=True,
                                a_cvt=True)
                register(TensorIntrin(
                    intrin_name(key), "wgmma",
                    {"A": (64, 16), "B": (16, n) if kn else (n, 16), "C": (64, n)},
                    {"A": "float32", "B": ab, "C": "float32"}, {"C": "wg_c", "A": "wg_a16"},
                    ("C", "A", "B"), ptx=spec.ptx, key=key, backends=RS_BACKENDS,
                    init=intrin_name(IntrinKey("fill", acc="float32", n=n, scope="warpgroup")),
                    doc=f"C[64,{n}] += {_b16(ab)}(A[64,16]) * {b}, A float32 registers "
                        "(role wg_a16: an accumulator's 16 columns) converted in pairs to "
                        f"{_b16(ab)} for an RS wgmma, B in shared memory"))
    for ab in ("float8_e4m3fn", "float8_e5m2"):
        for n in WGMMA_N:
            spec = get_wgmma(n, ab)
            k = spec.k
            register(TensorIntrin(
                spec.name, "wgmma", {"A": (64, k), "B": (n, k), "C": (64, n)},
                {"A": ab, "B": ab, "C": "float32"}, {"C": "wg_c"}, ("C", "A", "B"),
                init=intrin_name(IntrinKey("fill", acc="float32", n=n, scope="warpgroup")),
                ptx=spec.ptx, key=IntrinKey("wgmma", ab=ab, acc="float32", n=n),
                doc=f"C[64,{n}] += A[64,{k}] * B[{n},{k}]^T, {spec.ptx.split('.')[-1]} "
                    "(fp8) operands K-major in shared memory (128B swizzle), f32 "
                    "accumulators in a warpgroup's registers"))
    for n in WGMMA_N:
        key = IntrinKey("fill", acc="float32", n=n, scope="warpgroup")
        register(TensorIntrin(intrin_name(key), "fill", {"C": (64, n)},
                              {"C": "float32"}, {"C": "wg_c"}, ("C",), key=key,
                              doc=f"zero a warpgroup's 64x{n} f32 wgmma accumulator"))
    for out in ("float32", "float16", "bfloat16"):
        o = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}[out]
        key = IntrinKey("store", "C", acc="float32", out="" if out == "float32" else out,
                        scope="warpgroup")
        register(TensorIntrin(intrin_name(key), "store", {"M": (64, 8), "F": (64, 8)},
                              {"M": out, "F": "float32"}, {"F": "wg_c"}, ("M", "F"), key=key,
                              doc=f"a 64x8 tile of a warpgroup's wgmma accumulator to memory "
                                  f"as {o}, thread by thread"))
        key = IntrinKey("store", "C", acc="float32", out="" if out == "float32" else out,
                        scope="warpgroup", scaled=True)
        register(TensorIntrin(intrin_name(key), "store",
                              {"M": (64, 8), "F": (64, 8), "alpha": (1,)},
                              {"M": out, "F": "float32", "alpha": "float32"}, {"F": "wg_c"},
                              ("M", "F", "alpha"), key=key, scalars=("alpha",),
                              doc=f"a 64x8 tile of a warpgroup's wgmma accumulator times the "
                                  f"float32 scalar alpha to memory as {o}, thread by thread "
                                  "(an FP8 GEMM's per-tensor scales in registers)"))


_register_all()
_register_wgmma()
