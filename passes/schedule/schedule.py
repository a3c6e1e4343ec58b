"""The schedule API users know from TVM's te, recording passes as it goes.

``s = te.create_schedule(out.op)`` makes the unscheduled tensor IR; every primitive
(``s[C].split(...)``, ``s.cache_read(...)``, ...) builds the matching pass object, applies
it at once and appends it to ``s.pipeline``, which replays to the same IR. Loop handles
are the ``<stage>.<loop>`` references the passes use (:mod:`.names`).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

from ...ir.te import ComputeOp, IterVar, Operation, PlaceholderOp, Tensor
from ...ir.to_ir import to_ir_with_names
from ...ir.traversal import enclosing_loops
from .. import gc_pause
from ..base import Pass
from ..pipeline import Pipeline, SchedulePipeline
from .async_copy import AsyncCopy
from .bind import Bind
from .cache_read import CacheRead
from .cache_write import CacheWrite
from .common import ScheduleError, paths_of
from .compute_at import ComputeAt
from .compute_inline import ComputeInline
from .dag import ScheduleDAG
from .fuse import Fuse
from .layout_panels import LayoutPanels
from .names import cache_name, copy_axes, loop_ref, resolve_ref, rfactor_name
from .pragma import Pragma
from .reorder import Reorder
from .rfactor import RFactor
from .set_scope import SetScope
from .software_pipeline import SoftwarePipeline
from .split import Split
from .storage_align import StorageAlign
from .swizzle import Swizzle
from .tensorize import Tensorize
from .unroll import Unroll
from .vectorize import Vectorize


class LoopHandle:
    """A loop of a stage, as returned by ``op.axis``, ``split`` and ``fuse``."""

    __slots__ = ("stage", "name", "schedule")

    def __init__(self, stage: str, name: str, schedule=None):
        self.stage = stage
        self.name = name
        self.schedule = schedule

    @property
    def extent(self) -> int:
        """The loop's current extent (needs the schedule the handle came from)."""
        if self.schedule is None:
            raise ScheduleError(f"loop handle {self.ref} is not tied to a schedule")
        from .common import find_loop

        return find_loop(self.schedule.module.main, self.ref)[0][-1].extent

    @property
    def ref(self) -> str:
        return loop_ref(self.stage, self.name)

    @property
    def var(self):
        return self

    def __repr__(self):
        return f"LoopHandle({self.ref})"


class _OpView:
    """``s[C].op``: the stage's original axes as loop handles."""

    def __init__(self, stage: Stage, axis, reduce_axis, name: str, tensor=None):
        self._stage = stage
        self.axis = tuple(axis)
        self.reduce_axis = tuple(reduce_axis)
        self.name = name
        self._tensor = tensor

    @property
    def num_outputs(self) -> int:
        """The outputs of the stage: several for a tuple compute's stage, else one."""
        op = getattr(self._tensor, "op", None)
        return op.num_outputs if isinstance(op, ComputeOp) else 1

    def output(self, index: int = 0):
        """The stage's ``index``-th output tensor (as ``te.Tensor.op.output``)."""
        op = getattr(self._tensor, "op", None)
        if isinstance(op, ComputeOp) and op.num_outputs > 1:
            return op.output(index)
        if index != 0:
            raise ScheduleError(f"stage {self.name} has one output; asked for output {index}")
        return self._tensor

    @property
    def input_tensors(self) -> list:
        """The tensors the stage's computation reads, in order of first appearance (as
        ``te.Tensor.op.input_tensors``)."""
        op = getattr(self._tensor, "op", None)
        if op is None or op is self:
            raise ScheduleError(f"stage {self.name} was made by the schedule (a cache stage); "
                                "its input is the tensor given to cache_read / cache_write")
        return list(op.input_tensors)

    def __repr__(self):
        return f"op({self.name})"


class StageTensor:
    """A tensor made by a schedule (``cache_read`` / ``cache_write``); index ``s`` with it."""

    def __init__(self, schedule: Schedule, block: str, shape, dtype):
        self.schedule = schedule
        self.block = block
        self.name = block
        self.shape = tuple(shape)
        self.dtype = dtype

    @property
    def op(self):
        return self.schedule[self].op

    def __repr__(self):
        return f"StageTensor({self.block}, {list(self.shape)})"


