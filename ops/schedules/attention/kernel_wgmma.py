"""The fused attention kernel with both products on wgmma (sm_90a).

The block holds ``warps / 4`` warpgroups (``threadIdx.y``) of 128 threads
(``threadIdx.x``); warpgroup ``g`` owns query rows ``64 g .. 64 g + 63``, and its warp ``w``
rows ``16 w ..`` of those, as the accumulators' layout has it. Per key tile:

1. ``cp.async`` copies K and V into their 128B-swizzled shared layouts (16-byte chunk ``c``
   of row ``r`` at chunk ``c ^ (r % 8)``), as the matrix descriptors read them;
2. ``S = Q K^T``: one ``wgmma m64n{block_kv}k16`` per 16 columns of the head dim (A = the
   Q tile, B = the K tile ``[N, K]``, both K-major in 64-column panels), fenced,
   committed and waited for; the accumulators are stored to a float32 tile;
3. the softmax of :class:`~.kernel._Kernel` (two threads a row, running maximum and sum in
   float32, conditional rescaling) writes the probabilities into the swizzled ``P_s``;
4. where some row's maximum moved, the output accumulated so far is *flushed*: stored to
   the float32 tile and added, scaled by ``exp(m_old - m_new)``, to the float32 output
   ``O_s`` in shared memory, and the accumulators are zeroed (the intrinsics give no way
   back from memory into a warpgroup's accumulators); with the conditional rescaling
   this is rare;
5. ``O += P V``: one ``wgmma m64n{v_dim}k16`` per 16 keys, A = ``P_s`` (K-major), B = the V
   tile as it lies in memory, ``[K, N]``, read MN-major (``_kn``) in 64-column panels.

At the end ``out = (O_s + O) / l``. The generic-proxy writes the wgmmas read (the copies,
the probabilities) are followed by ``fence.proxy.async`` before the barrier that
publishes them.
"""

from __future__ import annotations

from ....ir import dtype as dt
from ....ir.expr import Cast, Expr, IntImm, Var, emin, floordiv, floormod, select
from ....ir.intrin.keys import IntrinKey
from ....ir.stmt import (
    Alloc,
    AsyncCommit,
    AsyncCopy,
    AsyncWait,
    Barrier,
    Buffer,
    For,
    If,
    Let,
    Seq,
    Stmt,
    Store,
    WgmmaSync,
)
from .builders import F32, _f, _i, _intrin, _loop, _loop_var, _operand_buffers
from .kernel import _Kernel
from .knobs import COPY_ELEMS
from .knobs_wgmma import PANEL, output_chunk, wgmma_layout

WG = 128
"""Threads of a warpgroup."""
PANEL_ELEMS = PANEL * PANEL
"""Elements of one 64-row panel of 64 columns (8192 bytes: the MN-major B's LBO)."""


def _xor3(a: Expr, b: Expr) -> Expr:
    """``a XOR b`` for ``0 <= a, b < 8`` (the IR has no xor; LLVM folds the power-of-two
    divisions into shifts and masks)."""
    from ....passes.lower.swizzle_layout import xor_bits

    return xor_bits(a, b, 3)


def swizzled(row: Expr, col: Expr) -> Expr:
    """Element ``col`` (< 64) of ``row`` of a 64-column panel in the 128B swizzle: the
    16-byte chunk ``col / 8`` moves to ``chunk ^ (row % 8)``."""
    return row * _i(PANEL) + _xor3(col // _i(COPY_ELEMS), floormod(row, 8)) * _i(
        COPY_ELEMS) + floormod(col, COPY_ELEMS)


