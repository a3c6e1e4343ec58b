"""The names schedule passes give to what they create, and how loops are referred to.

Every pass that creates a stage or a loop takes its name from here, and every layer that
refers to one (the te schedule facade, the auto-scheduler's sketches and its static model,
the schedule printer, the reference schedule) computes the name here too, so a name is
decided in exactly one place.

* A loop reference is ``<stage>.<loop>`` (:func:`loop_ref`); stage and loop names may
  themselves contain dots, so a reference is read at the longest prefix that names a stage
  (:func:`resolve_ref`).
* ``split`` in two parts makes ``<loop>.outer`` and ``<loop>.inner``, in more parts
  ``<loop>.0`` ... (:func:`split_names`); ``fuse`` makes ``<a>.<b>.fused``
  (:func:`fused_name`).
* ``cache_read`` / ``cache_write`` make the stage ``<X>.<scope>`` (``X.shared``,
  ``X.local``; :func:`cache_name`); a copy stage's loops are ``ax0, ax1, ...``
  (:func:`copy_axes`). ``rfactor`` makes the stage and buffer ``<X>.rf``
  (:func:`rfactor_name`). ``implicit_gemm`` makes ``<X>.A``, ``<X>.B`` and ``<X>.gemm``
  (:func:`implicit_gemm_names`).
* A name that is already taken where the new one must be unique gets ``_1``, ``_2``, ...
  appended (:func:`fresh_name`); the passes document where that can happen.
* The auto-scheduler's tuning slots are named ``<stage>.<kind>[.<what>]``
  (:func:`slot_name`).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence

SEP = "."
OUTER = "outer"
INNER = "inner"
FUSED = "fused"
RFACTOR = "rf"
GEMM = "gemm"
COPY_AXIS = "ax"


# -- references -------------------------------------------------------------------------------
def loop_ref(stage: str, loop: str) -> str:
    """The reference to loop ``loop`` of stage ``stage``: ``<stage>.<loop>``."""
    return f"{stage}{SEP}{loop}"


def resolve_ref(ref: str, stages: Collection[str]) -> tuple[str, str] | None:
    """``(stage, loop)`` of a loop reference, split at the longest prefix that is one of
    ``stages``; None when no prefix names a stage (the caller reports that in its terms)."""
    parts = ref.split(SEP)
    for k in range(len(parts) - 1, 0, -1):
        stage = SEP.join(parts[:k])
        if stage in stages:
            return stage, SEP.join(parts[k:])
    return None


# -- names passes create ----------------------------------------------------------------------
def split_outer(loop: str) -> str:
    """The outer loop of a two-way split of ``loop``."""
    return f"{loop}{SEP}{OUTER}"


def split_inner(loop: str) -> str:
    """The inner loop of a two-way split of ``loop``."""
    return f"{loop}{SEP}{INNER}"


def split_names(loop: str, parts: int) -> list[str]:
    """The loops (outermost first) of splitting ``loop`` into ``parts`` loops at once."""
    if parts == 2:
        return [split_outer(loop), split_inner(loop)]
    return [f"{loop}{SEP}{k}" for k in range(parts)]


def level_names(loop: str, levels: int) -> list[str]:
    """The loops (outermost first) of splitting ``loop`` into ``levels`` loops by
    successive two-way splits of the outer part: ``x.outer.outer``, ``x.outer.inner``,
    ``x.inner`` for three."""
    names = []
    outer = loop
    for _ in range(levels - 1):
        names.append(split_inner(outer))
        outer = split_outer(outer)
    names.append(outer)
    return names[::-1]


def fused_name(loops: Sequence[str]) -> str:
    """The loop that fusing ``loops`` (outermost first) makes; one loop keeps its name."""
    loops = list(loops)
    if len(loops) == 1:
        return loops[0]
    return SEP.join(loops) + SEP + FUSED


def cache_name(name: str, scope: str) -> str:
    """The stage (and buffer) that caches ``name`` in ``scope``: ``<name>.<scope>``."""
    return f"{name}{SEP}{scope}"


def rfactor_name(name: str) -> str:
    """The partial-result stage (and buffer) of factoring the reduction ``name``."""
    return f"{name}{SEP}{RFACTOR}"


def implicit_gemm_names(name: str) -> tuple[str, str, str]:
    """The stages (and buffers) ``implicit_gemm`` makes of reduction ``name``: its row
    operand ``<name>.A``, its column operand ``<name>.B`` and the product ``<name>.gemm``."""
    return f"{name}{SEP}A", f"{name}{SEP}B", f"{name}{SEP}{GEMM}"


def copy_axis(k: int) -> str:
    """Loop ``k`` of a copy stage (and of a fresh loop nest over a region): ``ax<k>``."""
    return f"{COPY_AXIS}{k}"


def copy_axes(ndim: int) -> list[str]:
    """The loops of a copy stage of an ``ndim``-dimensional buffer: ``ax0, ax1, ...``."""
    return [copy_axis(k) for k in range(ndim)]


def fresh_name(name: str, taken: set) -> str:
    """``name``, or ``name_1``, ``name_2``, ... the first not in ``taken``; the result is
    added to ``taken``. Passes call it where a new loop or stage would otherwise shadow a
    name already in scope."""
    out = name
    k = 1
    while out in taken:
        out = f"{name}_{k}"
        k += 1
    taken.add(out)
    return out


# -- tuning slots -----------------------------------------------------------------------------
def slot_name(stage: str, kind: str, what: str = "") -> str:
    """A tuning slot of the auto-scheduler: ``<stage>.<kind>`` or ``<stage>.<kind>.<what>``
    (``conv.tile.ff``, ``conv.unroll``, ``conv.vec.data``, ``out.bind.threads``)."""
    return f"{stage}{SEP}{kind}" + (f"{SEP}{what}" if what else "")


# -- printing ---------------------------------------------------------------------------------
_SHORT = ((SEP + OUTER, "_o"), (SEP + INNER, "_i"))


def python_identifier(name: str) -> str:
    """A Python variable name for a stage or loop reference, in the style of TVM's printed
    schedules (``conv.ff.outer.inner`` -> ``conv_ff_o_i``)."""
    v = name
    for long, short in _SHORT:
        v = v.replace(long, short)
    v = re.sub(r"\W", "_", v.replace(SEP, "_"))
    return v if v.isidentifier() else "_" + v


def join_refs(stage: str, loops: Iterable[str]) -> list[str]:
    """References to ``loops`` of ``stage``."""
    return [loop_ref(stage, x) for x in loops]
