"""The PTX ISA's fragment layouts of ``mma.sync``: which lane holds which matrix element.

A warp's fragment of a matrix tile is spread over its 32 lanes, ``E`` elements per lane;
``element_map(role)`` gives, for lane ``l`` and element ``e`` of that lane, the ``(row,
col)`` of the tile it holds. Tiles are stored row-major as the IR sees them: operand A is
``[m, k]``, operand B ``[n, k]`` (the ``.col`` layout of the ``k x n`` matrix) and the
accumulator ``[m, n]``.

16-bit operands (f16, bf16) and the accumulator are made of 8x8 sub-matrices; in each, lane
``l`` holds row ``l // 4``, columns ``2 * (l % 4)`` and ``+ 1`` (the layout ``ldmatrix``
delivers), or for B kept as ``[k, n]`` (kind ``b16t``, what ``ldmatrix .trans`` delivers
from a row-major ``k x n`` tile) rows ``2 * (l % 4)`` and ``+ 1`` of column ``l // 4``.
Their order is the register order of the PTX ISA's figures (``a0..a7``, ``b0..b3``,
``c0..c3``). TF32 operands (m16n8k8) hold one element per 8x4 sub-matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

WARP = 32
WARPGROUP = 128


@dataclass(frozen=True)
class FragmentRole:
    """A kind of fragment: its tile shape ``(rows, cols)`` and the lane -> element map."""

    name: str
    rows: int
    cols: int
    # ("b16", [(row0, col0), ...]) 8x8 sub-matrices of 16-bit pairs along a row,
    # ("b16t", ...) the same with the pairs down a column, or
    # ("tf32", [(row0, col0), ...]) 8x4 sub-matrices of one 32-bit element per lane
    kind: str
    blocks: tuple
    threads: int = WARP
    """The threads that hold the fragment together: a warp, or (``wgmma`` accumulators,
    kind ``"wg"``) a warpgroup of 128."""

    @property
    def scope(self) -> str:
        """The storage scope of a buffer holding this role."""
        return "warp" if self.threads == WARP else "warpgroup"

    @property
    def per_lane(self) -> int:
        """Elements each lane (each thread of the warpgroup) holds."""
        return self.rows * self.cols // self.threads

    @property
    def tile_elems(self) -> int:
        return self.rows * self.cols

    def element_map(self) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, cols)``: int arrays of shape ``(threads, per_lane)``."""
        if self.kind == "wg":
            from .wgmma import accumulator_map

            r, c = accumulator_map(self.cols)
            return np.ascontiguousarray(r), np.ascontiguousarray(c)
        lane = np.arange(WARP)[:, None]
        rows, cols = [], []
        for r0, c0 in self.blocks:
            if self.kind == "b16":
                for i in range(2):
                    rows.append(r0 + lane // 4)
                    cols.append(c0 + 2 * (lane % 4) + i)
            elif self.kind == "b16t":
                for i in range(2):
                    rows.append(r0 + 2 * (lane % 4) + i)
                    cols.append(c0 + lane // 4)
            else:
                rows.append(r0 + lane // 4)
                cols.append(c0 + lane % 4)
        r = np.concatenate(rows, axis=1)
        c = np.concatenate(cols, axis=1)
        return r, c


ROLES = {
    # m16n8k16, 16-bit inputs: a0a1 rows 0-7 cols 0-7, a2a3 rows 8-15, a4a5 cols 8-15, ...
    "a16": FragmentRole("a16", 16, 16, "b16", ((0, 0), (8, 0), (0, 8), (8, 8))),
    # B as [n, k]: b0b1 k 0-7, b2b3 k 8-15
    "b16": FragmentRole("b16", 8, 16, "b16", ((0, 0), (0, 8))),
    # accumulator [m, n]: c0c1 rows 0-7, c2c3 rows 8-15 (f32 and f16 alike)
    "c": FragmentRole("c", 16, 8, "b16", ((0, 0), (8, 0))),
    # the same registers seen as B [k, n] (a row-major k x n tile in memory, loaded by
    # ldmatrix .trans): b0b1 k 0-7, b2b3 k 8-15; each lane's pair runs down a column
    "b16_kn": FragmentRole("b16_kn", 16, 8, "b16t", ((0, 0), (8, 0))),
    "b8_kn": FragmentRole("b8_kn", 8, 8, "b16t", ((0, 0),)),
    # one 8x8 16-bit matrix ([n, k] B of m16n8k8; what ldmatrix .x1 delivers)
    "b8": FragmentRole("b8", 8, 8, "b16", ((0, 0),)),
    # m16n8k8 tf32: a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4)
    "a_tf32": FragmentRole("a_tf32", 16, 8, "tf32", ((0, 0), (8, 0), (0, 4), (8, 4))),
    # B as [n, k]: b0 (n = g, k = t), b1 (g, t + 4)
    "b_tf32": FragmentRole("b_tf32", 8, 8, "tf32", ((0, 0), (0, 4))),
    # a wgmma m64nNk16 f32 accumulator is N / 8 of these 64x8 tiles side by side: thread
    # 32 w + l of the warpgroup holds (16 w + g, 2 t + {0, 1}) and (16 w + g + 8, ...) of
    # each (g = l / 4, t = l % 4): mma.sync's c layout per warp, one warp per 16 rows
    "wg_c": FragmentRole("wg_c", 64, 8, "wg", (), WARPGROUP),
    # the A operand of a wgmma m64nNk16 read from registers (16-bit, 64 x 16): thread
    # 32 w + l holds a0..a7 = (16 w + g, 2 t + {0, 1}), (+ 8, ...), (..., 2 t + 8 + {0, 1}),
    # (+ 8, + 8): the f32 accumulator's layout of 16 columns (wg_c's element map at N 16),
    # so slot s of an accumulator's k-th 16 columns casts to slot s of A's k-th tile
    "wg_a16": FragmentRole("wg_a16", 64, 16, "wg", (), WARPGROUP),
}


def tile_slot(role: FragmentRole, row0: int, col0: int, ld: int) -> int:
    """First per-lane element of the tile at ``(row0, col0)`` of a fragment buffer whose
    rows are ``ld`` elements long: tiles are numbered row-major, ``per_lane`` each."""
    return ((row0 // role.rows) * (ld // role.cols) + col0 // role.cols) * role.per_lane
