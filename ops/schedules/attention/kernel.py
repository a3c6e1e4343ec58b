"""The fused attention kernel, built as device IR (one kernel and its host function).

One block per (query tile of ``block_q`` rows, query head, batch); warp ``w`` of the block
owns query rows ``16 w .. 16 w + 15``. The block loops over the keys in tiles of
``block_kv``:

1. ``cp.async`` copies the K and V tiles into shared memory (zero-filled past the keys;
   with 2 stages the next tile's copies run while this one is used);
2. each warp computes its 16 x ``block_kv`` scores ``Q K^T`` with ``mma.sync m16n8k16``
   (Q's fragments loaded once by ``ldmatrix``, K's by ``ldmatrix`` each step) in float32
   and stores them to shared memory;
3. two lanes per row scale and mask the scores (keys past the end, the causal rule, a bool
   or additive mask), take the tile's row maximum (one warp shuffle joins the two lanes),
   update the running maximum ``m`` and sum ``l`` they hold in registers (float32), and write
   the probabilities ``exp(s - m)`` in the input dtype for the second product;
4. the running maximum moves only where the tile's maximum exceeds it by more than
   ``RESCALE_THRESHOLD`` (or where it was minus infinity: the row's output is still zero),
   as FlashAttention-4 does: otherwise the probabilities stay below
   ``exp(RESCALE_THRESHOLD)``, which float32 sums and 16-bit probabilities hold with the
   same relative precision as values below 1, and the output needs no rescaling. Where
   some row of the block moved (a warp vote by shuffles, then one flag per warp in shared
   memory, so the decision is the block's), the output accumulators are multiplied by
   ``exp(m_old - m_new)``: fragments are accumulated by tensor intrinsics only, so they go
   through a float32 tile in shared memory, where the row's threads scale them, and come
   back with the accumulator load;
5. ``O += P V`` with ``mma.sync`` (V's fragments by ``ldmatrix .trans``).

At the end each row is divided by its sum (a row with every score masked gives zeros) and
stored in the input dtype. Causal blocks stop at the tile holding their last row's
diagonal. The IR is the same the lowering pipeline produces (flat buffers, thread loops,
tensorized nests), so the verifier, the simulator and the PTX backend take it as is.
"""

from __future__ import annotations

from ....ir import dtype as dt
from ....ir.expr import Cast, Expr, IntImm, Var, call, emax, emin, select
from ....ir.intrin.keys import IntrinKey
from ....ir.stmt import (
    Alloc,
    AsyncCommit,
    AsyncCopy,
    AsyncWait,
    Barrier,
    Buffer,
    If,
    Let,
    Seq,
    Stmt,
    Store,
)
from .builders import (
    F32,
    LOG2E,
    NEG_INF,
    RESCALE_THRESHOLD,
    _f,
    _i,
    _intrin,
    _lanes,
    _loop,
    _loop_var,
    _operand_buffers,
    _scaled_mask,
    _var,
)
from .knobs import COPY_ELEMS, MMA_ROWS, AttentionConfig, shared_layout
from .lanes import quad_reduce, warp_any
from .workload import AttentionWorkload