class Stage:
    """One stage (a block of the tensor IR) of a schedule."""

    def __init__(self, schedule: Schedule, block: str, axis_names, reduce_names, tensor=None):
        self.schedule = schedule
        self.block = block
        self._axis_names = list(axis_names)
        self._reduce_names = list(reduce_names)
        self._tensor = tensor

    @property
    def name(self) -> str:
        return self.block

    @property
    def op(self) -> _OpView:
        return _OpView(
            self,
            [LoopHandle(self.block, n, self.schedule) for n in self._axis_names],
            [LoopHandle(self.block, n, self.schedule) for n in self._reduce_names],
            self.block,
            self._tensor,
        )

    @property
    def leaf_iter_vars(self) -> list:
        return [LoopHandle(self.block, n, self.schedule) for n in self._loop_names()]

    def _loop_names(self) -> list:
        paths = paths_of(self.schedule._module.main.body)
        if self.block not in paths:
            raise ScheduleError(f"stage {self.block} no longer exists (was it inlined?)")
        return [n.var.name for n in enclosing_loops(paths[self.block])]

    def _apply(self, p: Pass) -> list:
        """Apply a pass; return the loop names it created on this stage's path."""
        self.schedule.flush_touching((self.block,), structural=True)
        before = set(self._loop_names())
        self.schedule.apply(p, touches=(self.block,), structural=True)
        return [n for n in self._loop_names() if n not in before]

    def _ref(self, h) -> str:
        """The reference of a loop handle, or of a loop name (or reference) of this stage."""
        if isinstance(h, LoopHandle):
            return h.ref
        if isinstance(h, str):
            return h if resolve_ref(h, (self.block,)) is not None else loop_ref(self.block, h)
        if isinstance(h, IterVar):
            # the tensor's own axes (``C.op.axis[0]``) name the stage's loops by position
            op = getattr(self._tensor, "op", None)
            for axes, names in ((getattr(op, "axis", ()), self._axis_names),
                                (getattr(op, "reduce_axis", ()), self._reduce_names)):
                for i, ax in enumerate(axes):
                    if ax is h and i < len(names):
                        return loop_ref(self.block, names[i])
            raise ScheduleError(f"{h!r} is not an axis of stage {self.block}'s tensor; pass an "
                                f"axis of s[{self.block}].op or of the tensor it computes")
        raise ScheduleError(f"expected a loop handle of stage {self.block}, got {h!r}")

    # -- primitives ----------------------------------------------------------------------
    def split(self, parent, factor: int | None = None, nparts: int | None = None):
        if (factor is None) == (nparts is None):
            raise ScheduleError("split needs exactly one of factor= or nparts=")
        if factor is not None:
            p = Split(self._ref(parent), factors=(int(factor),))
        else:
            p = Split(self._ref(parent), nparts=int(nparts))
        new = self._apply(p)
        return (LoopHandle(self.block, new[0], self.schedule),
                LoopHandle(self.block, new[1], self.schedule))

    def fuse(self, *args):
        if len(args) == 1 and isinstance(args[0], (list, tuple)):
            args = tuple(args[0])
        if len(args) == 1:
            return args[0]
        new = self._apply(Fuse(tuple(self._ref(a) for a in args)))
        return LoopHandle(self.block, new[0], self.schedule)

    def reorder(self, *args):
        if len(args) == 1 and isinstance(args[0], (list, tuple)):
            args = tuple(args[0])
        self.schedule.apply(Reorder(tuple(self._ref(a) for a in args)),
                            touches=(self.block,), structural=True)

    def tile(self, x_parent, y_parent, x_factor: int, y_factor: int):
        """Split two loops and reorder to ``(xo, yo, xi, yi)``, as TVM's ``tile``."""
        xo, xi = self.split(x_parent, factor=x_factor)
        yo, yi = self.split(y_parent, factor=y_factor)
        self.reorder(xo, yo, xi, yi)
        return xo, yo, xi, yi

    def parallel(self, ivar):
        """Not a GPU loop kind: raises, saying to bind instead."""
        raise ScheduleError(
            f"stage {self.block}: parallel({self._ref(ivar)}) has no meaning in a GPU kernel "
            f"(a kernel has no parallel loops); bind the loop to blockIdx.x or threadIdx.x "
            f"with s[{self.block}].bind(loop, te.thread_axis(\"blockIdx.x\")) instead")

    def set_scope(self, scope: str):
        """Keep this intermediate stage's buffer in ``scope`` ("shared" or "local"; see the
        ``set_scope`` pass), as TVM's ``s[B].set_scope`` does."""
        self.schedule.apply(SetScope(self.block, str(scope)), touches=(self.block,))

    def bind(self, ivar, thread_ivar):
        tag = thread_ivar.thread_tag if isinstance(thread_ivar, IterVar) else str(thread_ivar)
        self.schedule.apply(Bind(self._ref(ivar), tag), touches=(self.block,))

    def unroll(self, ivar):
        self.schedule.apply(Unroll(self._ref(ivar)), touches=(self.block,))

    def vectorize(self, ivar):
        self.schedule.apply(Vectorize(self._ref(ivar)), touches=(self.block,))

    def pragma(self, ivar, key: str, value=True):
        v = value if isinstance(value, bool) else int(value)
        self.schedule.apply(Pragma(self._ref(ivar), key, v), touches=(self.block,))

    def compute_at(self, parent: Stage, ivar):
        p = ComputeAt(self.block, parent._ref(ivar))
        # the readers as they will be: a pending inline of a reader makes the readers of
        # that reader read this stage (softmax's exp inlined into the sum and the
        # normalization), so those inlines go first, transitively
        seen: set = set()
        while True:
            readers = self.schedule.readers_of(self.block)
            if readers <= seen:
                break
            seen |= readers
            self.schedule.flush_touching(readers, only=ComputeInline)
        if self.block in self.schedule._shared_stages:
            self.schedule.defer(p, {self.block}, {parent.block})
        else:
            self.schedule.apply(p, touches={self.block, parent.block} | readers)

    def compute_inline(self):
        # a tuple compute cannot be inlined: say so now, not when the inline is applied
        from .compute_inline import check_single_output

        paths = paths_of(self.schedule._module.main.body)
        if self.block in paths:
            check_single_output(paths[self.block][-1], "compute_inline")
        # te schedules are declarative: a stage inlined here may still be cached
        # (cache_read) by a later primitive, so the inline waits until a primitive needs it
        self.schedule.defer(ComputeInline(self.block), {self.block})

    def compute_root(self):
        """Compute this stage at the root again, in its own loop nest: undoes its
        ``compute_inline`` or ``compute_at`` (TVM's ``compute_root``); a stage never attached
        is already at the root. Undoing one already applied replays the schedule without it;
        a later primitive that needed the attachment is reported."""
        self.schedule.uncompute(self.block)

    def storage_align(self, axis, factor: int, offset: int):
        dim = self._axis_names.index(axis.name) if isinstance(axis, LoopHandle) else int(axis)
        self.schedule.apply(StorageAlign(self.block, dim, int(factor), int(offset)),
                            touches=(self.block,))

    def async_copy(self):
        """Fill this shared-memory stage with cp.async (see the ``async_copy`` pass)."""
        self.schedule.apply(AsyncCopy(self.block), touches=(self.block,))

    def swizzle(self, bits: int = 3):
        """XOR-swizzle this shared stage's 16-byte chunks (see the ``swizzle`` pass)."""
        self.schedule.apply(Swizzle(self.block, int(bits)), touches=(self.block,))

    def layout_panels(self, width: int):
        """Store this stage's buffer with its last dimension in panels of ``width``
        elements, the panel index outermost (see the ``layout_panels`` pass)."""
        self.schedule.apply(LayoutPanels(self.block, int(width)), touches=(self.block,))

    def pipeline(self, loop, stages: int):
        """Software-pipeline ``loop`` with ``stages`` buffers per shared stage loaded in it
        (see the ``software_pipeline`` pass)."""
        self.schedule.apply(SoftwarePipeline(self._ref(loop), int(stages)),
                            touches=(self.block,))

    def tensorize(self, ivar, intrin: str):
        """Run the nest under ``ivar`` as the tensor intrinsic ``intrin`` (its name in
        ``ir/intrin``'s registry)."""
        name = intrin if isinstance(intrin, str) else intrin.name
        # the check needs the nest as it will be: pending inlines and compute_ats first
        self.schedule._flush()
        self.schedule.apply(Tensorize(self._ref(ivar), name), touches=(self.block,))

    def __repr__(self):
        return f"Stage({self.block})"


