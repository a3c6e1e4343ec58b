"""Configuration spaces of templates: knobs, their candidate values, and configs.

A template defines knobs on the config object it gets from :func:`get_config`:
``define_split`` (how to tile a loop), ``define_reorder`` (a loop order),
``define_annotate`` (unroll / vectorize / bind per loop) and ``define_knob`` (any list of
values). While a task is created the config is a :class:`ConfigSpace` that collects the
knobs; while a candidate is built it is a :class:`ConfigEntity` holding one value per knob,
and ``cfg["tile_f"].apply(s, op, axis)`` applies that value to the schedule.

Index order and enumeration follow TVM's AutoTVM, so a config index means the same thing
here as there: split candidates are enumerated depth first, innermost factor slowest, and
the first knob varies fastest in a config index.
"""

from __future__ import annotations

import inspect
import math
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np


class InstantiationError(ValueError):
    """A template cannot be instantiated with a config (raise it from a template to mark a
    config invalid; the tuner records it as an instantiation error)."""


# -- axes -------------------------------------------------------------------------------------


class VirtualAxis:
    """An axis given by its length alone (``define_split("t", 512)``)."""

    def __init__(self, length: int, name: str = ""):
        self.length = int(length)
        self.name = name or f"axis{length}"

    def __repr__(self):
        return f"VirtualAxis({self.name}, {self.length})"


def axis_length(axis) -> int:
    """The extent of a loop given to ``define_*``: an int, a :class:`VirtualAxis`, a te
    ``IterVar``, or a loop handle of a schedule (``s[C].op.axis[0]``)."""
    if isinstance(axis, bool):
        raise TypeError(f"expected a loop or a length, got {axis!r}")
    if isinstance(axis, int):
        return axis
    if isinstance(axis, VirtualAxis):
        return axis.length
    extent = getattr(axis, "extent", None)
    if isinstance(extent, int):
        return extent
    from ..passes.schedule.schedule import LoopHandle

    if isinstance(axis, LoopHandle):
        found = _loop_handle_extent(axis)
        if found is not None:
            return found
    raise TypeError(
        f"cannot tell the extent of {axis!r}: pass a loop of the template's schedule "
        "(s[C].op.axis / reduce_axis), a te IterVar, or an int")


def _loop_handle_extent(handle) -> int | None:
    """Find the extent of a loop handle in a schedule of the calling template.

    A loop handle names its stage and loop but holds no reference to its schedule, so look
    for a schedule among the locals of the frames up the stack (the template's ``s``)."""
    from ..passes.schedule.schedule import Schedule

    frame = inspect.currentframe()
    try:
        depth = 0
        while frame is not None and depth < 30:
            for value in list(frame.f_locals.values()):
                if isinstance(value, Schedule):
                    ext = _extent_in(value, handle)
                    if ext is not None:
                        return ext
            frame = frame.f_back
            depth += 1
    finally:
        del frame
    return None


def _extent_in(s, handle) -> int | None:
    from ..ir.traversal import block_paths, enclosing_loops

    try:
        stage = s[handle.stage]
    except Exception:  # not a stage of this schedule
        return None
    paths = block_paths(s._module.main.body)
    if handle.stage in paths:
        for loop in enclosing_loops(paths[handle.stage]):
            if loop.var.name == handle.name:
                return int(loop.extent)
    tensor = getattr(stage, "_tensor", None)
    op = getattr(tensor, "op", None)
    for iv in list(getattr(op, "axis", ())) + list(getattr(op, "reduce_axis", ())):
        if iv.var.name == handle.name and isinstance(iv.extent, int):
            return iv.extent
    return None


# -- factor helpers ---------------------------------------------------------------------------