class _Kernel:
    """Builds the kernel body for one workload and configuration."""

    def __init__(self, w: AttentionWorkload, cfg: AttentionConfig):
        self.w, self.cfg = w, cfg
        self.lay = shared_layout(w, cfg)
        ab = w.dtype
        self.k_mma = IntrinKey("mma", ab=ab, acc=F32)
        self.k_mma_kn = IntrinKey("mma", ab=ab, acc=F32, b_kn=True)
        self.k_lda = IntrinKey("ldmatrix", "A", ab=ab, num=4)
        self.k_ldb = IntrinKey("ldmatrix", "B", ab=ab, num=4)
        self.k_ldb_kn = IntrinKey("ldmatrix", "B", ab=ab, b_kn=True, num=4)
        self.k_fill = IntrinKey("fill", acc=F32)
        self.k_store = IntrinKey("store", "C", acc=F32)
        self.k_load = IntrinKey("load", "C", acc=F32)
        e, ev = w.head_dim, w.v_dim
        self.q, self.k, self.v = _operand_buffers(w)
        self.mask = None
        if w.mask is not None:
            n = 1
            for s in w.mask.shape:
                n *= s
            self.mask = Buffer("mask", w.mask.dtype, [n])
        self.out = Buffer("out", ab, [w.batch * w.heads * w.q_len * ev])
        br, bc, lay = cfg.block_q, cfg.block_kv, self.lay
        # Q's tile is dead once its fragments are loaded, the probabilities are first written
        # after the barriers of the first key tile: one buffer; so are the scores and the
        # output tile (used while the scores are dead; one row length, so that element
        # (row, col) of both is the same thread's)
        self.q_s = Buffer("QP_s", ab, [br * max(lay.q_ld, lay.p_ld)], "shared")
        self.p_s = self.q_s
        self.k_s = Buffer("K_s", ab, [cfg.stages * bc * lay.k_ld], "shared")
        self.v_s = Buffer("V_s", ab, [cfg.stages * bc * lay.v_ld], "shared")
        self.s_s = Buffer("SO_s", F32, [br * lay.s_ld], "shared")
        self.o_s = self.s_s
        self.r_s = Buffer("R_s", F32, [br], "shared")
        self.w_s = Buffer("W_s", F32, [cfg.warps], "shared")
        self.qf = Buffer("Q_frag", ab, [MMA_ROWS * e], "warp")
        self.kf = Buffer("K_frag", ab, [16 * 16], "warp")
        self.sf = Buffer("S_frag", F32, [MMA_ROWS * bc], "warp")
        self.pf = Buffer("P_frag", ab, [16 * 16], "warp")
        self.vf = Buffer("V_frag", ab, [16 * 16], "warp")
        self.of = Buffer("O_frag", F32, [MMA_ROWS * ev], "warp")
        self._row_registers()
        self.bx, self.by, self.bz, self.ty = (_var(n) for n in ("bq", "bh", "bb", "warp"))

    def _row_registers(self) -> None:
        """A thread's registers for its two rows of the softmax (:meth:`own_elements`):
        running maximum and sum, the maximum the probabilities use, the rescale factor, a
        partial maximum or sum; the masked scores of the tile; the thread's vote."""
        self.m_r = Buffer("row_max", F32, [2], "local")
        self.l_r = Buffer("row_sum", F32, [2], "local")
        self.m_use = Buffer("row_max_use", F32, [2], "local")
        self.alpha_r = Buffer("row_alpha", F32, [2], "local")
        self.acc = Buffer("row_acc", F32, [2], "local")
        self.sc = Buffer("row_scores", F32, [self.cfg.block_kv // 2], "local")
        self.vote_r = Buffer("row_vote", F32, [1], "local")

    @property
    def row_buffers(self) -> tuple:
        return (self.m_r, self.l_r, self.m_use, self.alpha_r, self.acc, self.sc, self.vote_r)

    @property
    def block(self) -> tuple:
        """The launch's block: 32 lanes x the warps."""
        return (32, self.cfg.warps, 1)

    @property
    def kernel_attrs(self) -> dict:
        """Further attributes of the kernel function (none here)."""
        return {}

    # -- addressing ---------------------------------------------------------------------
    @property
    def kv_head(self) -> Expr:
        g = self.w.group
        return self.by if g == 1 else self.by // _i(g)

    def row0(self) -> Expr:
        """The block's first query row."""
        return self.bx * _i(self.cfg.block_q)

    def kv_tiles_needed(self) -> Expr | int:
        """Key tiles this block visits: all, or under the causal mask those up to the
        diagonal of its last row."""
        w, bc = self.w, self.cfg.block_kv
        total = -(-w.kv_len // bc)
        if not w.causal:
            return total
        last = emin(self.row0() + _i(self.cfg.block_q), _i(w.q_len))  # rows < last
        keys = emin(last, _i(w.kv_len))
        return (keys + _i(bc - 1)) // _i(bc)

    # -- copies -------------------------------------------------------------------------
    def _copy_rows(self, dst: Buffer, dst_base: Expr, dst_ld: int, src: Buffer,
                   src_row: callable, first: Expr, rows: int, limit: int, cols: int) -> Stmt:
        """cp.async ``rows`` rows of ``cols`` elements (row ``first + r`` of ``src``, read
        where below ``limit``, zeros past it) into ``dst`` rows ``dst_ld`` apart. Where
        every tile is whole (``limit`` a multiple of ``rows``; the callers copy no tile
        past the last), no clamp and no zero fill."""
        per_row = cols // COPY_ELEMS
        total = rows * per_row
        threads = self.cfg.threads
        steps = -(-total // threads)

        def body(it):
            def lane(tx):
                c = it * _i(threads) + self.ty * _i(32) + tx
                r, ch = c // _i(per_row), c % _i(per_row)
                g = first + r
                dst_i = dst_base + r * _i(dst_ld) + ch * _i(COPY_ELEMS)
                nbytes = COPY_ELEMS * dt.nbytes(dst.dtype)
                if limit % rows == 0:
                    cp = AsyncCopy(dst, dst_i, src, src_row(g) + ch * _i(COPY_ELEMS), nbytes)
                else:
                    inside = g < _i(limit)
                    src_i = src_row(emin(g, _i(limit - 1))) + ch * _i(COPY_ELEMS)
                    cp = AsyncCopy(dst, dst_i, src, src_i, nbytes,
                                   select(inside, IntImm(nbytes, "int32"),
                                          IntImm(0, "int32")))
                return cp if total % threads == 0 else If(c < _i(total), cp)
            return _lanes(lane)

        return _loop("cp", steps, body, "unroll" if steps <= 8 else "serial")

    def q_row(self, g: Expr) -> Expr:
        """Where query row ``g`` of the block's head starts in ``q`` (the layout's
        strides, or q's view)."""
        w = self.w
        return w.operand_start(0, self.bz, self.by, g, _i(w.heads), _i(w.q_len),
                               _i(w.head_dim))

    def kv_row(self, g: Expr, dim: int, which: int) -> Expr:
        """Where key row ``g`` of the block's key head starts in ``k`` (``which`` 1,
        ``dim`` the head dim) or ``v`` (2, the value dim)."""
        w = self.w
        return w.operand_start(which, self.bz, self.kv_head, g, _i(w.kv_heads), _i(w.kv_len),
                               _i(dim))

    def out_at(self, qi: Expr, c: Expr) -> Expr:
        """Where element ``c`` of the block's output row ``qi`` lies in ``out``."""
        w = self.w
        return w.row_start(self.bz, self.by, qi, _i(w.heads), _i(w.q_len), _i(w.v_dim)) + c

    def copy_q(self) -> Stmt:
        w = self.w
        return self._copy_rows(self.q_s, _i(0), self.lay.q_ld, self.q, self.q_row,
                               self.row0(), self.cfg.block_q, w.q_len, w.head_dim)

    def copy_kv(self, tile: Expr, stage: Expr | int) -> Stmt:
        w, bc, lay = self.w, self.cfg.block_kv, self.lay
        first = tile * _i(bc)
        stage = _i(stage) if isinstance(stage, int) else stage
        k = self._copy_rows(self.k_s, stage * _i(bc * lay.k_ld), lay.k_ld, self.k,
                            lambda g: self.kv_row(g, w.head_dim, 1), first, bc, w.kv_len,
                            w.head_dim)
        v = self._copy_rows(self.v_s, stage * _i(bc * lay.v_ld), lay.v_ld, self.v,
                            lambda g: self.kv_row(g, w.v_dim, 2), first, bc, w.kv_len,
                            w.v_dim)
        return Seq([k, v])

    # -- tensor-core pieces -------------------------------------------------------------
    def _fill(self, frag: Buffer, ld: int) -> Stmt:
        def tile(nt):
            return _loop("fi", 16, lambda i: _loop(
                "fj", 8, lambda j: Store(frag, [i * _i(ld) + nt * _i(8) + j], _f(0.0))),
                annotations=_intrin(self.k_fill))
        return _loop("ft", ld // 8, tile, "unroll")

    def _ldmatrix(self, frag: Buffer, frag_base: Expr, frag_ld: int, src: Buffer,
                  src_base: Expr, src_ld: int, key: IntrinKey) -> Stmt:
        return _loop("lr", 16, lambda r: _loop(
            "lc", 16, lambda c: Store(frag, [frag_base + r * _i(frag_ld) + c],
                                      src[src_base + r * _i(src_ld) + c])),
            annotations=_intrin(key))

    def _mma(self, c: Buffer, c_base: Expr, c_ld: int, a: Buffer, a_base: Expr, a_ld: int,
             b: Buffer, b_base: Expr, b_kn: bool) -> Stmt:
        """One m16n8k16: ``C[i, j] += A[i, k] * B`` (B ``[n, k]`` rows of 16, or ``[k, n]``
        rows of 16 with ``b_kn``)."""
        def inner(i, j, kk):
            ci = c_base + i * _i(c_ld) + j
            bi = b_base + (kk * _i(16) + j if b_kn else j * _i(16) + kk)
            prod = Cast(F32, a[a_base + i * _i(a_ld) + kk]) * Cast(F32, b[bi])
            return Store(c, [ci], c[ci] + prod)
        return _loop("mi", 16, lambda i: _loop("mj", 8, lambda j: _loop(
            "mk", 16, lambda kk: inner(i, j, kk))),
            annotations=_intrin(self.k_mma_kn if b_kn else self.k_mma))

    def _frag_to_shared(self, frag: Buffer, ld: int, dst: Buffer, dst_ld: int) -> Stmt:
        row = self.ty * _i(MMA_ROWS)

        def tile(nt):
            return _loop("si", 16, lambda i: _loop("sj", 8, lambda j: Store(
                dst, [(row + i) * _i(dst_ld) + nt * _i(8) + j],
                frag[i * _i(ld) + nt * _i(8) + j])), annotations=_intrin(self.k_store))
        return _loop("st", ld // 8, tile, "unroll")

    def _shared_to_frag(self, frag: Buffer, ld: int, src: Buffer, src_ld: int) -> Stmt:
        row = self.ty * _i(MMA_ROWS)

        def tile(nt):
            return _loop("ai", 16, lambda i: _loop("aj", 8, lambda j: Store(
                frag, [i * _i(ld) + nt * _i(8) + j],
                src[(row + i) * _i(src_ld) + nt * _i(8) + j])), annotations=_intrin(self.k_load))
        return _loop("at", ld // 8, tile, "unroll")

    def load_q_frag(self) -> Stmt:
        e, lay = self.w.head_dim, self.lay
        row = self.ty * _i(MMA_ROWS)
        return _loop("qk", e // 16, lambda kk: self._ldmatrix(
            self.qf, kk * _i(16), e, self.q_s, row * _i(lay.q_ld) + kk * _i(16), lay.q_ld,
            self.k_lda), "unroll")

    def scores(self, stage: Expr) -> Stmt:
        """``S_frag = Q K^T`` of this warp's rows and the tile's keys."""
        w, bc, lay = self.w, self.cfg.block_kv, self.lay
        e = w.head_dim
        k_base = stage * _i(bc * lay.k_ld)

        def step(kk):
            def pair(np_):
                ld = self._ldmatrix(self.kf, _i(0), 16, self.k_s,
                                    k_base + np_ * _i(16 * lay.k_ld) + kk * _i(16), lay.k_ld,
                                    self.k_ldb)
                mmas = [self._mma(self.sf, np_ * _i(16) + _i(8 * t), bc, self.qf,
                                  kk * _i(16), e, self.kf, _i(128 * t), False)
                        for t in (0, 1)]
                return Seq([ld, *mmas])
            return _loop("sn", bc // 16, pair, "unroll")

        return Seq([self._fill(self.sf, bc), _loop("sk", e // 16, step, "unroll")])

    def pv(self, stage: Expr) -> Stmt:
        """``O_frag += P V`` of this warp's rows."""
        w, bc, lay = self.w, self.cfg.block_kv, self.lay
        ev = w.v_dim
        row = self.ty * _i(MMA_ROWS)
        v_base = stage * _i(bc * lay.v_ld)

        def step(kk):
            lda = self._ldmatrix(self.pf, _i(0), 16, self.p_s,
                                 row * _i(lay.p_ld) + kk * _i(16), lay.p_ld, self.k_lda)

            def pair(np_):
                ld = self._ldmatrix(self.vf, _i(0), 16, self.v_s,
                                    v_base + kk * _i(16 * lay.v_ld) + np_ * _i(16), lay.v_ld,
                                    self.k_ldb_kn)
                mmas = [self._mma(self.of, np_ * _i(16) + _i(8 * t), ev, self.pf, _i(0), 16,
                                  self.vf, _i(8 * t), True) for t in (0, 1)]
                return Seq([ld, *mmas])
            return Seq([lda, _loop("pn", ev // 16, pair, "unroll")])

        return _loop("pk", bc // 16, step, "unroll")

    # -- the rows' softmax --------------------------------------------------------------
    def _scaled_score(self, s: Expr, qi: Expr, kj: Expr, unit: float, edge: bool,
                      mask2: Expr | None = None):
        """``(score, keep)`` of the raw product ``s`` of query row ``qi`` and key ``kj``:
        scaled to base 2 unless the scale was folded elsewhere (``unit`` 1.0 scales here),
        the additive mask added; ``keep`` the condition the score survives (the keys'
        end and the causal diagonal where ``edge``, a boolean mask), or None. ``mask2`` is
        the score's :meth:`mask_term` where the caller took it once for several rows."""
        w = self.w
        keep = None
        if edge:
            keep = kj < _i(w.kv_len)
            if w.causal:
                keep = keep & (kj <= qi)
        if w.mask is not None and w.mask.additive:
            if mask2 is None:
                mask2 = self.mask_term(qi, kj, edge)
            # one fma a score: s (scale log2 e) + m log2 e (unit is 1.0 with an additive
            # mask, score_units)
            return call("fma", s, _f(w.softmax_scale * LOG2E), mask2), keep
        if unit == 1.0:
            s = s * _f(w.softmax_scale * LOG2E)
        m = self._mask_value(qi, kj, edge)
        if m is not None:
            keep = m if keep is None else keep & m
        return s, keep

    def mask_term(self, qi: Expr, kj: Expr, edge: bool) -> Expr | None:
        """The additive mask's element of score ``(qi, kj)`` in base 2
        (:func:`~.builders._scaled_mask`), or None without an additive mask. It depends on
        ``qi`` only where the mask has rows (:meth:`mask_per_row`): the kernels take it
        once for the rows a thread holds."""
        w = self.w
        if w.mask is None or not w.mask.additive:
            return None
        m = self._mask_value(qi, kj, edge)
        return _scaled_mask(m if m.dtype == F32 else Cast(F32, m), w.mask.dtype)

    def mask_per_row(self) -> bool:
        """Whether the mask's element differs between query rows (its shape has rows:
        not ``[.., 1, S]``)."""
        w = self.w
        shape = tuple(w.mask.shape) if w.mask is not None else ()
        return len(shape) >= 2 and shape[-2] != 1

    def _mask_value(self, qi: Expr, kj: Expr, edge: bool = True) -> Expr | None:
        """The mask's element of score ``(qi, kj)``: indices clamped into the tensor where
        they may pass its end (the keys on an ``edge`` tile only: the others lie inside;
        the rows where the query tiles do not divide them), so that the loads of adjacent
        keys are adjacent addresses."""
        w = self.w
        if w.mask is None:
            return None
        row = qi if w.q_len % self.cfg.block_q == 0 else emin(qi, _i(w.q_len - 1))
        col = emin(kj, _i(w.kv_len - 1)) if edge else kj
        full = (self.bz, self.by, row, col)
        shape = tuple(w.mask.shape)
        lead = 4 - len(shape)
        idx, stride = _i(0), 1
        for d in reversed(range(len(shape))):
            if shape[d] != 1:
                idx = idx + full[lead + d] * _i(stride)
            stride *= shape[d]
        return self.mask[idx]

    def warp_lanes(self, fn) -> Stmt:
        """``fn(lane, warp)`` on every thread: the lane in its warp and the warp's index in
        the block (warps on ``threadIdx.y``, lanes on ``threadIdx.x``)."""
        return _lanes(lambda tx: fn(tx, self.ty))

    def p_at(self, gr: Expr, c: Expr) -> Expr:
        """Where probability ``(row gr of the block, key c of the tile)`` lies in ``P_s``."""
        return gr * _i(self.lay.p_ld) + c

    def s_at(self, gr: Expr, c: Expr) -> Expr:
        """Where score ``(row gr of the block, key c of the tile)`` lies in the float32
        tile (also the output's element ``(gr, c)`` there: one row length for both)."""
        return gr * _i(self.lay.s_ld) + c

    def o_at(self, gr: Expr, c: Expr) -> Expr:
        """Where output element ``(row gr, column c)`` lies in the float32 output tile."""
        return gr * _i(self.lay.o_ld) + c

    def own_elements(self, lane: Expr, warp: Expr, cols: int, fn) -> Stmt:
        """``fn(i, gr, c, slot)`` over the elements of a ``16 x cols`` accumulator tile of
        this warp that the thread itself holds (and stores, and loads back): rows ``lane /
        4`` and ``+ 8`` (``i`` 0 and 1), columns ``8 t + 2 (lane % 4)`` and ``+ 1``, as the
        accumulator layout of ``mma.sync`` and ``wgmma`` has it; ``slot`` numbers them
        ``0 .. cols / 2 - 1``. A thread reading only what it wrote itself needs no
        barrier, and a warp's accesses fall on 8 rows x 8 consecutive words: one pass of
        the 32 banks where rows lie 8 words (mod 32) apart (``s_ld`` / 8 odd)."""
        per_row = cols // 4
        g, q = lane // _i(4), lane % _i(4)

        def row(i):
            gr = warp * _i(MMA_ROWS) + g + i * _i(8)
            return _loop("ot", cols // 8, lambda t: _loop(
                "oe", 2, lambda e: fn(i, gr, t * _i(8) + q * _i(2) + e,
                                      i * _i(per_row) + t * _i(2) + e), "unroll"), "unroll")
        return _loop("oi", 2, row, "unroll")

    def own_by_column(self, lane: Expr, warp: Expr, cols: int, column, fn) -> Stmt:
        """``fn(i, gr, c, slot, v)`` over the elements :meth:`own_elements` gives, columns
        outermost: ``v`` is ``column(c)``, bound once for the thread's two rows of column
        ``c`` (an additive mask's element where it has no rows)."""
        per_row = cols // 4
        g, q = lane // _i(4), lane % _i(4)

        def col(t, e):
            c = t * _i(8) + q * _i(2) + e
            mv = Var("mask2", F32)
            return Let(mv, column(c), _loop("oi", 2, lambda i: fn(
                i, warp * _i(MMA_ROWS) + g + i * _i(8), c, i * _i(per_row) + t * _i(2) + e,
                mv), "unroll"))
        return _loop("ot", cols // 8, lambda t: _loop("oe", 2, lambda e: col(t, e), "unroll"),
                     "unroll")

    def scores_by_column(self) -> bool:
        """Whether the softmax takes the mask's element once a column (an additive mask
        without rows: ``[.., 1, S]``)."""
        m = self.w.mask
        return m is not None and m.additive and not self.mask_per_row()

    def score_units(self) -> float:
        """The base-2 exponent of one unit of the values the softmax keeps (its masked
        scores, maxima and threshold): ``scale log2(e)`` where they are the raw products
        ``Q K^T`` (a positive scale and no additive mask: the maximum of the raw scores is
        that of the scaled ones), else 1 (the scores scaled, and the additive mask added,
        in base 2 as they are read)."""
        w = self.w
        if w.softmax_scale > 0 and not (w.mask is not None and w.mask.additive):
            return w.softmax_scale * LOG2E
        return 1.0

    def edge_tile(self, tile: Expr) -> Expr | None:
        """Whether key tile ``tile`` needs the masks of its position: it reaches past the
        keys (the last tile, where ``block_kv`` does not divide them) or, causal, past the
        block's first query row; None where no tile does. The others (under a causal mask
        all but the one or two tiles on the diagonal) keep every score."""
        w, bc = self.w, self.cfg.block_kv
        cond = None
        if w.kv_len % bc:
            cond = tile == _i(w.kv_len // bc)
        if w.causal:
            diag = tile * _i(bc) + _i(bc - 1) > self.row0()
            cond = diag if cond is None else cond | diag
        return cond

    def softmax(self, tile: Expr) -> Stmt:
        """The softmax of key tile ``tile`` (:meth:`tile_softmax`): with the masks of the
        keys' positions on the tiles that need them (:meth:`edge_tile`), without on the
        others (two compares and a select a score fewer)."""
        edge = self.edge_tile(tile)
        if edge is None:
            return self.tile_softmax(tile, False)
        return If(edge, self.tile_softmax(tile, True), self.tile_softmax(tile, False))

    def tile_softmax(self, tile: Expr, edge: bool) -> Stmt:
        """Mask this tile's scores (the keys past the end and the causal rule where
        ``edge``, a bool or additive mask always), move the running maxima, write the
        probabilities and the warp's vote for a rescaling. Each thread takes its own
        elements of the scores (:meth:`own_elements`: two rows, the 4 lanes of a quad
        share a row and join their maxima and sums with two shuffles), reads each once and
        keeps the masked scores in registers.

        The exponentials are base 2 (``ex2.approx``: one instruction a score), as
        FlashAttention computes them: ``exp(x - m) = 2^((x - m) log2 e)``. Where the
        softmax keeps the raw products (:meth:`score_units`), the scale and ``log2 e`` are
        one factor ``u`` and a probability is ``2^(s u - m u)``, one ``fma`` and one
        ``ex2`` with ``m u`` taken once a row; the running maxima and sums stay float32."""
        w, bc = self.w, self.cfg.block_kv
        unit = self.score_units()
        # RESCALE_THRESHOLD is in natural-log units: the same bound on the probabilities
        threshold = RESCALE_THRESHOLD * LOG2E / unit

        def lane(tx, warp):
            def score(i, gr, c, slot, mask2=None):
                qi = self.row0() + gr
                kj = tile * _i(bc) + c
                s, keep = self._scaled_score(self.s_s[self.s_at(gr, c)], qi, kj, unit, edge,
                                             mask2)
                sv = Var("score", F32)
                return Let(sv, s if keep is None else select(keep, s, NEG_INF), Seq([
                    Store(self.sc, [slot], sv),
                    Store(self.acc, [i], emax(self.acc[i], sv))]))

            def prob(i, gr, c, slot):
                p = Var("prob", F32)
                # m_use holds -(m u): 2^(s u - m u) is one fma and one ex2
                x = (self.sc[slot] + self.m_use[i] if unit == 1.0
                     else call("fma", self.sc[slot], _f(unit), self.m_use[i]))
                return Let(p, call("exp2", x), Seq([
                    Store(self.p_s, [self.p_at(gr, c)], Cast(w.dtype, p)),
                    Store(self.acc, [i], self.acc[i] + p)]))

            def row(i):
                names = ("tile_max", "max_old", "grow", "max_new", "max_use", "alpha")
                mt, m_old, grow, m_new, m_use, alpha = (
                    Var(n, "bool" if n == "grow" else F32) for n in names)
                # the maximum moves where the row had none yet (its output is zero) or the
                # tile's exceeds it by more than the threshold (then the output is rescaled)
                moves = (m_old == NEG_INF) | grow
                update = Seq([
                    Store(self.m_use, [i], -(m_use * _f(unit)) if unit != 1.0 else -m_use),
                    Store(self.alpha_r, [i], alpha),
                    Store(self.m_r, [i], m_new), Store(self.acc, [i], _f(0.0)),
                    Store(self.vote_r, [_i(0)], emax(self.vote_r[_i(0)],
                                                     select(grow, _f(1.0), _f(0.0)))),
                ])
                shift = m_old - m_new if unit == 1.0 else (m_old - m_new) * _f(unit)
                return quad_reduce(self.acc[i], emax, mt, Let(m_old, self.m_r[i], Let(
                    grow, (m_old != NEG_INF) & (mt > m_old + _f(threshold)),
                    Let(m_new, select(moves, emax(m_old, mt), m_old),
                        Let(m_use, select(m_new == NEG_INF, _f(0.0), m_new),
                            Let(alpha, select(grow, call("exp2", shift), _f(1.0)),
                                update))))))

            def row_sum(i):
                tot = Var("tot", F32)
                return quad_reduce(self.acc[i], lambda a, b: a + b, tot, Store(
                    self.l_r, [i], self.l_r[i] * self.alpha_r[i] + tot))

            vote = Var("vote", F32)
            return Seq([
                _loop("mi", 2, lambda i: Store(self.acc, [i], NEG_INF), "unroll"),
                Store(self.vote_r, [_i(0)], _f(0.0)),
                (self.own_by_column(tx, warp, bc, lambda c: self.mask_term(
                    self.row0(), tile * _i(bc) + c, edge), score)
                 if self.scores_by_column() else self.own_elements(tx, warp, bc, score)),
                _loop("mr", 2, row, "unroll"),
                self.own_elements(tx, warp, bc, prob),
                _loop("ms", 2, row_sum, "unroll"),
                Let(vote, self.vote_r[_i(0)], warp_any(vote, Seq([
                    If(tx == _i(0), Store(self.w_s, [warp], vote))]))),
            ])
        return self.warp_lanes(lane)

    def _rows_elementwise(self, fn) -> Stmt:
        """``fn(row in block, col)`` over this warp's 16 rows x v_dim, spread on its lanes:
        32 consecutive columns of one row at a time (a row of 80 takes three, the last
        half used), so a warp's access never spans two rows (whose banks may overlap)."""
        ev = self.w.v_dim
        passes = -(-ev // 32)

        def body(it):
            def lane(tx):
                c = (it % _i(passes)) * _i(32) + tx
                out = fn(self.ty * _i(MMA_ROWS) + it // _i(passes), c)
                return out if ev % 32 == 0 else If(c < _i(ev), out)
            return _lanes(lane)
        return _loop("re", MMA_ROWS * passes, body)

    def any_vote(self) -> Expr:
        """Whether some row of this warp moved its maximum this tile (read by the warp's
        threads after the barrier that follows the votes: the same value in the warp; the
        rescaling it guards holds no barrier, so warps may decide apart)."""
        return self.w_s[self.ty] > _f(0.0)

    def rescale(self) -> Stmt:
        """``O *= exp(m_old - m_new)`` row by row, through shared memory: each thread
        scales the elements it stored itself and loads back (no barrier)."""
        ev = self.w.v_dim

        def scale(i, gr, c, slot):
            at = self.o_at(gr, c)
            return Store(self.o_s, [at], self.o_s[at] * self.alpha_r[i])
        return Seq([self._frag_to_shared(self.of, ev, self.o_s, self.lay.o_ld),
                    self.warp_lanes(lambda tx, warp: self.own_elements(tx, warp, ev, scale)),
                    self._shared_to_frag(self.of, ev, self.o_s, self.lay.o_ld)])

    def inverse_sums(self) -> Stmt:
        """``R_s[row] = 1 / l`` (zero for a row with every score masked), written by the
        first lane of each quad for its two rows."""
        def lane(tx, warp):
            def row(i):
                gr = warp * _i(MMA_ROWS) + tx // _i(4) + i * _i(8)
                lsum = self.l_r[i]
                return Store(self.r_s, [gr], select(lsum == _f(0.0), _f(0.0), _f(1.0) / lsum))
            return If(tx % _i(4) == _i(0), _loop("ir", 2, row, "unroll"))
        return self.warp_lanes(lane)

    def epilogue(self) -> Stmt:
        w = self.w

        def store(gr, c):
            qi = self.row0() + gr
            val = Cast(w.dtype, self.o_s[self.o_at(gr, c)] * self.r_s[gr])
            return If(qi < _i(w.q_len), Store(self.out, [self.out_at(qi, c)], val))
        return Seq([self._frag_to_shared(self.of, w.v_dim, self.o_s, self.lay.o_ld),
                    self.inverse_sums(), Barrier(), self._rows_elementwise(store)])

    # -- the loop over key tiles --------------------------------------------------------
    def key_loop(self) -> Stmt:
        w, cfg = self.w, self.cfg
        total = -(-w.kv_len // cfg.block_kv)
        needed = self.kv_tiles_needed()

        def step(j, parity=None):
            # parity: the tile's stage where the loop knows it (two tiles an iteration),
            # so the copies' and the fragments' addresses are constants of the step
            if cfg.stages == 2:
                # wait for this tile, then (all warps past the barrier, so done with the
                # tile before, which used the other stage) fetch the next one while this
                # one is used: no barrier needed at the end of the step
                stage = j % _i(2) if parity is None else _i(parity)
                nxt = j + _i(1)
                fetch = self.copy_kv(nxt, nxt % _i(2) if parity is None else _i(1 - parity))
                if isinstance(needed, int) and needed == 1:
                    fetch = None  # the one tile: no next one (an empty copy group)
                else:
                    fetch = If(nxt < (_i(needed) if isinstance(needed, int) else needed),
                               fetch)
                head = [AsyncWait(0), Barrier(), fetch, AsyncCommit()]
                tail = []
            else:
                # one stage: every warp must be done with the tiles before they are
                # overwritten
                stage = _i(0)
                head = [self.copy_kv(j, 0), AsyncCommit(), AsyncWait(0), Barrier()]
                tail = [Barrier()]
            # no barrier between the scores' store and the softmax: each thread reads the
            # elements it stored; the one after the softmax publishes P (ldmatrix reads
            # other lanes' probabilities) and the votes
            body = Seq([
                *head,
                self.scores(stage), self._frag_to_shared(self.sf, cfg.block_kv, self.s_s,
                                                         self.lay.s_ld),
                self.softmax(j), Barrier(),
                If(self.any_vote(), self.rescale()) if total > 1 else None,
                self.pv(stage), *tail,
            ])
            if isinstance(needed, int):
                # the second tile of a pair exists only where the tile count is even
                return body if parity != 1 or total % 2 == 0 else If(j < _i(needed), body)
            return If(j < needed, body)

        if cfg.stages == 2 and total > 1:
            return _loop("kv2", -(-total // 2), lambda jj: Seq([
                step(jj * _i(2), 0), step(jj * _i(2) + _i(1), 1)]))
        return _loop("kv", total, step)

    def init_rows(self) -> Stmt:
        """Running maxima minus infinity, sums zero (both rows of every thread)."""
        return self.warp_lanes(lambda tx, warp: _loop("ri", 2, lambda i: Seq([
            Store(self.m_r, [i], NEG_INF), Store(self.l_r, [i], _f(0.0))]), "unroll"))

    def body(self) -> Stmt:
        cfg = self.cfg
        init = self.init_rows()
        prologue = [self.copy_q(), AsyncCommit(), AsyncWait(0), Barrier(), self.load_q_frag()]
        if cfg.stages == 2:
            prologue += [self.copy_kv(_i(0), 0), AsyncCommit()]
        per_warp: Stmt = Seq([init, *prologue, self._fill(self.of, self.w.v_dim),
                              self.key_loop(), self.epilogue()])
        for buf in (*self.row_buffers, self.of, self.vf, self.pf, self.sf, self.kf,
                    self.qf):
            per_warp = Alloc(buf, per_warp)
        s: Stmt = _loop_var(self.ty, cfg.warps, per_warp, "threadIdx.y")
        lay = self.lay
        for buf in (self.w_s, self.r_s, self.s_s, self.v_s, self.k_s, self.q_s):
            s = Alloc(buf, s, dyn_offset=lay.offsets[buf.name])
        s = _loop_var(self.bz, self.w.batch, s, "blockIdx.z")
        s = _loop_var(self.by, self.w.heads, s, "blockIdx.y")
        return _loop_var(self.bx, -(-self.w.q_len // cfg.block_q), s, "blockIdx.x")