class Schedule:
    """A schedule of the computation that produces ``outputs``."""

    def __init__(self, outputs):
        outs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
        tensors = []
        for o in outs:
            op = o if isinstance(o, Operation) else getattr(o, "op", None)
            if not isinstance(o, (Tensor, Operation)) or not isinstance(op, ComputeOp):
                raise ScheduleError(f"create_schedule takes computed tensors or ops, got {o!r}")
            # every output of a tuple compute is an output of the schedule: its one stage
            # writes them all
            for k in range(op.num_outputs):
                if op.output(k) not in tensors:
                    tensors.append(op.output(k))
        inputs = []
        seen = set()

        def visit(op):
            if id(op) in seen:
                return
            seen.add(id(op))
            for t in op.input_tensors:
                visit(t.op)
            if isinstance(op, PlaceholderOp):
                inputs.append(op.output(0))

        for t in tensors:
            visit(t.op)
        visit = None  # it calls itself: a cycle left to the collector otherwise
        self.outputs = tensors
        self.dag = ScheduleDAG(inputs + tensors)
        self._buffer_names: dict = {}
        self._module, names = to_ir_with_names(self.dag, buffer_names=self._buffer_names)
        self.initial_module = self._module  # the unscheduled IR the pipeline starts from
        self._names = names
        self._pipeline = SchedulePipeline([])
        # compute_at of shared-memory stages waits until the stage itself or its target
        # stage is touched again, or the schedule is read: its region covers every thread
        # of the block, which TVM schedules often bind only after the compute_at
        self._pending: list = []
        self._shared_stages: set = set()
        self._stages: dict = {}
        paths = paths_of(self._module.main.body)
        for op in self.dag.ops:
            if isinstance(op, ComputeOp):
                # the loop names to_ir gave (unique in the function: i0, i0_1, ...)
                loops = [n.var.name for n in enclosing_loops(paths[names[id(op)]])]
                n_axis = len(op.axis)
                self._stages[id(op)] = Stage(
                    self, names[id(op)], loops[:n_axis], loops[n_axis:], op.output(0))
        self._by_block = {st.block: st for st in self._stages.values()}
        _note_made(self)

    @property
    def args(self) -> list:
        """The tensors in the order of the function's parameters (inputs, then outputs)."""
        return list(self.dag.tensors)

    @property
    def module(self):
        """The scheduled tensor IR (after every primitive so far)."""
        self._flush()
        return self._module

    @property
    def pipeline(self) -> SchedulePipeline:
        """The primitives as a pass pipeline, in the order they were applied."""
        self._flush()
        return self._pipeline

    def apply(self, passes: Pass | Pipeline | str, touches=(),
              only: type[Pass] | None = None, structural: bool = False):
        """Apply passes (a pass, a pipeline, or pipeline text as a user or a record gives
        it) and record them. ``touches`` names the stages they involve: pending primitives
        on those stages are applied first (only those that are ``only`` passes, when
        given). ``structural`` says they change the loops of the touched stages, which
        pending compute_ats into those loops must see first."""
        self.flush_touching(touches, only, structural)
        self._apply_now(passes)
        return self

    def flush_touching(self, touches, only: type[Pass] | None = None,
                       structural: bool = False) -> None:
        """Apply the pending primitives (in order) up to the last one that involves any of
        the stages ``touches``."""
        touched = set(touches)
        upto = -1
        for k, (p, stages, targets) in enumerate(self._pending):
            hit = stages & touched or (structural and targets & touched)
            if hit and (only is None or isinstance(p, only)):
                upto = k
        if upto >= 0:
            todo, self._pending = self._pending[: upto + 1], self._pending[upto + 1:]
            for t, _, _ in todo:
                self._apply_now(t)

    def readers_of(self, name: str) -> set:
        """Names of the stages that read the buffer ``name`` in the current IR (for a tuple
        compute's stage, any of the buffers it writes)."""
        from .cache_read import find_buffer
        from .compute_at import output_buffers, reads_any

        paths = paths_of(self._module.main.body)
        try:
            bufs = [find_buffer(self._module.main, name)]
        except ScheduleError:
            if name not in paths:
                return set()
            bufs = output_buffers(paths[name][-1])
        return {b for b, p in paths.items() if reads_any(p[-1], bufs)}

    def uncompute(self, block: str) -> None:
        """Drop every ``compute_inline`` / ``compute_at`` of stage ``block`` (pending or
        applied), so that it is computed at the root (see :meth:`Stage.compute_root`)."""
        def attaches(p) -> bool:
            return isinstance(p, (ComputeAt, ComputeInline)) and str(p.stage) == block

        self._pending = [entry for entry in self._pending if not attaches(entry[0])]
        if not any(attaches(p) for p in self._pipeline):
            return
        kept = [p for p in self._pipeline if not attaches(p)]
        module = to_ir_with_names(self.dag)[0]
        for p in kept:
            try:
                module = p(module)
            except Exception as e:
                raise ScheduleError(
                    f"compute_root({block}): {p.text} was applied after the stage was attached "
                    f"and does not apply without the attachment ({e}); call compute_root "
                    "before scheduling the loops it made") from e
        self._module = module
        self._pipeline = SchedulePipeline(kept)

    def defer(self, p: Pass, stages, targets=()) -> None:
        """Queue a primitive on ``stages`` whose loop references point into ``targets``."""
        self._pending.append((p, set(stages), set(targets)))

    def _flush(self) -> None:
        todo, self._pending = self._pending, []
        for p, _, _ in todo:
            self._apply_now(p)

    def _apply_now(self, passes: Pass | Pipeline | str) -> None:
        # a schedule holds no lowering pass (refused here, before any runs)
        pipe = SchedulePipeline.of(passes)
        for p in pipe:
            self._module = p(self._module)
        self._pipeline = self._pipeline + pipe

    def __getitem__(self, key) -> Stage:
        if isinstance(key, Stage):
            return key
        if isinstance(key, Tensor):
            key = key.op
        if isinstance(key, Operation):
            if id(key) not in self._stages:
                raise ScheduleError(f"{key.name} is not a computed stage of this schedule")
            return self._stages[id(key)]
        if isinstance(key, StageTensor):
            key = key.block
        if isinstance(key, _OpView):
            key = key.name
        if isinstance(key, str):
            if key not in self._by_block:
                raise ScheduleError(
                    f"no stage {key!r}; stages: {', '.join(self._by_block)}"
                )
            return self._by_block[key]
        raise ScheduleError(f"cannot index a schedule with {key!r}")

    def _block_of(self, t) -> str:
        if isinstance(t, StageTensor):
            return t.block
        if isinstance(t, Tensor):
            return _param_or_stage_name(self, t)
        if isinstance(t, str):
            return t
        raise ScheduleError(f"expected a tensor, got {t!r}")

    def cache_read(self, tensor, scope: str, readers) -> StageTensor:
        readers = readers if isinstance(readers, (list, tuple)) else [readers]
        names = [self[r].block if not isinstance(r, str) else r for r in readers]
        buf = self._block_of(tensor)
        before = set(paths_of(self._module.main.body))
        # a pending inline of a stage that reads ``buf`` must happen first, so that the
        # readers read ``buf`` directly (an inline of ``buf`` itself waits: its copy stage
        # computes it)
        touched = self.readers_of(buf) - {buf}
        self.apply(CacheRead(buf, scope, tuple(names)), touches=touched, only=ComputeInline)
        new = [b for b in paths_of(self._module.main.body) if b not in before][0]
        if scope == "shared":
            self._shared_stages.add(new)
        shape = tensor.shape
        st = Stage(self, new, copy_axes(len(shape)), [])
        self._by_block[new] = st
        return StageTensor(self, new, shape, tensor.dtype)

    def cache_write(self, tensor, scope: str):
        """The stage of ``tensor`` computes into a ``scope`` buffer and a copy stage (which
        keeps the stage's name) writes ``tensor`` from it; returns the cache's tensor.

        For a tuple compute pass the list of all its outputs (as in TVM): the stage caches
        each in its own buffer, one copy stage writes them all, and the list of the
        caches' tensors is returned."""
        if isinstance(tensor, (list, tuple)):
            tensors = list(tensor)
            if not tensors:
                raise ScheduleError("cache_write takes a tensor or a list of tensors, got []")
            ops = {id(getattr(t, "op", None)) for t in tensors}
            op = getattr(tensors[0], "op", None)
            if len(ops) != 1 or not isinstance(op, ComputeOp):
                raise ScheduleError("cache_write of a list takes the outputs of one tuple "
                                    f"compute, got {tensors!r}")
            if sorted(t.value_index for t in tensors) != list(range(op.num_outputs)):
                raise ScheduleError(
                    f"cache_write of {op.name}: pass all {op.num_outputs} of its outputs "
                    f"(as a list), got {len(tensors)}")
        else:
            op = getattr(tensor, "op", None)
            if isinstance(op, Operation) and op.num_outputs > 1:
                names = ", ".join(op.output(k).name for k in range(op.num_outputs))
                raise ScheduleError(
                    f"cache_write of {tensor.name}: {op.name} is a tuple compute with "
                    f"{op.num_outputs} outputs, which one stage computes together; pass the "
                    f"list of all of them: s.cache_write([{names}], {scope!r})")
            tensors = [tensor]
        cached_tensors = self._cache_write(tensors[0], scope)
        if len(tensors) == 1 and not isinstance(tensor, (list, tuple)):
            return cached_tensors[0]
        return [cached_tensors[t.value_index] for t in tensors]

    def _cache_write(self, tensor, scope: str) -> list:
        stage = self[tensor]
        old_block = stage.block
        self.apply(CacheWrite(old_block, scope), touches=(old_block,))
        new_name = cache_name(old_block, scope)
        if scope == "shared":
            self._shared_stages.add(new_name)
        cached = Stage(self, new_name, stage._axis_names, stage._reduce_names)
        # the original stage is now the copy stage with plain axes ax0..
        copy = Stage(self, old_block, copy_axes(len(tensor.shape)), [], stage._tensor)
        self._by_block[new_name] = cached
        self._by_block[old_block] = copy
        for k, v in list(self._stages.items()):
            if v is stage:
                self._stages[k] = copy
        op = getattr(tensor, "op", None)
        dtypes = op.dtypes if isinstance(op, ComputeOp) else (tensor.dtype,)
        return [StageTensor(self, new_name, tensor.shape, d) for d in dtypes]

    def implicit_gemm(self, tensor, pad_m: int = 1, pad_n: int = 1, pad_k: int = 1,
                      b_layout: str = "kn") -> tuple:
        """Compute the reduction of ``tensor`` (a convolution) as a matrix product (the
        ``implicit_gemm`` pass); returns the stage tensors ``(A, B, gemm)``: the operands
        as matrices (to inline into their shared copies) and the product, whose axes are
        ``m, n`` and reduce axis ``k``. ``s[tensor]`` is then a copy of the product."""
        from ...ir.traversal import block_names
        from .implicit_gemm import ImplicitGemm

        stage = self[tensor]
        before = set(paths_of(self._module.main.body))
        self.apply(ImplicitGemm(stage.block, int(pad_m), int(pad_n), int(pad_k), b_layout),
                   touches=(stage.block,), structural=True)
        body = self._module.main.body
        paths = paths_of(body)
        new = [b for b in block_names(body) if b not in before]
        out = []
        for name in new:
            loops = [n.var.name for n in enclosing_loops(paths[name])]
            red = ["k"] if name == new[-1] else []
            st = Stage(self, name, [x for x in loops if x not in red], red)
            self._by_block[name] = st
            blk = paths[name][-1]
            out.append(StageTensor(self, name, blk.body.buffer.shape, blk.body.buffer.dtype))
        stage._axis_names = [n.var.name for n in enclosing_loops(paths[stage.block])]
        stage._reduce_names = []
        return tuple(out)

    def rfactor(self, tensor, axis, factor_axis: int = 0) -> StageTensor:
        """Factor the reduction of ``tensor`` over its reduce loop ``axis``: returns the
        partial-result tensor (named by :func:`~.names.rfactor_name`); ``s[tensor]`` then
        reduces over the new reduce axis (``s[tensor].op.reduce_axis``), which may be bound
        to threads."""
        stage = self[tensor]
        ref = stage._ref(axis)
        self.apply(RFactor(ref, factor_axis=int(factor_axis)), touches=(stage.block,),
                   structural=True)
        loop = resolve_ref(ref, (stage.block,))[1]
        rf_name = rfactor_name(stage.block)
        paths = paths_of(self._module.main.body)
        rf_loops = [n.var.name for n in enclosing_loops(paths[rf_name])]
        s_names = [n for n in stage._axis_names if n in rf_loops]
        if len(s_names) != len(stage._axis_names):
            s_names = [n for n in rf_loops if n != loop][: len(stage._axis_names)]
        rf_axes = list(s_names)
        rf_axes.insert(factor_axis, loop)
        rf_red = [n for n in rf_loops if n not in rf_axes]
        rf_stage = Stage(self, rf_name, rf_axes, rf_red)
        self._by_block[rf_name] = rf_stage
        # the stage itself now has fresh loops: its axes, then the factored reduce loop
        fin = [n.var.name for n in enclosing_loops(paths[stage.block])]
        stage._axis_names = fin[:-1]
        stage._reduce_names = fin[-1:]
        shape = list(tensor.shape)
        shape.insert(factor_axis, _loop_extent(paths[rf_name], loop))
        return StageTensor(self, rf_name, shape, tensor.dtype)

    def __repr__(self):
        return f"Schedule({', '.join(self._by_block)})"


