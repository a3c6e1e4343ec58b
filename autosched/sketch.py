"""Sketches: schedule structures with parameter slots.

A sketch is what the sketch rules produce for a task: an ordered list of steps (tile this
stage, bind that one, inline another), each of which emits schedule passes, plus the
parameter slots its steps read (tile sizes, unroll steps, thread counts, vector widths). A
search state is a sketch plus one value per slot; :meth:`Sketch.pipeline` turns it into a
:class:`~ptxforge.passes.pipeline.Pipeline`, :meth:`Sketch.pipeline_text` into the text
that measure inputs and records carry.

Slot values are small ints: for a :class:`TileSlot` the row of its
:func:`~ptxforge.autosched.factorization.tile_table`, for a :class:`ChoiceSlot` the index
of the choice. Populations of states of one sketch are int arrays ``[n, len(slots)]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..passes.pipeline import Pipeline
from .factorization import TileTable, tile_table

# passes are emitted in phases so that steps of different stages interleave correctly:
# structure (cache_write, rfactor), tiling, early inlines, compute_at and cache_read,
# bindings and fetches, pragmas, late inlines (of stages copied into shared memory)
PHASES = ("structure", "tile", "inline", "attach", "bind", "pragma", "late_inline")


@dataclass(frozen=True)
class TileSlot:
    """Loop extents for ``levels`` nested loops that split an axis of ``extent``."""

    name: str
    extent: int
    levels: int

    @property
    def table(self) -> TileTable:
        return tile_table(self.extent, self.levels)

    @property
    def size(self) -> int:
        return len(self.table.rows)

    def value(self, index: int) -> tuple:
        return tuple(int(x) for x in self.table.rows[index])

    def index_of(self, value) -> int:
        return self.table.lookup(value)


@dataclass(frozen=True)
class ChoiceSlot:
    """One of a few values (unroll steps, thread counts, vector widths)."""

    name: str
    choices: tuple

    @property
    def size(self) -> int:
        return len(self.choices)

    def value(self, index: int) -> int:
        return self.choices[index]

    def index_of(self, value) -> int:
        if value not in self.choices:
            raise ValueError(f"{self.name}: {value!r} is not one of {list(self.choices)}")
        return self.choices.index(value)


class Values:
    """Slot values of one state, by slot name (tile slots give tuples of extents)."""

    __slots__ = ("_sketch", "_row")

    def __init__(self, sketch: Sketch, row):
        self._sketch = sketch
        self._row = row

    def __getitem__(self, name: str):
        k = self._sketch.slot_index[name]
        return self._sketch.slot_values[k][int(self._row[k])]


class ArrayValues:
    """Slot values of a population, by slot name: tile slots give ``[n, levels]`` int
    arrays, choice slots ``[n]`` arrays."""

    __slots__ = ("_sketch", "_rows", "_cache")

    def __init__(self, sketch: Sketch, rows: np.ndarray):
        self._sketch = sketch
        self._rows = rows
        self._cache: dict = {}

    @property
    def n(self) -> int:
        return len(self._rows)

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._cache:
            k = self._sketch.slot_index[name]
            self._cache[name] = self._sketch.slot_arrays[k][self._rows[:, k]]
        return self._cache[name]


class Sketch:
    """A schedule structure for one task: steps plus the slots they read."""

    def __init__(self, name: str, steps):
        self.name = name
        self.steps = tuple(steps)
        slots = []
        for st in self.steps:
            slots.extend(st.slots())
        names = [s.name for s in slots]
        if len(set(names)) != len(names):
            raise ValueError(f"sketch {name}: duplicate slot names in {names}")
        self.slots = tuple(slots)
        self.slot_index = {s.name: k for k, s in enumerate(slots)}
        # python tuples for emitting text, numpy arrays for vectorized analysis
        self.slot_values = []
        self.slot_arrays = []
        for s in slots:
            if isinstance(s, TileSlot):
                self.slot_values.append([tuple(r) for r in s.table.rows.tolist()])
                self.slot_arrays.append(s.table.rows)
            else:
                self.slot_values.append(list(s.choices))
                self.slot_arrays.append(np.asarray(s.choices, dtype=np.int64))
        self.sizes = np.array([s.size for s in slots], dtype=np.int64)

    def __repr__(self):
        return f"Sketch({self.name}, {len(self.slots)} slots)"

    # -- passes ---------------------------------------------------------------------------
    def pipeline(self, row) -> Pipeline:
        """The schedule passes of the state ``row`` (one value per slot)."""
        vals = Values(self, row)
        out: dict = {p: [] for p in PHASES}
        for st in self.steps:
            st.emit(vals, out)
        return Pipeline([p for phase in PHASES for p in out[phase]])

    def pipeline_text(self, row) -> str:
        """The text of :meth:`pipeline` (what measure inputs and records carry)."""
        return self.pipeline(row).text

    # -- state <-> JSON -------------------------------------------------------------------
    def describe(self, row) -> dict:
        """The explicit slot values of ``row`` (tile extents, unroll steps, ...)."""
        return {s.name: (list(s.value(int(v))) if isinstance(s, TileSlot) else s.value(int(v)))
                for s, v in zip(self.slots, row)}

    def row_of(self, description: dict) -> tuple:
        """The inverse of :meth:`describe`; raises ValueError for values not in the slots."""
        missing = [s.name for s in self.slots if s.name not in description]
        if missing:
            raise ValueError(f"sketch {self.name}: state lacks slots {missing}")
        return tuple(s.index_of(tuple(description[s.name]) if isinstance(s, TileSlot)
                                else description[s.name]) for s in self.slots)

    def default_row(self) -> tuple:
        """A state with every tile all in the outermost loop and the first choices."""
        row = []
        for s in self.slots:
            if isinstance(s, TileSlot):
                row.append(s.index_of((s.extent,) + (1,) * (s.levels - 1)))
            else:
                row.append(0)
        return tuple(row)

    def values(self, rows: np.ndarray) -> ArrayValues:
        return ArrayValues(self, rows)
