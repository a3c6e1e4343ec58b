"""The wgmma attention kernel with the scores and the output kept in registers
(``AttentionConfig(..., mma="wgmma", scores="registers")``, sm_90a).

The form of :mod:`.kernel_wgmma` stores ``Q K^T``'s accumulators to a float32 tile that the
softmax reads back, and rescales the output by flushing it to a float32 tile in shared
memory. Here the softmax runs on the accumulators' registers (register access of a
warpgroup fragment, :mod:`ptxforge.ir.intrin.wgmma_regs`), as FlashAttention-3 does: thread
``tx`` of warpgroup ``g`` holds, in slot ``4 b + 2 h + e`` of ``S_acc``, the score of row
``64 g + 16 (tx / 32) + (tx % 32) / 4 + 8 h`` and key ``8 b + 2 (tx % 4) + e`` of the tile.
Per key tile, each thread

1. scales and masks its scores in place (the keys past the end and the causal rule on the
   tiles that reach them, a bool or additive mask always) and takes its two rows'
   maxima, joined over the row's quad by two shuffles;
2. moves the running maxima as the shared form does (conditional rescaling) and writes
   the probabilities ``2^(s u - m u)``, in the input dtype, to the swizzled ``P_s`` that
   ``P V``'s wgmma reads (A from shared memory), or with ``p_operand="registers"`` over
   their scores in ``S_acc``, which ``P V``'s RS wgmmas (``_rs_cvt``) read as A, rounding
   them to 16 bits in pairs; sums them (two shuffles);
3. multiplies its own output registers by ``exp(m_old - m_new)`` where one of its rows
   moved: no vote, no barrier, no flush (a thread's registers are its own).

At the end each thread divides its output registers by its rows' sums and stores them.
With P in registers the kernel stores nothing to shared memory but its copies, and with two
stages the barrier that published P goes (V's tile was published before ``Q K^T``); the
PTX backend does not route the RS wgmma yet, so the rules refuse that knob on a GPU
(``knobs_wgmma.check_wgmma_config``).
The float32 scores', output, row and vote tiles are gone from shared memory (for head dim
128, 4 warps x 64 keys x 1 stage: 110 KiB -> 56 KiB, three blocks on an SM instead of
two). The copies, ``Q K^T``, ``P V`` and the barriers are those of the shared form (1 or
2 stages).
"""

from __future__ import annotations

from ....ir.expr import Cast, Expr, Var, call, emax, select
from ....ir.intrin.keys import IntrinKey
from ....ir.intrin.wgmma_regs import acc_col, acc_row, acc_slot
from ....ir.stmt import Buffer, If, Let, Seq, Stmt, Store
from .builders import F32, LOG2E, NEG_INF, RESCALE_THRESHOLD, _f, _i, _intrin, _loop
from .kernel_wgmma import WgmmaKernel
from .knobs_wgmma import copy_offsets_by_default
from .lanes import quad_reduce