def _loop_extent(path, name) -> int:
    return next(n.extent for n in enclosing_loops(path) if n.var.name == name)


def _param_or_stage_name(s: Schedule, t: Tensor) -> str:
    """The IR buffer of a te tensor: its stage's name, or for an output of a tuple compute
    that output's buffer (``<stage>_v<k>``)."""
    if t.op.num_outputs > 1 and (id(t.op), t.value_index) in s._buffer_names:
        return s._buffer_names[(id(t.op), t.value_index)]
    if id(t.op) in s._stages:
        return s._stages[id(t.op)].block
    if id(t.op) in s._names:
        return s._names[id(t.op)]
    raise ScheduleError(f"tensor {t.name} is not part of this schedule")


_RECORDING: contextvars.ContextVar[list | None] = contextvars.ContextVar(
    "ptxforge_schedules_made", default=None)


def _note_made(s: Schedule) -> None:
    made = _RECORDING.get()
    if made is not None:
        made.append(s)


@contextlib.contextmanager
def record_schedules() -> Iterator[list]:
    """Collect every :class:`Schedule` created inside the block (in this thread or task),
    in creation order: a builder that made its pipeline through a te schedule can take the
    schedule's module instead of applying the same passes again."""
    made: list = []
    token = _RECORDING.set(made)
    try:
        # the schedule's passes run as it is made: the collector waits until it is done
        with gc_pause.paused():
            yield made
    finally:
        _RECORDING.reset(token)


def create_schedule(ops) -> Schedule:
    """A schedule for the computation of ``ops`` (an op, a tensor, or a list of them)."""
    return Schedule(ops)
