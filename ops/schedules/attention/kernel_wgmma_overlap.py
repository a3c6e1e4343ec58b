"""The register form of the wgmma attention kernel with FlashAttention-3's intra-warpgroup
overlap (``AttentionConfig(..., mma="wgmma", scores="registers", p_operand="registers",
overlap="intra")``, sm_90a, two K/V stages).

In :mod:`.kernel_wgmma_regs` a warpgroup's tensor cores idle while its threads run the
softmax (each product is waited for before its result is read). Here two score
accumulators alternate (``S_acc0`` for the even tiles, ``S_acc1`` for the odd ones), so
that while the threads compute the softmax of tile ``j``, the tensor cores run the
previous tile's ``P V``, whose A (the probabilities of tile ``j - 1``) lies in the other
accumulator's registers. Step ``j >= 1`` of the loop:

1. wait for the copies of the step before (K of tile ``j``, V of tile ``j - 1``),
   ``fence.proxy.async``, one barrier (every warpgroup is done with the stages the new
   copies overwrite: K of tile ``j - 1``, read by its ``Q K^T``, and V of tile ``j - 2``,
   read by its ``P V``, both waited for in step ``j - 1``); issue the copies of K of tile
   ``j + 1`` and V of tile ``j`` as one group;
2. ``wgmma.fence``; ``S_cur = Q K_j^T`` (committed), ``O += P_{j-1} V_{j-1}`` with A from
   ``S_prev``'s registers (RS wgmmas, committed);
3. ``wgmma.wait_group 1``: the scores are ready, ``P V`` still runs;
4. the softmax of tile ``j`` on ``S_cur``'s registers (masks, running maxima, the
   probabilities in place, the sums): this is what overlaps ``P V``;
5. ``wgmma.wait_group 0``, then the output's registers rescaled where a row's maximum
   moved in step 4 (the factor applies to the tiles before ``j``, which is what ``O`` holds
   once ``P_{j-1} V_{j-1}`` is in).

Tile 0's ``Q K^T`` and softmax run before the loop, the last tile's ``P V`` after it (its
probabilities in the accumulator of its parity: a branch of each where a causal block's
tile count is not known). The loop runs two tiles an iteration so that each step's
accumulators are known (register slots are constants), a pair whole or not at all, and
an odd tile left over after it, so that only one accumulator is live across the loop's
back edge. One barrier a step where the
one-stage register form has three and the two-stage one two.
"""

from __future__ import annotations

from ....ir.expr import Expr, floormod
from ....ir.stmt import AsyncCommit, AsyncWait, Barrier, Buffer, If, Seq, Stmt, WgmmaSync
from .builders import F32, _i, _loop
from .kernel_wgmma_regs import RegisterScoresKernel


class OverlappedKernel(RegisterScoresKernel):
    """Builds the overlapped register form (the module's docstring)."""

    COPY_OFFSETS = True  # see WgmmaKernel.copy_offsets

    def __init__(self, w, cfg, copy_offsets: bool | None = None):
        super().__init__(w, cfg, copy_offsets)
        bc = cfg.block_kv
        # the tiles of even index score into S_acc0, the odd ones into S_acc1
        self.s_acc = (Buffer("S_acc0", F32, [64 * bc], "warpgroup"),
                      Buffer("S_acc1", F32, [64 * bc], "warpgroup"))
        self.sf = self.s_acc[0]

    @property
    def register_fragments(self) -> tuple:
        return (self.of, *self.s_acc)

    def softmax(self, tile: Expr, sf: Buffer | None = None) -> Stmt:
        """The softmax of key tile ``tile`` on the registers of ``sf`` (with the masks of
        the keys' positions on the tiles that need them)."""
        edge = self.edge_tile(tile)
        if edge is None:
            return self.tile_softmax(tile, False, sf)
        return If(edge, self.tile_softmax(tile, True, sf), self.tile_softmax(tile, False, sf))

    def prologue(self) -> list:
        """Q and tile 0's K as one copy group (V of tile 0 follows in the first step)."""
        return [self.copy_q(), self.copy_k(_i(0), 0), AsyncCommit()]

    def _publish(self) -> list:
        # the copies landed, made visible to the async proxy, and every warpgroup past
        # the step before (done with the stages the next copies overwrite)
        return [AsyncWait(0), WgmmaSync("fence_proxy_async"), Barrier()]

    def _copies(self, j: Expr, parity: int, need: Expr) -> Stmt:
        """K of tile ``j + 1`` (where there is one) into stage ``1 - parity``, V of tile
        ``j`` into stage ``parity``: one copy group."""
        nxt = j + _i(1)
        return Seq([If(nxt < need, self.copy_k(nxt, 1 - parity)),
                    self.copy_v(j, parity), AsyncCommit()])

    def first_tile(self, need: Expr) -> Stmt:
        """Tile 0: its ``Q K^T`` waited for, its softmax (the output is still zero)."""
        s0 = self.s_acc[0]
        return Seq([
            *self._publish(), self._copies(_i(0), 0, need),
            self._fill(s0, self.cfg.block_kv),
            self._batch(self.scores_steps(_i(0), s0)),
            self.softmax(_i(0), s0),
        ])

    def step(self, j: Expr, parity: int, total: int) -> Stmt:
        """Step ``j`` (``j % 2 == parity``) of the loop: the module's docstring, 1 to 5."""
        need = self._need()
        cur, prev = self.s_acc[parity], self.s_acc[1 - parity]
        return Seq([
            *self._publish(), self._copies(j, parity, need),
            self._fill(cur, self.cfg.block_kv),
            WgmmaSync("fence"),
            *self.scores_steps(_i(parity), cur), WgmmaSync("commit"),
            *self.pv_steps(_i(1 - parity), prev), WgmmaSync("commit"),
            WgmmaSync("wait", 1),
            self.softmax(j, cur),
            WgmmaSync("wait", 0),
            self.rescale_output(total),
        ])

    def last_pv(self, parity: int) -> Stmt:
        """``O += P V`` of the last tile, of parity ``parity`` (its V in that stage, its
        probabilities in that accumulator)."""
        return Seq([*self._publish(),
                    self._batch(self.pv_steps(_i(parity), self.s_acc[parity]))])

    def _need(self) -> Expr:
        needed = self.kv_tiles_needed()
        return _i(needed) if isinstance(needed, int) else needed

    def main_loop(self) -> Stmt:
        total = -(-self.w.kv_len // self.cfg.block_kv)
        needed = self.kv_tiles_needed()
        need = self._need()
        static = isinstance(needed, int)
        # two tiles an iteration, 1 + 2 jj (odd, into S_acc1) and 2 + 2 jj (even, into
        # S_acc0), a pair run whole or not at all: at the loop's back edge S_acc1 is dead
        # (each pair fills it before reading it), so only S_acc0's probabilities and the
        # output stay live across it. An odd tile left over runs with the last P V.
        pairs = (total - 1) // 2

        def pair(jj):
            body = Seq([self.step(_i(1) + jj * _i(2), 1, total),
                        self.step(_i(2) + jj * _i(2), 0, total)])
            return body if static else If(_i(2) + jj * _i(2) < need, body)
        loop = _loop("kv2", pairs, pair) if pairs else None

        def odd_tail():
            return Seq([self.step(need - _i(1), 1, total), self.last_pv(1)])
        if static:
            tail = odd_tail() if (needed - 1) % 2 else self.last_pv(0)
        else:
            tail = If(floormod(need - _i(1), 2) == _i(1), odd_tail(), self.last_pv(0))
        return Seq([self.first_tile(need), loop, tail])

