"""Tile-size tables: every way to split an extent into ``n`` exact factors, and the moves
between them.

A tile parameter of a search state is an index into the table of its ``(extent, levels)``;
the table row holds the loop extents of the levels, outermost first, whose product is the
extent. Mutation moves one prime factor from one level to another, so the neighbours of
each row are precomputed once per table and mutation becomes an array lookup.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np


def prime_factors(n: int) -> list[int]:
    """Prime factors of ``n`` with multiplicity, ascending."""
    out = []
    p = 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return out


def divisors(n: int) -> list[int]:
    """The divisors of ``n``, ascending."""
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _factorizations(extent: int, levels: int) -> list[tuple[int, ...]]:
    divs = divisors(extent)

    @functools.cache
    def go(m: int, k: int) -> tuple:
        if k == 1:
            return ((m,),)
        return tuple((d,) + rest for d in divs if d <= m and m % d == 0
                     for rest in go(m // d, k - 1))

    return list(go(extent, levels))


@dataclass(frozen=True, eq=False)
class TileTable:
    """All exact factorizations of ``extent`` into ``levels`` loop extents.

    ``rows[k]`` is one factorization (outermost first); ``neighbors[k, :degree[k]]`` are the
    rows reached by moving one prime factor between two levels.
    """

    extent: int
    levels: int
    rows: np.ndarray
    neighbors: np.ndarray
    degree: np.ndarray
    index: dict

    def lookup(self, factors) -> int:
        """The row index of ``factors`` (a sequence of loop extents, outermost first)."""
        key = tuple(int(f) for f in factors)
        if key not in self.index:
            raise ValueError(
                f"{list(key)} is not an exact split of {self.extent} into {self.levels} loops"
            )
        return self.index[key]


@functools.cache
def tile_table(extent: int, levels: int) -> TileTable:
    """The (cached) table of ``extent`` split into ``levels`` loops."""
    if extent < 1 or levels < 1:
        raise ValueError(f"tile_table needs a positive extent and level count, got "
                         f"{extent}, {levels}")
    rows = _factorizations(extent, levels)
    index = {r: k for k, r in enumerate(rows)}
    primes = sorted(set(prime_factors(extent)))
    nbrs = []
    for r in rows:
        out = set()
        for i in range(levels):
            for p in primes:
                if r[i] % p:
                    continue
                for j in range(levels):
                    if j == i:
                        continue
                    moved = list(r)
                    moved[i] //= p
                    moved[j] *= p
                    out.add(index[tuple(moved)])
        nbrs.append(sorted(out))
    deg = np.array([max(len(n), 1) for n in nbrs], dtype=np.int64)
    width = int(deg.max()) if len(deg) else 1
    table = np.zeros((len(rows), width), dtype=np.int64)
    for k, n in enumerate(nbrs):
        if n:
            table[k, : len(n)] = n
        else:
            table[k, 0] = k  # extent 1 (or one level): the only move is to stay
    arr = np.array(rows, dtype=np.int64).reshape(len(rows), levels)
    arr.setflags(write=False)
    table.setflags(write=False)
    deg.setflags(write=False)
    return TileTable(extent, levels, arr, table, deg, index)
