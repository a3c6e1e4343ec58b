"""The ping-pong schedule of the wgmma register form (``AttentionConfig(..., warps=8,
mma="wgmma", scores="registers", schedule="pingpong")``, sm_90a): FlashAttention-3's
inter-warpgroup overlap.

A block holds two warpgroups of 64 query rows each that share the K/V stages. Left alone,
both issue their products at about the same time and both then run their softmaxes while
the tensor cores idle. Here they take turns at issuing, forced by two named barriers of the
block's 256 threads (:class:`~ptxforge.ir.stmt.Barrier` with an id): warpgroup 0 waits at
barrier 1 before it issues a batch of wgmmas and arrives at barrier 2 once it has committed
them; warpgroup 1 waits at barrier 2 and arrives at barrier 1. So warpgroup 1's products are
issued behind warpgroup 0's and run while warpgroup 0's softmax does, and warpgroup 0's
next batch waits until warpgroup 1 has issued its own. Warpgroup 1 arrives at barrier 1 once
before the loop (warpgroup 0 goes first), and warpgroup 0 waits at it once after the loop
(warpgroup 1's last arrival), so every phase of both barriers completes.

A turn is a batch: ``wgmma.fence``, the batch's wgmmas, ``commit`` (both products of a step
in the overlapped form, ``overlap="intra"``; ``Q K^T`` and ``P V`` apart in the plain one);
the waits for the results come after the arrival, outside the turn. Both warpgroups run the
same batches in the same order (a causal block's tile count is the block's), so the turns
alternate. The K/V stages keep their whole-block barriers (each step publishes the tile the
block copied together): within a step the warpgroups take turns, and the step's barrier
brings them together again. The named barriers guard no data: the kernel's results are
those of the cooperative form.
"""

from __future__ import annotations

from ....ir.expr import Expr
from ....ir.stmt import Barrier, If, Seq, Stmt, WgmmaSync
from .builders import _i
from .kernel_wgmma_overlap import OverlappedKernel
from .kernel_wgmma_regs import RegisterScoresKernel

TURN_THREADS = 256
"""The threads of both warpgroups: each named barrier counts one warpgroup waiting and the
other arriving."""
BARRIER_IDS = (1, 2)
"""Warpgroup ``g`` waits at ``BARRIER_IDS[g]`` and arrives at the other's (0 is
``__syncthreads()``'s)."""


class PingPongTurns:
    """The turns of two warpgroups at issuing their wgmmas (mixed into a register form)."""

    ty: Expr

    def turn_wait(self) -> Stmt:
        """Before a batch: wait at this warpgroup's barrier."""
        own, other = BARRIER_IDS
        return If(self.ty == _i(0), Barrier(own, TURN_THREADS), Barrier(other, TURN_THREADS))

    def turn_pass(self) -> Stmt:
        """After a batch's commit: arrive at the other warpgroup's barrier."""
        own, other = BARRIER_IDS
        return If(self.ty == _i(0), Barrier(other, TURN_THREADS, arrive=True),
                  Barrier(own, TURN_THREADS, arrive=True))

    def _batch(self, steps: list, wait: bool = True) -> Stmt:
        tail = [WgmmaSync("wait", 0)] if wait else []
        return Seq([self.turn_wait(), WgmmaSync("fence"), *steps, WgmmaSync("commit"),
                    self.turn_pass(), *tail])

    def main_loop(self) -> Stmt:
        # warpgroup 0 takes the first turn: warpgroup 1's arrival opens it; warpgroup 0
        # closes warpgroup 1's last arrival after the loop
        own = BARRIER_IDS[0]
        return Seq([
            If(self.ty == _i(1), Barrier(own, TURN_THREADS, arrive=True)),
            super().main_loop(),  # type: ignore[misc]
            If(self.ty == _i(0), Barrier(own, TURN_THREADS)),
        ])


class PingPongRegisterKernel(PingPongTurns, RegisterScoresKernel):
    """The register form (``overlap="none"``) in turns: each of ``Q K^T`` and ``P V`` a
    turn of its own."""


class PingPongOverlappedKernel(PingPongTurns, OverlappedKernel):
    """The overlapped register form (``overlap="intra"``) in turns: a step's ``Q K^T`` and
    the previous tile's ``P V`` one turn."""

    def step(self, j: Expr, parity: int, total: int) -> Stmt:
        need = self._need()
        cur, prev = self.s_acc[parity], self.s_acc[1 - parity]
        return Seq([
            *self._publish(), self._copies(j, parity, need),
            self._fill(cur, self.cfg.block_kv),
            self.turn_wait(),
            WgmmaSync("fence"),
            *self.scores_steps(_i(parity), cur), WgmmaSync("commit"),
            *self.pv_steps(_i(1 - parity), prev), WgmmaSync("commit"),
            self.turn_pass(),
            WgmmaSync("wait", 1),
            self.softmax(j, cur),
            WgmmaSync("wait", 0),
            self.rescale_output(total),
        ])
