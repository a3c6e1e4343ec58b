"""Match a loop nest against a tensor intrinsic's declared computation.

``match_nest(loop, intrin)`` takes the loop a ``tensorize`` names and checks that the
perfect nest under it computes exactly the intrinsic's declaration: same operations
(casts, products, the reduction), every declared axis carried by one loop of the same
extent, and every operand accessed as a tile (the innermost declared dimension contiguous,
the outer one with a constant row stride). It returns the operands: buffer, base element
offset (an expression of the loops outside the nest) and row stride. The ``tensorize`` pass
runs it on scheduled IR (blocks, n-D buffers); both backends run it again on device IR (flat
buffers), where the nest is what they execute as the intrinsic.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from dataclasses import dataclass

from ..arith import affine_terms
from ..dtype import nbytes
from ..expr import (
    Bin,
    Call,
    Cast,
    Expr,
    FloatImm,
    IntImm,
    Load,
    Reduce,
    TensorRead,
    Var,
    free_vars,
    substitute,
)
from ..simplify import simplify
from ..stmt import Block, For, Let, Seq, Store
from .registry import IntrinError, TensorIntrin, get_intrin


@dataclass(frozen=True)
class Operand:
    """One operand of a matched intrinsic: ``buffer`` from element ``base`` (flat), rows
    ``ld`` elements apart; ``panel``, when nonzero, the element stride between the
    ``PANEL_WIDTH``-column panels the rows are cut into (the MN-major B of a wide ``_kn``
    wgmma, stored by ``layout_panels``). A scalar operand (the intrinsic's ``scalars``) has
    no buffer: ``base`` is the scalar expression the nest computes."""

    name: str
    buffer: object
    base: Expr
    ld: int
    panel: int = 0


PANEL_WIDTH = 64
"""Columns of a panel of a paneled wgmma operand: one 128-byte row of 16-bit elements (a
128B swizzle atom's row)."""


@dataclass(frozen=True)
class Bound:
    """A nest matched to ``intrin``: its operands by declared name, and the nest's loops."""

    intrin: TensorIntrin
    operands: dict
    loops: tuple

    def frag_slot(self, name: str, tile: int = 0) -> Expr:
        """The first per-lane element of the operand's fragment tile (see
        :func:`~.layout.tile_slot`), as an expression; ``tile`` counts the tiles one
        intrinsic fills (an ldmatrix .x4 of B fills two, ``tile_step`` apart)."""
        op = self.operands[name]
        role = self.intrin.role(name)
        base = op.base
        if tile:
            dr, dc = self.intrin.tile_step
            base = Bin("add", base, IntImm(tile * (dr * op.ld + dc), base.dtype))
        row0 = Bin("floordiv", base, IntImm(op.ld))
        col0 = Bin("floormod", base, IntImm(op.ld))
        tiles_per_row = op.ld // role.cols
        tile = Bin("add", Bin("mul", Bin("floordiv", row0, IntImm(role.rows)),
                              IntImm(tiles_per_row)),
                   Bin("floordiv", col0, IntImm(role.cols)))
        return simplify(Bin("mul", tile, IntImm(role.per_lane)))


def _fail(where: str, intrin: TensorIntrin, what: str):
    raise IntrinError(f"tensorize {where} as {intrin.name}: {what}")


def _nest(loop: For, where: str, intrin: TensorIntrin):
    """(loops, block or None, the store, var substitutions of blocks and lets)."""
    loops, vmap, block = [], {}, None
    s = loop
    while True:
        if isinstance(s, For):
            if s.kind not in ("serial", "unroll"):
                _fail(where, intrin, f"loop {s.var.name} in the nest is a {s.kind} loop; the "
                      "loops a tensor intrinsic replaces are serial (the warp runs them)")
            loops.append(s)
            s = s.body
        elif isinstance(s, Let):
            vmap[s.var] = substitute(s.value, vmap)
            s = s.body
        elif isinstance(s, Block) and block is None:
            if s.predicate is not None:
                _fail(where, intrin, f"stage {s.name} has a predicate ({s.predicate}) inside "
                      "the nest: the tile is partial; choose tile sizes that divide the "
                      "extents")
            block = s
            for iv, b in zip(s.iter_vars, s.bindings):
                vmap[iv.var] = substitute(b, vmap)
            s = s.body
        elif isinstance(s, Seq) and len(s.stmts) == 1:
            s = s.stmts[0]
        elif isinstance(s, Store):
            return loops, block, s, vmap
        else:
            found = (f"{len(s.stmts)} statements in sequence" if isinstance(s, Seq)
                     else f"a {type(s).__name__}")
            _fail(where, intrin, f"the body under loop {loop.var.name} is not a perfect loop "
                  f"nest around one store (found {found})")


def _match_expr(ir: Expr, te_e: Expr, acc: list, tf32: bool = False,
                scalars: tuple = (), nest: frozenset = frozenset()) -> str | None:
    """Match ``ir`` against the declaration ``te_e``; append the loads to ``acc``.
    Returns None, or what differs. ``tf32``: the intrinsic rounds its inputs to TF32 (as
    ``cvt.rna.tf32.f32``), so an input read through ``round_tf32`` (a product declared with
    ``precision="tf32"``) matches it too. ``scalars``: declared operands that match any
    expression of their dtype free of the ``nest`` vars (appended with no buffer)."""
    if isinstance(te_e, TensorRead) and te_e.tensor.name in scalars:
        if ir.dtype != te_e.dtype or free_vars(ir) & nest:
            return (f"expected a {te_e.dtype} scalar ({te_e.tensor.name}) invariant in the "
                    f"nest, found {ir}")
        acc.append((te_e.tensor.name, (), None, ir))
        return None
    if isinstance(te_e, TensorRead):
        if tf32 and isinstance(ir, Call) and ir.op == "round_tf32":
            ir = ir.args[0]
        if not isinstance(ir, Load):
            return f"expected a load of {te_e.tensor.name}, found {ir}"
        acc.append((te_e.tensor.name, te_e.indices, ir.buffer, ir.indices))
        return None
    if isinstance(te_e, Cast):
        if not isinstance(ir, Cast) or ir.dtype != te_e.dtype:
            return f"expected a cast to {te_e.dtype}, found {ir}"
        return _match_expr(ir.value, te_e.value, acc, tf32, scalars, nest)
    if isinstance(te_e, Bin):
        if not isinstance(ir, Bin) or ir.op != te_e.op:
            return f"expected {te_e.op} ({te_e}), found {ir}"
        n = len(acc)
        more = (tf32, scalars, nest)
        err = _match_expr(ir.a, te_e.a, acc, *more) or _match_expr(ir.b, te_e.b, acc, *more)
        if err and te_e.op in ("add", "mul"):
            del acc[n:]
            err2 = (_match_expr(ir.a, te_e.b, acc, *more)
                    or _match_expr(ir.b, te_e.a, acc, *more))
            if err2 is None:
                return None
        return err
    if isinstance(te_e, (FloatImm, IntImm)):
        if type(ir) is not type(te_e) or ir.value != te_e.value or ir.dtype != te_e.dtype:
            return f"expected the constant {te_e}, found {ir}"
        return None
    return f"unsupported declaration node {type(te_e).__name__}"


def _flat(buf, indices) -> Expr:
    off: Expr | None = None
    for i, st in zip(indices, buf.compact_strides()):
        term = i if st == 1 else Bin("mul", i, IntImm(st, i.dtype))
        off = term if off is None else Bin("add", off, term)
    return IntImm(0) if off is None else off


def _coefficients(flat: Expr, nest_vars: list):
    """(base, {var: int coefficient}) or None when ``flat`` is not affine in the vars."""
    c0, terms = affine_terms(flat)
    nest = set(nest_vars)
    coef = {v: 0 for v in nest_vars}
    rest: Expr = IntImm(c0, flat.dtype)
    for term, c in terms:
        if isinstance(term, Var) and term in nest:
            coef[term] += c
        elif free_vars(term) & nest:
            return _coefficients_slow(flat, nest_vars)
        else:
            rest = Bin("add", rest, Bin("mul", term, IntImm(c, flat.dtype)))
    return simplify(rest), coef


def _coefficients_slow(flat: Expr, nest_vars: list):
    """``_coefficients`` by substitution, for indices the affine reading does not
    separate (a floordiv of a nest var that cancels, say)."""
    zero = {v: IntImm(0, v.dtype) for v in nest_vars}
    base = simplify(substitute(flat, zero))
    coef = {}
    for v in nest_vars:
        one = dict(zero)
        one[v] = IntImm(1, v.dtype)
        c = simplify(Bin("sub", substitute(flat, one), base))
        if not isinstance(c, IntImm):
            return None
        coef[v] = c.value
    rebuilt: Expr = base
    for v, c in coef.items():
        if c:
            rebuilt = Bin("add", rebuilt, Bin("mul", v, IntImm(c, v.dtype)))
    diff = simplify(Bin("sub", flat, rebuilt))
    if not (isinstance(diff, IntImm) and diff.value == 0):
        return None
    return base, coef


def _panel_coefficients(flat: Expr, loops: list):
    """``(base, {var: coefficient}, panel, v)`` when ``flat`` is affine in the nest's loops but
    one, ``v``, which it reads in panels: ``PANEL_WIDTH`` consecutive elements, then the
    next panel ``panel`` elements on (``flat = base + sum(c u) + (v % W) + (v // W) *
    panel``, a buffer laid out by ``layout_panels``); else None. Checked at every value of
    ``v`` and, for each other loop, at one step of it in the second panel."""
    w = PANEL_WIDTH
    nest_vars = [n.var for n in loops]
    zero = {u: IntImm(0, u.dtype) for u in nest_vars}
    base = simplify(substitute(flat, zero))

    def offset(values: dict):
        at = dict(zero)
        at.update({u: IntImm(x, u.dtype) for u, x in values.items()})
        d = simplify(Bin("sub", substitute(flat, at), base))
        return d.value if isinstance(d, IntImm) else None

    for n in loops:
        v = n.var
        if n.extent <= w or n.extent % w:
            continue
        panel = offset({v: w})
        if panel is None or panel < w:
            continue
        if any(offset({v: x}) != (x // w) * panel + x % w for x in range(n.extent)):
            continue
        coef = {u: 0 for u in nest_vars}
        coef[v] = 1
        ok = True
        for u in nest_vars:
            if u is v:
                continue
            cu = offset({u: 1})
            if cu is None or offset({u: 1, v: w + 1}) != cu + panel + 1:
                ok = False
                break
            coef[u] = cu
        if ok:
            return base, coef, panel, v
    return None


_CACHE: OrderedDict = OrderedDict()
CACHE_SIZE = 1024
"""Matches remembered (statements are immutable and passes share unchanged subtrees, so
the verifier and both backends see the same loops again)."""


def match_nest(loop: For, intrin: TensorIntrin | str, where: str = "",
               device: bool = False) -> Bound:
    """Check the nest under ``loop`` against ``intrin``; raise :class:`IntrinError` naming
    ``where`` (``"<stage>.<loop>"``) and the mismatch. With ``device``, the zeroing nest of
    a reduction (its init, split off by lowering) matches the intrinsic's ``init``."""
    if isinstance(intrin, str):
        intrin = get_intrin(intrin)
    key = (id(loop), intrin.name, device)
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is loop:
        _CACHE.move_to_end(key)
        return hit[1]
    bound = _match_nest(loop, intrin, where, device)
    _CACHE[key] = (loop, bound)
    if len(_CACHE) > CACHE_SIZE:
        _CACHE.popitem(last=False)
    return bound


def _match_nest(loop: For, intrin: TensorIntrin, where: str, device: bool) -> Bound:
    where = where or loop.var.name
    loops, block, store, vmap = _nest(loop, where, intrin)
    value = substitute(store.value, vmap)
    out_idx = tuple(substitute(i, vmap) for i in store.indices)
    if (device and intrin.kind in ("mma", "wgmma")
            and isinstance(value, (FloatImm, IntImm))):
        intrin = get_intrin(intrin.init)
    decl = intrin.declaration
    op = decl.op
    out_name = intrin.operands[0]
    axes = list(op.axis) + list(op.reduce_axis)
    if len(loops) != len(axes):
        _fail(where, intrin, f"the nest has {len(loops)} loops "
              f"({', '.join(f'{n.var.name}:{n.extent}' for n in loops)}); the intrinsic has "
              f"{len(axes)} axes ({', '.join(f'{a.name}:{a.extent}' for a in axes)})")
    accesses = [(out_name, tuple(a.var for a in op.axis), store.buffer, out_idx)]
    body = op.body
    if isinstance(body, Reduce):
        if body.combiner != "sum":
            _fail(where, intrin, f"unsupported reduction {body.combiner}")
        upd = None
        if isinstance(value, Bin) and value.op == "add":
            for mine, other in ((value.a, value.b), (value.b, value.a)):
                if (isinstance(mine, Load) and mine.buffer is store.buffer
                        and all(repr(x) == repr(y) for x, y in
                                zip(mine.indices, out_idx))):
                    upd = other
                    break
        if upd is None:
            _fail(where, intrin, f"the store {store.buffer.name} = {value} is not a sum "
                  f"reduction into {store.buffer.name} (expected "
                  f"{store.buffer.name} = {store.buffer.name} + {body.source})")
        if block is not None:
            init = block.init
            ok = (isinstance(init, Store) and init.buffer is store.buffer
                  and isinstance(init.value, (FloatImm, IntImm)) and init.value.value == 0)
            if not ok:
                _fail(where, intrin, f"stage {block.name} must start its reduction from zero "
                      "(the intrinsic's init zeroes the accumulator)")
        tf32 = intrin.kind == "mma" and intrin.roles.get("A") == "a_tf32"
        err = _match_expr(upd, body.source, accesses, tf32)
    else:
        if block is not None and block.init is not None:
            _fail(where, intrin, f"stage {block.name} is a reduction; {intrin.name} is not")
        nest = frozenset(n.var for n in loops)
        err = _match_expr(value, body, accesses, False, intrin.scalars, nest)
    if err:
        _fail(where, intrin, f"the computation differs from the declaration "
              f"({out_name} = {body}): {err}")
    if store.buffer.dtype != decl.dtype:
        _fail(where, intrin, f"{store.buffer.name} is {store.buffer.dtype}; the intrinsic "
              f"writes {decl.dtype}")
    nest_vars = [n.var for n in loops]
    per_access = []
    scalar_ops = {name: Operand(name, None, idx, 0) for name, _, buf, idx in accesses
                  if buf is None}
    for name, te_idx, buf, idx in accesses:
        if buf is None:
            continue  # a scalar operand: the expression itself
        if buf.dtype != intrin.dtypes[name]:
            _fail(where, intrin, f"operand {name} is {buf.name} of {buf.dtype}; the intrinsic "
                  f"takes {intrin.dtypes[name]}")
        flat = _flat(buf, idx)
        co = _coefficients(flat, nest_vars)
        if (co is None and name == "B" and intrin.kind == "wgmma"
                and intrin.key.b_kn):
            co = _panel_coefficients(flat, loops)
        if co is None:
            _fail(where, intrin, f"the access {buf.name}[{', '.join(map(str, idx))}] is not "
                  "affine in the nest's loops")
        per_access.append((name, te_idx, buf, co))
    axis_names = [a.var for a in axes]
    errors = []
    for perm in itertools.permutations(range(len(loops))):
        amap = {axes[k].var: loops[p] for k, p in enumerate(perm)}
        bad = next((f"loop {amap[a.var].var.name} has extent {amap[a.var].extent}, axis "
                    f"{a.name} {a.extent}" for a in axes
                    if amap[a.var].extent != a.extent), None)
        if bad is None:
            operands, bad = _operands(per_access, amap, axis_names, intrin)
        if bad is None:
            _check_operands(operands, intrin, where, device)
            return Bound(intrin, {**operands, **scalar_ops}, tuple(loops))
        errors.append(bad)
    _fail(where, intrin, f"no assignment of the nest's loops "
          f"({', '.join(f'{n.var.name}:{n.extent}' for n in loops)}) to the axes "
          f"({', '.join(f'{a.name}:{a.extent}' for a in axes)}) fits; in loop order: "
          f"{errors[0]}")
    raise AssertionError("unreachable")


def _operands(per_access, amap, axis_vars, intrin):
    operands = {}
    for name, te_idx, buf, (base, coef, *panel) in per_access:
        used = [amap[v].var for v in te_idx]
        for a in axis_vars:
            lv = amap[a].var
            if lv not in used and coef[lv] != 0:
                return None, (f"{buf.name} (operand {name}) moves with loop {lv.name}, which "
                              f"carries axis {a.name}, not one of its own")
        if coef[used[-1]] != 1:
            return None, (f"{buf.name} (operand {name}) is not contiguous along loop "
                          f"{used[-1].name} (stride {coef[used[-1]]}, need 1)")
        ld = coef[used[0]] if len(used) > 1 else 0
        panel, along = panel if panel else (0, None)
        if panel and along is not used[-1]:
            return None, (f"{buf.name} (operand {name}) is read in panels along loop "
                          f"{along.name}, not {used[-1].name}, its contiguous axis")
        inner = PANEL_WIDTH if panel else amap[te_idx[-1]].extent
        if len(used) > 1 and ld < inner:
            return None, (f"{buf.name} (operand {name}): rows are {ld} elements apart, less "
                          f"than a row ({inner})")
        prev = operands.get(name)
        if prev is not None and (prev.buffer is not buf or prev.ld != ld):
            return None, f"operand {name} is read and written at different places"
        operands[name] = Operand(name, buf, base, ld, panel)
    return operands, None


def _check_operands(operands, intrin: TensorIntrin, where: str, device: bool) -> None:
    for name, op in operands.items():
        buf = op.buffer
        role = intrin.role(name)
        if role is not None:
            if buf.scope != role.scope:
                _fail(where, intrin, f"operand {name} is {buf.name} in {buf.scope} memory; it "
                      f"is a fragment: cache it in the {role.scope} scope (cache_read/"
                      f"cache_write with \"{role.scope}\")")
            if op.ld % role.cols:
                _fail(where, intrin, f"fragment {buf.name} has rows of {op.ld} elements, not a "
                      f"multiple of the {role.cols}-column tile")
        else:
            if buf.scope in ("warp", "warpgroup"):
                _fail(where, intrin, f"operand {name} is the fragment {buf.name}; the "
                      "intrinsic reads or writes memory there")
            if intrin.kind == "wgmma" and buf.scope != "shared":
                _fail(where, intrin, f"operand {name} is {buf.name} in {buf.scope} memory; "
                      "wgmma reads its operands from shared memory through descriptors "
                      "(cache_read them to \"shared\")")
            if intrin.kind == "wgmma" and device:
                # the tile's layout is known once buffers are compacted (kernels)
                _check_wgmma_operand(op, name, intrin, where)
            if intrin.kind == "ldmatrix" and buf.scope != "shared":
                _fail(where, intrin, f"ldmatrix reads shared memory; {buf.name} is "
                      f"{buf.scope} (cache_read it to shared first, or use a load_* "
                      "intrinsic)")
            if intrin.kind == "ldmatrix" and (op.ld * nbytes(buf.dtype)) % 16:
                # each matrix row is 16 bytes (8 16-bit or 4 fp32 elements) read at its own
                # 16-byte aligned address: rows a whole number of 16 bytes apart
                _fail(where, intrin, f"ldmatrix reads rows of 16 bytes, each 16-byte "
                      f"aligned; the rows of {buf.name} are {op.ld} elements of "
                      f"{nbytes(buf.dtype)} bytes apart ({op.ld * nbytes(buf.dtype)} "
                      "bytes): pad them to a multiple of 16 bytes (storage_align)")


WGMMA_ROW_BYTES = 128
"""The K-major rows a wgmma operand is read in: 128 bytes (64 fp16/bf16), the 128B swizzle."""


def _check_wgmma_operand(op: Operand, name: str, intrin: TensorIntrin, where: str) -> None:
    """A wgmma operand is a K-major tile of a shared buffer whose rows are exactly 128
    bytes, which the descriptor reads in the 128B-swizzled layout (the buffer's ``swizzle``
    with 3 bits, checked where the function is known: ``tensorize`` and the backends)."""
    buf = op.buffer
    esize = nbytes(buf.dtype)
    if name == "B" and intrin.key.b_kn:
        _check_wgmma_mn_operand(op, intrin, where)
        return
    if op.ld * esize != WGMMA_ROW_BYTES:
        pad = " (storage_align padding is not a wgmma layout)" if op.ld * esize > 128 else ""
        _fail(where, intrin, f"operand {name}: the rows of {buf.name} are {op.ld} elements "
              f"({op.ld * esize} bytes) apart; wgmma's 128B-swizzled K-major layout needs rows "
              f"of exactly {WGMMA_ROW_BYTES} bytes ({WGMMA_ROW_BYTES // esize} elements): a "
              f"shared tile of K extent {WGMMA_ROW_BYTES // esize}{pad}")
    c0, terms = affine_terms(op.base)
    # the tile starts on a row that is a multiple of 8 (1024 bytes: a swizzle atom) and a
    # k offset of whole 16-element steps inside the row
    atom = 8 * op.ld
    if any(isinstance(c, int) and c % 16 for _, c in terms) or c0 % 16:
        _fail(where, intrin, f"operand {name}: the tile of {buf.name} starts at element "
              f"{op.base}, not a multiple of 16 elements (a k16 step of a 128-byte row)")
    # every part of the start either moves whole atoms or stays inside the first row (the
    # k offset); the simulator checks the sum of the k offsets at run time
    bad = [c for _, c in terms if isinstance(c, int) and c % atom and abs(c) >= op.ld]
    if c0 % atom >= op.ld or bad:
        _fail(where, intrin, f"operand {name}: the tile of {buf.name} starts at element "
              f"{op.base}, not on a row that is a multiple of 8 (a 1024-byte swizzle atom)")


def _check_wgmma_mn_operand(op: Operand, intrin: TensorIntrin, where: str) -> None:
    """The B of a ``_kn`` wgmma (``imm-trans-b`` 1) is an MN-major ``[K, N]`` tile: rows
    along K of exactly 128 bytes (64 consecutive N elements: one 128B swizzle atom wide),
    starting on a whole atom (a multiple of 8 rows, 1024 bytes): its k16 slices are two
    atoms of 8 K-rows, SBO apart. An N of 128 or 256 reads 2 or 4 such 64-column panels
    (``layout_panels``), :data:`~.wgmma.B_KN_LBO` bytes apart (the descriptor's LBO)."""
    from .wgmma import B_KN_LBO

    buf = op.buffer
    esize = nbytes(buf.dtype)
    n = intrin.shapes["C"][1]
    per_row = WGMMA_ROW_BYTES // esize
    if n % per_row:
        _fail(where, intrin, f"operand B (MN-major, [K, N]): N = {n}; the te tile of rows "
              f"of {WGMMA_ROW_BYTES} bytes holds whole 128B swizzle atoms of {per_row} N "
              f"elements, so the transposed wgmma here is m64n{per_row}k16, or a multiple "
              "of it read in panels")
    if op.ld * esize != WGMMA_ROW_BYTES:
        pad = " (storage_align padding is not a wgmma layout)" if op.ld * esize > 128 else ""
        wide = (f"; an N of {n} is stored as {n // per_row} panels of {per_row} columns "
                "(layout_panels)" if n > per_row and not op.panel else "")
        _fail(where, intrin, f"operand B (MN-major, [K, N]): the K-rows of {buf.name} are "
              f"{op.ld} elements ({op.ld * esize} bytes) apart; the 128B-swizzled MN-major "
              f"layout needs rows of exactly {WGMMA_ROW_BYTES} bytes ({per_row} N elements): "
              f"a shared tile of N extent {per_row}{pad}{wide}")
    if n > per_row and op.panel * esize != B_KN_LBO:
        _fail(where, intrin, f"operand B (MN-major, [K, N]): N = {n} reads {n // per_row} "
              f"panels of {per_row} columns, {B_KN_LBO} bytes apart (the descriptor's "
              f"leading byte offset: 64 K-rows of {WGMMA_ROW_BYTES} bytes); the panels of "
              f"{buf.name} are {op.panel * esize} bytes apart (a shared tile of 64 K-rows "
              f"stored with layout_panels({per_row}))")
    c0, terms = affine_terms(op.base)
    atom = 8 * op.ld
    if c0 % atom or any(isinstance(c, int) and c % atom for _, c in terms):
        _fail(where, intrin, f"operand B (MN-major, [K, N]): the tile of {buf.name} starts "
              f"at element {op.base}, not on a K-row that is a multiple of 8 (a 1024-byte "
              "swizzle atom) at N offset 0")


def check_wgmma_swizzle(swizzle: dict, bound: Bound, where: str) -> None:
    """A wgmma's shared operands are read through descriptors of the 128B swizzle: their
    buffers must be laid out that way (the ``swizzle`` table of the function: buffer name
    -> bits; 3 bits, applied before tensorize)."""
    for name in ("A", "B"):
        if bound.intrin.role(name) is not None:
            continue  # a fragment in registers (wgmma's A of the "RS" form)
        buf = bound.operands[name].buffer
        bits = swizzle.get(buf.name)
        if bits != 3:
            now = "no swizzle" if bits is None else f"swizzle bits={bits}"
            raise IntrinError(
                f"tensorize {where} as {bound.intrin.name}: operand {name} is {buf.name} with "
                f"{now}; the wgmma descriptors read the 128B-swizzled layout: swizzle the "
                "shared stage with bits=3 (rows of 128 bytes) before tensorizing")