def get_factors(n: int) -> list[int]:
    """The divisors of ``n``, ascending."""
    out = set()
    for i in range(1, int(math.isqrt(n)) + 1):
        if n % i == 0:
            out.add(i)
            out.add(n // i)
    return sorted(out)


def get_pow2s(n: int) -> list[int]:
    """The powers of two not above ``n`` (1, 2, 4, ...)."""
    return [2**k for k in range(int(math.floor(math.log2(n))) + 1)] if n >= 1 else [1]


# -- transform spaces and their entities --------------------------------------------------------


class TransformSpace:
    """A knob: a list of entities (candidate values)."""

    kind = ""

    def __init__(self):
        self.entities: list = []

    def __len__(self) -> int:
        return len(self.entities)

    def __getitem__(self, index: int):
        return self.entities[index]

    def index_of(self, entity) -> int:
        """The position of ``entity`` (compared by value) in this knob."""
        key = _entity_key(entity)
        for i, e in enumerate(self.entities):
            if _entity_key(e) == key:
                return i
        raise ValueError(f"{entity!r} is not a candidate of {self!r}")


class SplitEntity:
    """A tiling of one loop: ``size`` lists the extents outermost first; ``-1`` (first)
    means "whatever is left"."""

    kind = "sp"

    def __init__(self, size: Sequence[int]):
        self.size = [int(x) for x in size]

    def apply(self, sch, op, axis) -> list:
        """Split ``axis`` of stage ``op`` of schedule ``sch``; return the loops, outermost
        first."""
        ret = []
        for i in range(1, len(self.size)):
            outer, axis = sch[op].split(axis, factor=int(np.prod(self.size[i:])))
            ret.append(outer)
        return ret + [axis]

    def extents(self, product: int) -> list[int]:
        """The loop extents with the ``-1`` resolved for an axis of length ``product``."""
        inner = int(np.prod([s for s in self.size[1:]]))
        first = self.size[0] if self.size[0] != -1 else -(-product // inner)
        return [first] + self.size[1:]

    def __repr__(self):
        return str(self.size)


class SplitSpace(TransformSpace):
    """``define_split``: tile a loop of length ``product`` into ``num_outputs`` loops.

    ``policy``: ``"factors"`` (divisors only: no tail), ``"power2"`` (powers of two, may
    leave a tail), ``"verbose"`` (both), or ``"candidate"`` (the lists in ``candidate``).
    ``max_factor`` bounds each inner extent; ``filter(entity) -> bool`` prunes.
    """

    kind = "sp"

    def __init__(self, axes, policy: str = "factors", **kwargs):
        super().__init__()
        self.policy = policy
        self.product = axis_length(axes[0])
        self.num_output = int(kwargs.get("num_outputs", 0))
        if self.num_output < 1:
            raise ValueError("define_split needs num_outputs >= 1")
        max_factor = kwargs.get("max_factor", 1 << 31)
        keep = kwargs.get("filter", lambda x: True)
        if policy == "candidate":
            for size in kwargs["candidate"]:
                if len(size) != self.num_output:
                    raise ValueError(f"candidate {size} has {len(size)} parts, not "
                                     f"{self.num_output}")
                self.entities.append(SplitEntity(size))
        else:
            if policy == "verbose":
                factors = sorted(set(get_factors(self.product)) | set(get_pow2s(self.product)))
            elif policy == "factors":
                factors = get_factors(self.product)
            elif policy == "power2":
                factors = get_pow2s(self.product)
            else:
                raise ValueError(f"unknown split policy {policy!r}; use factors, power2, "
                                 "verbose or candidate")
            self.factors = [f for f in factors if f <= max_factor]
            no_tail = kwargs.get("no_tail", policy == "factors")
            self._generate([None] * (self.num_output - 1), 0, no_tail)
        self.entities = [e for e in self.entities if keep(e)]

    def _generate(self, stack: list, now: int, no_tail: bool) -> None:
        if now == len(stack):
            prod = int(np.prod(stack, dtype=np.int64)) if stack else 1
            if prod > self.product:
                return
            if self.product % prod == 0 or (not no_tail and prod < self.product):
                self.entities.append(SplitEntity([-1] + stack[::-1]))
            return
        for factor in self.factors:
            stack[now] = factor
            self._generate(stack, now + 1, no_tail)

    def __repr__(self):
        return (f"Split(policy={self.policy}, product={self.product}, "
                f"num_outputs={self.num_output}) len={len(self)}")


class ReorderEntity:
    """A loop order: ``perm[i]`` is the index (into the given axes) of the i-th loop."""

    kind = "re"

    def __init__(self, perm: Sequence[int]):
        self.perm = [int(x) for x in perm]

    def apply(self, sch, op, axes) -> list:
        """Reorder ``axes`` of stage ``op``; return them in their new order."""
        if len(axes) == len(self.perm):
            new_order = [axes[i] for i in self.perm]
        else:
            new_order = [axes[i] for i in self.perm if i < len(axes)]
        sch[op].reorder(*new_order)
        return new_order

    def __repr__(self):
        return str(self.perm)


class ReorderSpace(TransformSpace):
    """``define_reorder``: orders of the given loops.

    ``policy``: ``"identity"`` (only the given order), ``"all"`` (every permutation),
    ``"interval_all"`` (every permutation of ``interval=(start, end)``), or ``"candidate"``
    (the permutations in ``candidate``, as lists of loops).
    """

    kind = "re"

    def __init__(self, axes, policy: str = "identity", **kwargs):
        super().__init__()
        self.policy = policy
        self.num_output = len(axes)
        n = len(axes)
        if policy == "identity":
            self.entities = [ReorderEntity(range(n))]
        elif policy == "all":
            import itertools

            self.entities = [ReorderEntity(p) for p in itertools.permutations(range(n))]
        elif policy == "interval_all":
            import itertools

            begin, end = kwargs["interval"]
            self.entities = [ReorderEntity(list(range(begin)) + list(p) + list(range(end, n)))
                             for p in itertools.permutations(range(begin, end))]
        elif policy == "candidate":
            positions = {id(a): i for i, a in enumerate(axes)}
            for order in kwargs["candidate"]:
                self.entities.append(ReorderEntity([positions[id(a)] for a in order]))
        else:
            raise ValueError(f"unknown reorder policy {policy!r}; use identity, all, "
                             "interval_all or candidate")

    def __repr__(self):
        return f"Reorder(policy={self.policy}) len={len(self)}"


ANNOTATIONS = ("none", "unroll", "vec", "blockIdx.x", "blockIdx.y", "blockIdx.z",
               "threadIdx.x", "threadIdx.y", "threadIdx.z", "vthread")


class AnnotateEntity:
    """One annotation per loop: ``none``, ``unroll``, ``vec`` or a thread tag."""

    kind = "an"

    def __init__(self, anns: Sequence[str]):
        self.anns = list(anns)

    def apply(self, sch, op, axes, axis_lens=None, max_unroll=None, vec_size=None,
              cfg=None, source=None) -> list:
        """Apply the annotations to ``axes`` of stage ``op``. With ``axis_lens`` and
        ``max_unroll`` an unroll whose loop is longer than ``max_unroll`` is skipped; with
        ``vec_size`` (an int or list of allowed lengths) so is a vectorization of another
        length. Returns ``axes``."""
        from .. import te

        for i, ann in enumerate(self.anns):
            if ann == "none":
                continue
            if ann == "unroll":
                if max_unroll and axis_lens is not None and axis_lens[i] > max_unroll:
                    continue
                sch[op].unroll(axes[i])
            elif ann == "vec":
                if vec_size is not None and axis_lens is not None:
                    sizes = vec_size if isinstance(vec_size, (list, tuple)) else [vec_size]
                    if axis_lens[i] not in sizes:
                        continue
                sch[op].vectorize(axes[i])
            elif ann in ANNOTATIONS:
                sch[op].bind(axes[i], te.thread_axis(ann))
            else:
                raise InstantiationError(f"unknown annotation {ann!r}")
        return list(axes)

    def __repr__(self):
        return str(self.anns)


class AnnotateSpace(TransformSpace):
    """``define_annotate``: per-loop annotations.

    ``policy``: ``"try_unroll"`` (none or unroll per loop), ``"try_unroll_vec"`` (also
    vectorize the last loop), ``"bind_gpu"`` (bind the loops to blockIdx / vthread /
    threadIdx in TVM's fixed pattern) or ``"candidate"`` (the annotation lists in
    ``candidate``).
    """

    kind = "an"

    def __init__(self, axes, policy: str, **kwargs):
        super().__init__()
        self.policy = policy
        self.num_axis = n = len(axes)
        import itertools

        if policy == "try_unroll":
            choices = [("none", "unroll")] * n
        elif policy == "try_unroll_vec":
            choices = [("none", "unroll")] * (n - 1) + [("none", "unroll", "vec")]
        elif policy == "bind_gpu":
            choices = [(ann,) for ann in _bind_gpu_pattern(n)]
        elif policy == "candidate":
            choices = None
            self.entities = [AnnotateEntity(c) for c in kwargs["candidate"]]
        else:
            raise ValueError(f"unknown annotate policy {policy!r}; use try_unroll, "
                             "try_unroll_vec, bind_gpu or candidate")
        if choices is not None:
            self.entities = [AnnotateEntity(c) for c in itertools.product(*choices)]

    def __repr__(self):
        return f"Annotate(policy={self.policy}) len={len(self)}"


def _bind_gpu_pattern(n: int) -> list[str]:
    """TVM's ``bind_gpu`` layout: outer loops to blocks, middle to vthreads, then threads."""
    if n == 1:
        return ["threadIdx.x"]
    if n == 2:
        return ["blockIdx.x", "threadIdx.x"]
    if n == 3:
        return ["blockIdx.x", "threadIdx.x", "none"]
    if n == 4:
        return ["blockIdx.x", "vthread", "threadIdx.x", "none"]
    return ["blockIdx.x", "vthread", "threadIdx.x"] + ["none"] * (n - 3)


class OtherOptionEntity:
    """One value of a ``define_knob`` knob; read it with ``.val``."""

    kind = "ot"

    def __init__(self, val):
        self.val = val

    def __repr__(self):
        return str(self.val)


class OtherOptionSpace(TransformSpace):
    """``define_knob``: any list of values."""

    kind = "ot"

    def __init__(self, axes, policy, **kwargs):
        super().__init__()
        candidate = kwargs["candidate"]
        self.candidate = list(candidate)
        self.entities = [OtherOptionEntity(v) for v in candidate]

    def __repr__(self):
        return f"OtherOption({self.candidate}) len={len(self)}"


def _entity_key(e):
    if isinstance(e, SplitEntity):
        return ("sp", tuple(e.size))
    if isinstance(e, ReorderEntity):
        return ("re", tuple(e.perm))
    if isinstance(e, AnnotateEntity):
        return ("an", tuple(e.anns))
    return ("ot", repr(e.val))


ENTITY_TYPES = {"sp": SplitEntity, "re": ReorderEntity, "an": AnnotateEntity,
                "ot": OtherOptionEntity}


# -- configs ----------------------------------------------------------------------------------


class ConfigSpace:
    """The knobs of a template. Printing it shows each knob and the total size, as in TVM:
    ``ConfigSpace (len=10454400, space_map=`` then one line per knob."""

    def __init__(self):
        self.space_map: OrderedDict = OrderedDict()
        self._entity_map: OrderedDict = OrderedDict()
        self._collect = True
        self._length: int | None = None
        self.flop = 0.0
        self.errors: list = []

    # -- defining knobs ----------------------------------------------------------------------

    def define_split(self, name: str, axis, policy: str = "factors", **kwargs):
        """A knob tiling ``axis`` into ``num_outputs`` loops (see :class:`SplitSpace`)."""
        return self._add(SplitSpace, name, [axis], policy, **kwargs)

    def define_reorder(self, name: str, axes, policy: str, **kwargs):
        """A knob choosing an order of ``axes`` (see :class:`ReorderSpace`)."""
        return self._add(ReorderSpace, name, list(axes), policy, **kwargs)

    def define_annotate(self, name: str, axes, policy: str, **kwargs):
        """A knob annotating each of ``axes`` (see :class:`AnnotateSpace`)."""
        return self._add(AnnotateSpace, name, list(axes), policy, **kwargs)

    def define_knob(self, name: str, candidate):
        """A knob taking one of the values of ``candidate``; read it as ``cfg[name].val``."""
        return self._add(OtherOptionSpace, name, [], "", candidate=candidate)

    def add_flop(self, flop: float) -> None:
        """Add to the floating-point work the template reports for one run."""
        self.flop += float(flop)

    def raise_error(self, msg: str):
        """Mark this config invalid (raises :class:`InstantiationError`)."""
        self.errors.append(msg)
        raise InstantiationError(msg)

    def valid(self) -> bool:
        return not self.errors

    @property
    def is_fallback(self) -> bool:
        return False

    def _add(self, space_class, name, axes, policy, **kwargs):
        if self._collect:
            if name in self.space_map:
                raise ValueError(f"knob {name!r} is defined twice in the template")
            space = space_class(axes, policy, **kwargs)
            if len(space) == 0:
                raise ValueError(f"knob {name!r} has no candidate left (check its filter)")
            self.space_map[name] = space
            self._entity_map[name] = space[0]
            self._length = None
        return None

    # -- the space ---------------------------------------------------------------------------

    def __len__(self) -> int:
        if self._length is None:
            n = 1
            for s in self.space_map.values():
                n *= len(s)
            self._length = n
        return self._length

    @property
    def dims(self) -> list[int]:
        """The number of candidates of each knob, in definition order."""
        return [len(s) for s in self.space_map.values()]

    def point2knob(self, index: int) -> list[int]:
        """A config index as one candidate index per knob (the first knob fastest)."""
        knob = []
        for d in self.dims:
            knob.append(index % d)
            index //= d
        return knob

    def knob2point(self, knob: Sequence[int]) -> int:
        """The inverse of :meth:`point2knob`."""
        index, stride = 0, 1
        for k, d in zip(knob, self.dims):
            index += int(k) * stride
            stride *= d
        return index

    def get(self, index: int) -> ConfigEntity:
        """The config at ``index`` (``0 <= index < len(self)``)."""
        if not 0 <= index < len(self):
            raise IndexError(f"config index {index} is outside the space (len={len(self)})")
        entities = OrderedDict()
        t = index
        for name, space in self.space_map.items():
            entities[name] = space[t % len(space)]
            t //= len(space)
        return ConfigEntity(index, None, entities, self)

    def index_of(self, entity_map: dict) -> int:
        """The index of the config holding these knob values (by value)."""
        knob = [space.index_of(entity_map[name]) for name, space in self.space_map.items()]
        return self.knob2point(knob)

    def __getitem__(self, name: str):
        """The current value of knob ``name`` (while collecting: its first candidate)."""
        return self._entity_map[name]

    def __iter__(self):
        return iter(self._entity_map)

    def __repr__(self) -> str:
        out = f"ConfigSpace (len={len(self)}, space_map=\n"
        for i, (name, space) in enumerate(self.space_map.items()):
            out += f"  {i:2d} {name}: {space}\n"
        return out + ")"


class ConfigEntity(ConfigSpace):
    """One point of a space: a value for every knob. Printed as TVM prints it:
    ``[('tile_f', [-1, 2, 16, 8]), ...],None,8726459``."""

    def __init__(self, index: int, code_hash, entity_map, space: ConfigSpace | None = None):
        super().__init__()
        self.index = int(index)
        self.code_hash = code_hash
        self._entity_map = OrderedDict(entity_map)
        self._collect = False
        self._space = space

    @property
    def space(self) -> ConfigSpace | None:
        return self._space

    def __len__(self) -> int:
        return len(self._space) if self._space is not None else 1

    def get_flatten_feature(self) -> np.ndarray:
        """The config as numbers: split extents, permutations, one-hot annotations and
        knob values (non-numeric knob values become their candidate index)."""
        fea: list = []
        for name, v in self._entity_map.items():
            if isinstance(v, SplitEntity):
                space = self._space.space_map.get(name) if self._space else None
                fea.extend(v.extents(space.product) if space is not None else v.size)
            elif isinstance(v, ReorderEntity):
                fea.extend(v.perm)
            elif isinstance(v, AnnotateEntity):
                for ann in v.anns:
                    onehot = [0.0] * len(ANNOTATIONS)
                    onehot[ANNOTATIONS.index(ann)] = 1.0
                    fea.extend(onehot)
            elif isinstance(v.val, (int, float, np.integer, np.floating)) and not isinstance(
                    v.val, bool):
                fea.append(float(v.val))
            else:
                space = self._space.space_map.get(name) if self._space else None
                fea.append(float(space.index_of(v)) if space is not None else 0.0)
        return np.asarray(fea, dtype=np.float32)

    def get_other_option(self) -> dict:
        """The values of the ``define_knob`` knobs by name."""
        return {k: v.val for k, v in self._entity_map.items()
                if isinstance(v, OtherOptionEntity)}

    def to_json_dict(self) -> dict:
        """The JSON form stored in records (``[name, kind, value]`` per knob)."""
        entity = []
        for name, v in self._entity_map.items():
            if isinstance(v, SplitEntity):
                entity.append([name, "sp", v.size])
            elif isinstance(v, ReorderEntity):
                entity.append([name, "re", v.perm])
            elif isinstance(v, AnnotateEntity):
                entity.append([name, "an", v.anns])
            else:
                entity.append([name, "ot", _jsonable(v.val)])
        return {"index": self.index, "code_hash": self.code_hash, "entity": entity}

    @staticmethod
    def from_json_dict(d: dict, space: ConfigSpace | None = None) -> ConfigEntity:
        """The inverse of :meth:`to_json_dict`."""
        entities = OrderedDict()
        for name, kind, value in d["entity"]:
            if kind not in ENTITY_TYPES:
                raise ValueError(f"unknown knob kind {kind!r} of {name!r}")
            entities[name] = ENTITY_TYPES[kind](value)
        return ConfigEntity(int(d["index"]), d.get("code_hash"), entities, space)

    def __eq__(self, other) -> bool:
        if not isinstance(other, ConfigEntity):
            return NotImplemented
        return [(k, _entity_key(v)) for k, v in self._entity_map.items()] == [
            (k, _entity_key(v)) for k, v in other._entity_map.items()]

    def __hash__(self) -> int:
        return hash(tuple((k, _entity_key(v)) for k, v in self._entity_map.items()))

    def __str__(self) -> str:
        items = ", ".join(f"({k!r}, {v!r})" for k, v in self._entity_map.items())
        return f"[{items}],{self.code_hash},{self.index}"

    __repr__ = __str__


class FallbackConfigEntity(ConfigSpace):
    """The config a template gets when no tuned one is known: every knob takes its first
    candidate (``cfg.is_fallback`` is True, so a template may pick better defaults)."""

    def __init__(self):
        super().__init__()
        self.code_hash = None

    @property
    def is_fallback(self) -> bool:
        return True

    def _add(self, space_class, name, axes, policy, **kwargs):
        if name not in self._entity_map:
            space = space_class(axes, policy, **kwargs)
            self.space_map[name] = space
            self._entity_map[name] = space[0]
        return None

    def fallback_split(self, name: str, constraints: Sequence[int]) -> None:
        """Pick for split knob ``name`` the candidate closest to ``constraints`` (inner
        extents; -1 entries free), as TVM's fallback helpers do."""
        space = self.space_map[name]
        best, best_score = None, None
        for e in space.entities:
            score = sum(abs(math.log2(max(a, 1)) - math.log2(max(b, 1)))
                        for a, b in zip(e.size[1:], constraints[1:]) if b != -1)
            if best_score is None or score < best_score:
                best, best_score = e, score
        self._entity_map[name] = best

    def __str__(self) -> str:
        items = ", ".join(f"({k!r}, {v!r})" for k, v in self._entity_map.items())
        return f"[{items}],{self.code_hash}"

    __repr__ = __str__


def _jsonable(v):
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    if isinstance(v, tuple):
        return [_jsonable(x) for x in v]
    return v