class RegisterScoresKernel(WgmmaKernel):
    """Builds the register-scores form of the wgmma kernel (with ``p_operand``
    ``"registers"``, P V's A from the registers the probabilities are cast into)."""

    def __init__(self, w, cfg, copy_offsets: bool | None = None):
        # constant-offset copies (WgmmaKernel.copy_offsets) with P in registers from head
        # dim 128: on an H100 at 4096 keys, 4 x 64 x 1 ran 252.7 us with them against
        # 275.8 without (causal 4 x 128 x 1: 178.8 against 188.7), 165 -> 127 registers,
        # four blocks an SM instead of three (knobs_wgmma.copy_offsets_by_default)
        if copy_offsets is None:
            copy_offsets = copy_offsets_by_default(w, cfg)
        super().__init__(w, cfg, copy_offsets)
        self.p_regs = cfg.p_operand == "registers"
        # P in registers: the probabilities overwrite their scores in S_acc (float32), and
        # S_acc's 16 columns 16 kk .. are the A (role wg_a16, the same slots) of P V's
        # kk-th wgmma, which rounds them to 16 bits in pairs as it reads them (_rs_cvt)
        self.k_pv_rs = IntrinKey("wgmma", ab=w.dtype, acc=F32, n=w.v_dim, b_kn=True,
                                 a_regs=True, a_cvt=True)

    def publish_p(self) -> list:
        # P in registers: nothing to publish (V's tile was, before Q K^T)
        return [] if self.p_regs else super().publish_p()

    def _row_registers(self) -> None:
        """A thread's two rows: running maximum and sum, the maximum the probabilities
        use, the rescale factor, a partial maximum or sum (the scores are masked in place
        in the accumulator's registers: no copy of them)."""
        self.m_r = Buffer("row_max", F32, [2], "local")
        self.l_r = Buffer("row_sum", F32, [2], "local")
        self.m_use = Buffer("row_max_use", F32, [2], "local")
        self.alpha_r = Buffer("row_alpha", F32, [2], "local")
        self.acc = Buffer("row_acc", F32, [2], "local")

    @property
    def row_buffers(self) -> tuple:
        return (self.m_r, self.l_r, self.m_use, self.alpha_r, self.acc)

    @property
    def shared_buffers(self) -> tuple:
        if self.p_regs:
            return (self.v_s, self.k_s, self.q_s)
        return (self.p_s, self.v_s, self.k_s, self.q_s)

    def scores_ready(self) -> Stmt | None:
        return None  # the softmax reads the accumulator's registers

    def zero_output(self) -> Stmt | None:
        return None  # the output lives in O_acc alone (zeroed by its fill)

    # -- a thread's registers -------------------------------------------------------------
    def _registers(self, tx: Expr, cols: int, fn) -> Stmt:
        """``fn(h, gr, c, slot)`` over the registers of a ``64 x cols`` accumulator that
        thread ``tx`` holds: row half ``h``, row ``gr`` of the block, column ``c``, slot
        (unrolled loops: the slots are constants in the PTX, the registers stay
        registers)."""
        def half(h):
            gr = self.ty * _i(64) + acc_row(tx, h)
            return _loop("rb", cols // 8, lambda b: _loop(
                "re", 2, lambda e: fn(h, gr, acc_col(tx, b, e), acc_slot(b, h, e)),
                "unroll"), "unroll")
        return _loop("rh", 2, half, "unroll")

    def _registers_by_column(self, tx: Expr, cols: int, column, fn) -> Stmt:
        """``fn(h, gr, c, slot, v)`` over the registers of a ``64 x cols`` accumulator as
        :meth:`_registers`, columns outermost: ``v`` is ``column(c)``, bound once for the
        thread's two rows of column ``c`` (an additive mask's element where it has no
        rows: one load and one scaling a column, not a score)."""
        def col(b, e):
            c = acc_col(tx, b, e)
            mv = Var("mask2", F32)

            def half(h):
                gr = self.ty * _i(64) + acc_row(tx, h)
                return fn(h, gr, c, acc_slot(b, h, e), mv)
            return Let(mv, column(c), _loop("rh", 2, half, "unroll"))
        return _loop("rb", cols // 8, lambda b: _loop(
            "re", 2, lambda e: col(b, e), "unroll"), "unroll")

    def tile_softmax(self, tile: Expr, edge: bool, sf: Buffer | None = None) -> Stmt:
        """The softmax of key tile ``tile`` on the registers of ``sf`` (``S_acc`` unless
        given; the module's docstring, steps 1 and 2); the masks of the keys' positions
        where ``edge``."""
        w, bc = self.w, self.cfg.block_kv
        sf = self.sf if sf is None else sf
        unit = self.score_units()
        threshold = RESCALE_THRESHOLD * LOG2E / unit

        def lane(tx):
            def score(h, gr, c, slot, mask2=None):
                qi = self.row0() + gr
                kj = tile * _i(bc) + c
                raw = sf[slot]
                s, keep = self._scaled_score(raw, qi, kj, unit, edge, mask2)
                changed = s is not raw
                if keep is not None:
                    s = select(keep, s, NEG_INF)
                    changed = True
                if not changed:  # the raw products are the values the softmax keeps
                    return Store(self.acc, [h], emax(self.acc[h], s))
                sv = Var("score", F32)
                return Let(sv, s, Seq([Store(sf, [slot], sv),
                                       Store(self.acc, [h], emax(self.acc[h], sv))]))

            def prob(h, gr, c, slot):
                p = Var("prob", F32)
                # m_use holds -(m u): 2^(s u - m u) is one fma and one ex2
                x = (sf[slot] + self.m_use[h] if unit == 1.0
                     else call("fma", sf[slot], _f(unit), self.m_use[h]))
                # P in registers: in place of its score (the slot of P V's A)
                keep = (Store(sf, [slot], p) if self.p_regs
                        else Store(self.p_s, [self.p_at(gr, c)], Cast(w.dtype, p)))
                return Let(p, call("exp2", x), Seq([
                    keep, Store(self.acc, [h], self.acc[h] + p)]))

            def row(h):
                names = ("tile_max", "max_old", "grow", "max_new", "max_use", "alpha")
                mt, m_old, grow, m_new, m_use, alpha = (
                    Var(n, "bool" if n == "grow" else F32) for n in names)
                # as the shared form: the maximum moves where the row had none yet or the
                # tile's exceeds it by more than the threshold (then the output rescales)
                moves = (m_old == NEG_INF) | grow
                update = Seq([
                    Store(self.m_use, [h], -(m_use * _f(unit)) if unit != 1.0 else -m_use),
                    Store(self.alpha_r, [h], alpha),
                    Store(self.m_r, [h], m_new), Store(self.acc, [h], _f(0.0))])
                shift = m_old - m_new if unit == 1.0 else (m_old - m_new) * _f(unit)
                return quad_reduce(self.acc[h], emax, mt, Let(m_old, self.m_r[h], Let(
                    grow, (m_old != NEG_INF) & (mt > m_old + _f(threshold)),
                    Let(m_new, select(moves, emax(m_old, mt), m_old),
                        Let(m_use, select(m_new == NEG_INF, _f(0.0), m_new),
                            Let(alpha, select(grow, call("exp2", shift), _f(1.0)),
                                update))))))

            def row_sum(h):
                tot = Var("tot", F32)
                return quad_reduce(self.acc[h], lambda a, b: a + b, tot, Store(
                    self.l_r, [h], self.l_r[h] * self.alpha_r[h] + tot))

            if self.scores_by_column():
                # the mask's element, scaled, once a column for both rows
                scores = self._registers_by_column(tx, bc, lambda c: self.mask_term(
                    self.row0(), tile * _i(bc) + c, edge), score)
            else:
                scores = self._registers(tx, bc, score)
            return Seq([
                _loop("mi", 2, lambda h: Store(self.acc, [h], NEG_INF), "unroll"),
                scores,
                _loop("mr", 2, row, "unroll"),
                self._registers(tx, bc, prob),
                _loop("ms", 2, row_sum, "unroll"),
            ])
        return self.threads(lane)

    def pv(self, stage: Expr, wait: bool = True) -> Stmt:
        """``O_acc += P V``: with P in registers one RS wgmma per 16 keys, A the
        probabilities in ``S_acc`` (its 16 columns ``16 kk ..``, rounded to 16 bits by the
        wgmma), B the V tile MN-major as in the shared form."""
        if not self.p_regs:
            return super().pv(stage, wait)
        return self._batch(self.pv_steps(stage, self.sf), wait)

    def pv_steps(self, stage: Expr, sf: Buffer) -> list:
        """The RS wgmmas of ``O_acc += P V``, A the probabilities in ``sf``'s registers,
        B the V tile in ``stage`` (not fenced, committed or waited for)."""
        ev, bc = self.w.v_dim, self.cfg.block_kv
        steps = []
        for kk in range(bc // 16):
            v_at = self.v_at(stage, kk)

            def inner(i, j, k, kk=kk, b_at=v_at):
                ci = i * _i(ev) + j
                p16 = Cast(self.w.dtype, sf[i * _i(bc) + _i(16 * kk) + k])
                prod = Cast(F32, p16) * Cast(F32, self.v_s[b_at(j, k)])
                return Store(self.of, [ci], self.of[ci] + prod)
            steps.append(_loop("wi", 64, lambda i, inner=inner: _loop(
                "wj", ev, lambda j: _loop("wk", 16, lambda k: inner(i, j, k))),
                annotations=_intrin(self.k_pv_rs)))
        return steps

    def rescale_output(self, tiles: int) -> Stmt | None:
        """``O_acc *= exp(m_old - m_new)`` on the registers of a thread one of whose rows
        moved its maximum (step 3; rare with the conditional rescaling)."""
        if tiles <= 1:
            return None
        ev = self.w.v_dim

        def lane(tx):
            moved = (self.alpha_r[_i(0)] != _f(1.0)) | (self.alpha_r[_i(1)] != _f(1.0))
            return If(moved, self._registers(tx, ev, lambda h, gr, c, slot: Store(
                self.of, [slot], self.of[slot] * self.alpha_r[h])))
        return self.threads(lane)

    def epilogue(self) -> Stmt:
        """Each thread divides its output registers by its rows' sums (zero for a row
        with every score masked) and stores the rows inside the queries."""
        w, ev = self.w, self.w.v_dim

        def lane(tx):
            inverse = _loop("ir", 2, lambda h: Store(self.acc, [h], select(
                self.l_r[h] == _f(0.0), _f(0.0), _f(1.0) / self.l_r[h])), "unroll")

            def half(h):
                gr = self.ty * _i(64) + acc_row(tx, h)
                qi = self.row0() + gr

                def pair(b):
                    return _loop("oe", 2, lambda e: Store(
                        self.out, [self.out_at(qi, acc_col(tx, b, e))],
                        Cast(w.dtype, self.of[acc_slot(b, h, e)] * self.acc[h])), "unroll")
                stores = _loop("ob", ev // 8, pair, "unroll")
                return stores if w.q_len % self.cfg.block_q == 0 else If(qi < _i(w.q_len),
                                                                         stores)
            return Seq([inverse, _loop("oh", 2, half, "unroll")])
        return self.threads(lane)