class WgmmaKernel(_Kernel):
    """Builds the wgmma form of the kernel for one workload and configuration."""

    COPY_OFFSETS = False
    """Whether the copies take constant offsets by default (:meth:`_copy`)."""

    def __init__(self, w, cfg, copy_offsets: bool | None = None):
        self.w, self.cfg = w, cfg
        # each thread's k-th copy of a tile at its first one's addresses plus 64-bit
        # constants (_copy_offsets); None: the form's default
        self.copy_offsets = self.COPY_OFFSETS if copy_offsets is None else copy_offsets
        self.lay = lay = wgmma_layout(w, cfg)
        ab = w.dtype
        ev, br, bc = w.v_dim, cfg.block_q, cfg.block_kv
        self.k_s_mma = IntrinKey("wgmma", ab=ab, acc=F32, n=bc)
        self.k_o_mma = IntrinKey("wgmma", ab=ab, acc=F32, n=ev, b_kn=True)
        self.k_store = IntrinKey("store", "C", acc=F32, scope="warpgroup")
        self.q, self.k, self.v = _operand_buffers(w)
        self.mask = None
        if w.mask is not None:
            n = 1
            for s in w.mask.shape:
                n *= s
            self.mask = Buffer("mask", w.mask.dtype, [n])
        self.out = Buffer("out", ab, [w.batch * w.heads * w.q_len * ev])
        self.q_sz = lay.q_panels * br * PANEL
        self.k_sz = lay.q_panels * bc * PANEL
        self.v_sz = bc * lay.v_panels * PANEL
        self.q_s = Buffer("Q_s", ab, [self.q_sz], "shared")
        self.k_s = Buffer("K_s", ab, [cfg.stages * self.k_sz], "shared")
        self.v_s = Buffer("V_s", ab, [cfg.stages * self.v_sz], "shared")
        self.p_s = Buffer("P_s", ab, [bc * br], "shared")
        if "S_s" in lay.sizes:  # not with scores="registers" (kernel_wgmma_regs.py)
            self.s_s = Buffer("S_s", F32, [br * lay.s_ld], "shared")
            self.o_s = Buffer("O_s", F32, [br * lay.o_ld], "shared")
            self.r_s = Buffer("R_s", F32, [br], "shared")
            self.w_s = Buffer("W_s", F32, [cfg.warps], "shared")
        self.sf = Buffer("S_acc", F32, [64 * bc], "warpgroup")
        self.of = Buffer("O_acc", F32, [64 * ev], "warpgroup")
        self._row_registers()
        self.bx, self.by, self.bz = (Var(n) for n in ("bq", "bh", "bb"))
        self.ty = Var("wg")  # the warpgroup

    @property
    def block(self) -> tuple:
        return (WG, self.cfg.warpgroups, 1)

    @property
    def kernel_attrs(self) -> dict:
        # the 16-bit tiles the wgmmas read lie in the 128B swizzle (3 bits)
        return {"swizzle": {b.name: 3 for b in (self.q_s, self.k_s, self.v_s, self.p_s)}}

    # -- threads --------------------------------------------------------------------------
    def threads(self, fn) -> For:
        """``fn(tx)`` on the 128 threads of each warpgroup."""
        return _loop("tx", WG, fn, "thread", "threadIdx.x")

    def warp_lanes(self, fn) -> Stmt:
        return self.threads(lambda tx: fn(floormod(tx, 32),
                                          self.ty * _i(4) + floordiv(tx, 32)))

    def p_at(self, gr: Expr, c: Expr) -> Expr:
        panel = c // _i(PANEL)
        return panel * _i(self.cfg.block_q * PANEL) + swizzled(gr, floormod(c, PANEL))

    def any_vote(self) -> Expr:
        """Whether some row of this warpgroup moved its maximum this tile (its 4 warps'
        votes, read after the barrier that follows them: the same value in the warpgroup,
        as its flush's accumulator store and zeroing need; the flush holds no barrier, so
        warpgroups may decide apart)."""
        total = self.w_s[self.ty * _i(4)]
        for k in range(1, 4):
            total = total + self.w_s[self.ty * _i(4) + _i(k)]
        return total > _f(0.0)

    # -- copies ---------------------------------------------------------------------------
    def _copy(self, dst: Buffer, dst_at, src: Buffer, src_row, first: Expr, rows: int,
              limit: int, cols: int) -> Stmt:
        """The copies of :meth:`_copy_rows_of`, each thread's ``k``-th copy at its first
        one's addresses plus 64-bit constants (where the tile is whole and each of a
        thread's copies lies a fixed distance from its first in both layouts): LLVM then
        folds the constants into the addresses of the ``cp.async`` instead of keeping a
        64-bit register pair for each copy's addresses across the key loop (with 32-bit
        offsets, widened per copy, it hoists them all: 16 copies a thread a step with 4
        warps and head dim 128, 40 to 80 registers, ptxas 13). The others, and every copy
        unless :attr:`copy_offsets`, as :meth:`_copy_rows_of`."""
        per_row = cols // COPY_ELEMS
        threads = self.cfg.threads
        total = rows * per_row
        if not self.copy_offsets or limit % rows or total % threads or threads % per_row:
            return self._copy_rows_of(dst, dst_at, src, src_row, first, rows, limit, cols)
        step_rows = threads // per_row
        deltas = []
        for k in range(total // threads):
            dd = [_const(dst_at(_i(r + k * step_rows), _i(c)) - dst_at(_i(r), _i(c)))
                  for r in (0, step_rows - 1) for c in (0, per_row - 1)]
            sd = _const(src_row(first + _i(k * step_rows)) - src_row(first))
            if None in dd or len(set(dd)) != 1 or sd is None:
                return self._copy_rows_of(dst, dst_at, src, src_row, first, rows, limit, cols)
            deltas.append((dd[0], sd))
        nbytes = COPY_ELEMS * dt.nbytes(dst.dtype)

        def lane(tx):
            c = self.ty * _i(WG) + tx
            r, ch = c // _i(per_row), c % _i(per_row)
            d0 = Cast("int64", dst_at(r, ch))
            s0 = Cast("int64", src_row(first + r) + ch * _i(COPY_ELEMS))
            return Seq([AsyncCopy(dst, d0 + IntImm(dd, "int64"), src, s0 + IntImm(sd, "int64"),
                                  nbytes) for dd, sd in deltas])
        return self.threads(lane)

    def _copy_rows_of(self, dst: Buffer, dst_at, src: Buffer, src_row, first: Expr,
                      rows: int, limit: int, cols: int) -> Stmt:
        """cp.async ``rows`` rows of ``cols`` elements (row ``first + r`` of ``src``, zeros
        past ``limit``) to ``dst_at(r, chunk)`` of ``dst``, 16 bytes a copy. Where every
        tile the kernel copies is whole (``limit`` a multiple of ``rows``, and the callers
        copy no tile past the last), the rows need no clamp and the copies no zero fill."""
        per_row = cols // COPY_ELEMS
        total = rows * per_row
        threads = self.cfg.threads
        steps = -(-total // threads)

        def body(it):
            def lane(tx):
                c = it * _i(threads) + self.ty * _i(WG) + tx
                r, ch = c // _i(per_row), c % _i(per_row)
                g = first + r
                nbytes = COPY_ELEMS * dt.nbytes(dst.dtype)
                if limit % rows == 0:
                    src_i = src_row(g) + ch * _i(COPY_ELEMS)
                    cp = AsyncCopy(dst, dst_at(r, ch), src, src_i, nbytes)
                else:
                    inside = g < _i(limit)
                    src_i = src_row(emin(g, _i(limit - 1))) + ch * _i(COPY_ELEMS)
                    cp = AsyncCopy(dst, dst_at(r, ch), src, src_i, nbytes,
                                   select(inside, IntImm(nbytes, "int32"),
                                          IntImm(0, "int32")))
                return cp if total % threads == 0 else If(c < _i(total), cp)
            return self.threads(lane)

        return _loop("cp", steps, body, "unroll" if steps <= 8 else "serial")

    def _k_major_at(self, base: Expr, rows: int):
        """Chunk ``ch`` of row ``r`` of a K-major tile in 64-column panels of ``rows``
        rows."""
        def at(r, ch):
            panel = ch // _i(PANEL // COPY_ELEMS)
            col = floormod(ch, PANEL // COPY_ELEMS) * _i(COPY_ELEMS)
            return base + panel * _i(rows * PANEL) + swizzled(r, col)
        return at

    def copy_q(self) -> Stmt:
        w = self.w
        return self._copy(self.q_s, self._k_major_at(_i(0), self.cfg.block_q), self.q,
                          self.q_row, self.row0(), self.cfg.block_q, w.q_len, w.head_dim)

    def copy_kv(self, tile: Expr, stage) -> Stmt:
        return Seq([self.copy_k(tile, stage), self.copy_v(tile, stage)])

    def copy_k(self, tile: Expr, stage) -> Stmt:
        """cp.async of K's tile ``tile`` into its ``stage`` (K-major, swizzled panels)."""
        w, bc = self.w, self.cfg.block_kv
        stage = _i(stage) if isinstance(stage, int) else stage
        return self._copy(self.k_s, self._k_major_at(stage * _i(self.k_sz), bc), self.k,
                          lambda g: self.kv_row(g, w.head_dim, 1), tile * _i(bc), bc,
                          w.kv_len, w.head_dim)

    def copy_v(self, tile: Expr, stage) -> Stmt:
        """cp.async of V's tile ``tile`` into its ``stage`` (MN-major 64 x 64 panels)."""
        w, bc, vp = self.w, self.cfg.block_kv, self.lay.v_panels
        first = tile * _i(bc)
        stage = _i(stage) if isinstance(stage, int) else stage

        def v_at(r, ch):
            # [key chunk of 64][panel of 64 columns][64 keys][64 columns], swizzled rows
            panel = ch // _i(PANEL // COPY_ELEMS)
            col = floormod(ch, PANEL // COPY_ELEMS) * _i(COPY_ELEMS)
            chunk = r // _i(PANEL)
            return (stage * _i(self.v_sz) + (chunk * _i(vp) + panel) * _i(PANEL_ELEMS)
                    + swizzled(floormod(r, PANEL), col))
        return self._copy(self.v_s, v_at, self.v, lambda g: self.kv_row(g, w.v_dim, 2), first,
                          bc, w.kv_len, w.v_dim)

    # -- the warpgroup's products ---------------------------------------------------------
    def _fill(self, acc: Buffer, n: int) -> Stmt:
        key = IntrinKey("fill", acc=F32, n=n, scope="warpgroup")
        return _loop("fi", 64, lambda i: _loop(
            "fj", n, lambda j: Store(acc, [i * _i(n) + j], _f(0.0))), annotations=_intrin(key))

    def _wgmma(self, key: IntrinKey, c: Buffer, n: int, a: Buffer, a_base: Expr, b: Buffer,
               b_at) -> Stmt:
        """``C[i, j] += A[i, k] * B`` over a 64 x n x 16 step: A rows 64 elements apart
        from ``a_base``; B's element ``b_at(j, k)``."""
        def inner(i, j, kk):
            ci = i * _i(n) + j
            prod = Cast(F32, a[a_base + i * _i(PANEL) + kk]) * Cast(F32, b[b_at(j, kk)])
            return Store(c, [ci], c[ci] + prod)
        return _loop("wi", 64, lambda i: _loop("wj", n, lambda j: _loop(
            "wk", 16, lambda kk: inner(i, j, kk))), annotations=_intrin(key))

    def _batch(self, steps: list, wait: bool = True) -> Stmt:
        tail = [WgmmaSync("wait", 0)] if wait else []
        return Seq([WgmmaSync("fence"), *steps, WgmmaSync("commit"), *tail])

    def scores(self, stage: Expr, wait: bool = True) -> Stmt:
        """``S_acc = Q K^T`` of this warpgroup's 64 rows and the tile's keys (issued and
        committed; waited for unless ``wait`` is False)."""
        steps = self.scores_steps(stage, self.sf)
        return Seq([self._fill(self.sf, self.cfg.block_kv), self._batch(steps, wait)])

    def scores_steps(self, stage: Expr, sf: Buffer) -> list:
        """The wgmmas of ``sf += Q K^T`` (K's tile in ``stage``; not fenced, committed or
        waited for)."""
        bc, br = self.cfg.block_kv, self.cfg.block_q
        steps = []
        for kk in range(self.w.head_dim // 16):
            p, off = divmod(kk * 16, PANEL)
            a_base = _i(p * br * PANEL + off) + self.ty * _i(64 * PANEL)
            k_base = stage * _i(self.k_sz) + _i(p * bc * PANEL + off)
            steps.append(self._wgmma(self.k_s_mma, sf, bc, self.q_s, a_base, self.k_s,
                                     lambda j, k, kb=k_base: kb + j * _i(PANEL) + k))
        return steps

    def v_at(self, stage: Expr, kk: int):
        """``b_at(j, k)``: where element ``(key 16 kk + k, column j)`` of the V tile in
        ``stage`` lies (``[key chunk of 64][panel of 64 columns][64 keys][64 columns]``),
        the B of ``P V``'s ``kk``-th wgmma."""
        ev, vp = self.w.v_dim, self.lay.v_panels
        p, off = divmod(kk * 16, PANEL)
        v_base = stage * _i(self.v_sz) + _i(p * vp * PANEL_ELEMS + off * PANEL)

        def b_at(j, k):
            col = j if ev == PANEL else floormod(j, PANEL) + floordiv(j, PANEL) * _i(
                PANEL_ELEMS)
            return v_base + k * _i(PANEL) + col
        return b_at

    def pv(self, stage: Expr, wait: bool = True) -> Stmt:
        """``O_acc += P V`` of this warpgroup's rows."""
        ev, bc, br = self.w.v_dim, self.cfg.block_kv, self.cfg.block_q
        steps = []
        for kk in range(bc // 16):
            p, off = divmod(kk * 16, PANEL)
            a_base = _i(p * br * PANEL + off) + self.ty * _i(64 * PANEL)
            steps.append(self._wgmma(self.k_o_mma, self.of, ev, self.p_s, a_base, self.v_s,
                                     self.v_at(stage, kk)))
        return self._batch(steps, wait)

    def _store_acc(self, acc: Buffer, n: int, dst: Buffer, ld: int, first: int = 0,
                   cols: int | None = None) -> Stmt:
        """The warpgroup's 64 x n accumulator (its columns ``first ..`` ``first + cols``)
        to its rows of the float32 ``dst``, from column 0."""
        row = self.ty * _i(64)
        cols = n if cols is None else cols

        def tile(t):
            return Seq([_loop("si", 64, lambda i: _loop("sj", 8, lambda j: Store(
                dst, [(row + i) * _i(ld) + _i(8 * t - first) + j],
                acc[i * _i(n) + _i(8 * t) + j])), annotations=_intrin(self.k_store))])
        return Seq([tile(t) for t in range(first // 8, (first + cols) // 8)])

    # -- rows -----------------------------------------------------------------------------
    def _rows(self, fn) -> Stmt:
        """``fn(row in block, col)`` over this warpgroup's 64 rows x v_dim."""
        ev = self.w.v_dim
        per = 64 * ev // WG

        def body(it):
            def lane(tx):
                e = it * _i(WG) + tx
                return fn(self.ty * _i(64) + e // _i(ev), e % _i(ev))
            return self.threads(lane)
        return _loop("re", per, body)

    def _accumulate_output(self, alpha: bool) -> Stmt:
        """``O_s += O_acc`` (``alpha``: ``O_s = (O_s + O_acc) * alpha``), through ``S_s``
        (as wide as the key tile: :func:`~.knobs_wgmma.output_chunk` columns of
        ``O_acc`` at a time): each thread stores its accumulator elements of a chunk and
        adds, scales, the elements it stored itself (no barrier)."""
        ev, cw = self.w.v_dim, output_chunk(self.w, self.cfg)

        def chunk(k):
            def add(i, gr, c, slot):
                at = self.o_at(gr, _i(k * cw) + c)
                total = self.o_s[at] + self.s_s[self.s_at(gr, c)]
                return Store(self.o_s, [at], total * self.alpha_r[i] if alpha else total)
            return Seq([
                self._store_acc(self.of, ev, self.s_s, self.lay.s_ld, k * cw, cw),
                self.warp_lanes(lambda lane, warp: self.own_elements(lane, warp, cw, add))])
        return Seq([chunk(k) for k in range(ev // cw)])

    def flush(self) -> Stmt:
        """``O_s = (O_s + O_acc) * alpha`` row by row, then ``O_acc = 0``: each thread
        adds and scales the elements it stored itself (no barrier)."""
        return Seq([self._accumulate_output(True), self._fill(self.of, self.w.v_dim)])

    def epilogue(self) -> Stmt:
        w = self.w

        def store(gr, c):
            qi = self.row0() + gr
            return If(qi < _i(w.q_len), Store(self.out, [self.out_at(qi, c)], Cast(
                w.dtype, self.o_s[self.o_at(gr, c)] * self.r_s[gr])))
        # each thread stores into S_s the elements it last read there and adds them to
        # O_s (no barrier before); the barrier after publishes O_s and the inverse sums to
        # the rows' threads
        return Seq([self._accumulate_output(False), self.inverse_sums(), Barrier(),
                    self._rows(store)])

    # -- what the forms differ in (kernel_wgmma_regs.py keeps the scores in registers) ----
    @property
    def shared_buffers(self) -> tuple:
        """The shared buffers, innermost allocation first."""
        return (self.w_s, self.r_s, self.o_s, self.s_s, self.p_s, self.v_s, self.k_s,
                self.q_s)

    @property
    def register_fragments(self) -> tuple:
        """The warpgroup's accumulators (allocated per warpgroup)."""
        return (self.of, self.sf)

    def scores_ready(self) -> Stmt | None:
        """What follows ``Q K^T``'s wait before the softmax: the accumulators stored to
        the float32 scores' tile (no barrier: each thread reads what it stored)."""
        return self._store_acc(self.sf, self.cfg.block_kv, self.s_s, self.lay.s_ld)

    def publish_p(self) -> list:
        """With two stages, between the softmax and ``P V``: the probabilities' generic
        writes fenced for the async proxy and published to the warpgroup (a barrier;
        the votes too)."""
        return [WgmmaSync("fence_proxy_async"), Barrier()]

    def rescale_output(self, tiles: int) -> Stmt | None:
        """After the barrier that publishes P and the votes: the flush where some row of
        the warpgroup moved its maximum (none with one key tile)."""
        return If(self.any_vote(), self.flush()) if tiles > 1 else None

    def zero_output(self) -> Stmt | None:
        """Before the loop: the float32 output tile zeroed."""
        o_ld = self.lay.o_ld
        return self._rows(lambda gr, c: Store(self.o_s, [gr * _i(o_ld) + c], _f(0.0)))

    # -- the loop over key tiles ----------------------------------------------------------
    def key_loop(self) -> Stmt:
        w, cfg = self.w, self.cfg
        total = -(-w.kv_len // cfg.block_kv)
        needed = self.kv_tiles_needed()
        publish = [AsyncWait(0), WgmmaSync("fence_proxy_async"), Barrier()]

        if cfg.stages == 1:
            return self.key_loop_one_stage()

        def step(j, parity=None):
            # parity: the tile's stage where the loop knows it (two tiles an iteration),
            # so the copies' and the descriptors' addresses are constants of the step
            # two stages: wait for this tile, then (every warpgroup past the barrier, so
            # done with the tile before, which used the other stage) fetch the next one
            sv = Var("stage")
            nxt = j + _i(1)
            fetch = self.copy_kv(nxt, floormod(nxt, 2) if parity is None else _i(1 - parity))
            if isinstance(needed, int) and needed == 1:
                fetch = None  # the one tile: no next one (an empty copy group)
            else:
                fetch = If(nxt < (_i(needed) if isinstance(needed, int) else needed), fetch)
            head = [*publish, fetch, AsyncCommit()]
            stage_value = floormod(j, 2) if parity is None else _i(parity)
            body = Seq([
                *head,
                self.scores(sv),
                # no barrier before the softmax: each thread reads the scores it stored
                self.scores_ready(),
                self.softmax(j), *self.publish_p(),
                self.rescale_output(total),
                self.pv(sv),
            ])
            body = Let(sv, stage_value, body)
            if isinstance(needed, int):
                return body if j_known_inside(j, parity) else If(j < _i(needed), body)
            return If(j < needed, body)

        def j_known_inside(j, parity) -> bool:
            # the loop's tiles are all needed; the second of a pair only where the tile
            # count is even
            return parity is None or parity == 0 or total % 2 == 0

        if cfg.stages == 2 and total > 1:
            return _loop("kv2", -(-total // 2), lambda jj: Seq([
                step(jj * _i(2), 0), step(jj * _i(2) + _i(1), 1)]))
        return _loop("kv", total, step)

    def key_loop_one_stage(self) -> Stmt:
        """One K/V stage, the two tiles copied apart so that each copy overlaps work: K's
        next tile once every warpgroup is past its ``Q K^T`` (the barrier that publishes
        P), during ``P V``; V's next tile once every warpgroup is past its ``P V``, during
        the next ``Q K^T`` and softmax. Each is a copy group of its own: a step waits for
        all but the newest group (K) before ``Q K^T`` and for all (V) before the barrier
        that publishes P."""
        w, cfg = self.w, self.cfg
        total = -(-w.kv_len // cfg.block_kv)
        needed = self.kv_tiles_needed()
        need = _i(needed) if isinstance(needed, int) else needed
        stage = _i(0)

        def step(j):
            nxt = j + _i(1)
            more = nxt < need

            def fetch(copy):
                # an empty group where there is no next tile keeps the waits' counting
                if isinstance(needed, int) and needed == 1:
                    return AsyncCommit()
                return Seq([If(more, copy(nxt, 0)), AsyncCommit()])
            body = Seq([
                AsyncWait(1), WgmmaSync("fence_proxy_async"), Barrier(),
                self.scores(stage),
                # no barrier before the softmax: each thread reads the scores it stored
                self.scores_ready(),
                self.softmax(j),
                AsyncWait(0), WgmmaSync("fence_proxy_async"), Barrier(),
                fetch(self.copy_k),
                self.rescale_output(total),
                self.pv(stage), Barrier(),
                fetch(self.copy_v),
            ])
            if isinstance(needed, int):
                return body
            return If(j < needed, body)
        return _loop("kv", total, step)

    def key_loop_overlapped(self) -> Stmt:
        """Three K/V stages: the next tile's ``Q K^T`` runs on the tensor cores while the
        threads compute this tile's softmax (from the scores' shared copy, so one
        accumulator serves), then ``P V``; one wait covers both. The tile after next is
        copied while this one is used (its stage held the tile before, done with)."""
        w, cfg = self.w, self.cfg
        total = -(-w.kv_len // cfg.block_kv)
        needed = self.kv_tiles_needed()
        need = _i(needed) if isinstance(needed, int) else needed

        def step(j, phase=None):
            # phase: j mod 3 where the loop knows it (three tiles an iteration), so the
            # stages, and with them the copies' and descriptors' addresses, are constants
            s_next, s_this = Var("stage_next"), Var("stage")
            nxt, after = j + _i(1), j + _i(2)
            has_next = nxt < need
            # the flush's use of S_s is each thread's own elements, as the scores' store
            flush = If(self.any_vote(), self.flush()) if total > 1 else None
            body = Seq([
                AsyncWait(0), WgmmaSync("fence_proxy_async"), Barrier(),
                If(after < need, Seq([self.copy_kv(after, floormod(after, 3) if phase is None
                                                   else _i((phase + 2) % 3)),
                                      AsyncCommit()])),
                If(has_next, self.scores(s_next, wait=False)),
                self.softmax(j), WgmmaSync("fence_proxy_async"), Barrier(),
                flush,
                self.pv(s_this, wait=False), WgmmaSync("wait", 0),
                If(has_next, self._store_acc(self.sf, cfg.block_kv, self.s_s,
                                             self.lay.s_ld)),
            ])
            this, after_this = ((floormod(j, 3), floormod(nxt, 3)) if phase is None
                                else (_i(phase), _i((phase + 1) % 3)))
            body = Let(s_this, this, Let(s_next, after_this, body))
            if isinstance(needed, int):
                # a tile of the last iteration past the count is skipped
                return body if phase in (None, 0) or total % 3 == 0 else If(
                    j < _i(needed), body)
            return If(j < needed, body)
        # the first tile's scores before the loop
        first = Seq([AsyncWait(1), WgmmaSync("fence_proxy_async"), Barrier(),
                     self.scores(_i(0)),
                     self._store_acc(self.sf, cfg.block_kv, self.s_s, self.lay.s_ld)])
        if total > 2:
            return Seq([first, _loop("kv3", -(-total // 3), lambda jj: Seq([
                step(jj * _i(3) + _i(r), r) for r in range(3)]))])
        return Seq([first, _loop("kv", total, step)])

    def body(self) -> Stmt:
        cfg = self.cfg
        init = self.init_rows()
        zero_o = self.zero_output()
        per_wg: Stmt = Seq([init, zero_o, *self.prologue(), self._fill(self.of, self.w.v_dim),
                            self.main_loop(), self.epilogue()])
        for buf in (*self.row_buffers, *self.register_fragments):
            per_wg = Alloc(buf, per_wg)
        s: Stmt = _loop_var(self.ty, cfg.warpgroups, per_wg, "threadIdx.y")
        lay = self.lay
        for buf in self.shared_buffers:
            s = Alloc(buf, s, dyn_offset=lay.offsets[buf.name])
        s = _loop_var(self.bz, self.w.batch, s, "blockIdx.z")
        s = _loop_var(self.by, self.w.heads, s, "blockIdx.y")
        return _loop_var(self.bx, -(-self.w.q_len // cfg.block_q), s, "blockIdx.x")

    def main_loop(self) -> Stmt:
        """The loop over key tiles (by stages)."""
        return self.key_loop_overlapped() if self.cfg.stages == 3 else self.key_loop()

    def prologue(self) -> list:
        """Before the loop: Q's copy and the first K/V tiles' (by stages)."""
        cfg = self.cfg
        prologue = [self.copy_q(), AsyncCommit()]
        if cfg.stages == 1:
            # K's and V's first tiles, one copy group each (key_loop_one_stage)
            prologue += [self.copy_k(_i(0), 0), AsyncCommit(), self.copy_v(_i(0), 0),
                         AsyncCommit()]
        if cfg.stages >= 2:
            prologue += [self.copy_kv(_i(0), 0), AsyncCommit()]
        if cfg.stages == 3:
            # the second tile in flight too (an empty group where there is none: the
            # first wait, for all but one group, then covers Q and the first tile)
            second = self.copy_kv(_i(1), 1)
            needed = self.kv_tiles_needed()
            if not isinstance(needed, int):
                second = If(_i(1) < needed, second)
            elif needed < 2:
                second = None
            prologue += [second, AsyncCommit()]
        return prologue


def _const(e: Expr) -> int | None:
    """The value of ``e`` where it simplifies to an integer constant, else None."""
    from ....ir.simplify import simplify

    s = simplify(e)
    return s.value if isinstance(s, IntImm) else None
