"""The IR verifier: the invariants every pass must keep.

:func:`verify` checks a module (or one function) and raises :class:`IRVerifyError` at the
first broken invariant. The message names the pass that broke it (when given), says what is
wrong with the printed names of the values involved, and shows the printed IR around the
faulty statement, with an arrow at its first line.

Checked at every level:

* scoping: a var is used only inside the ``for``, block or ``let`` that defines it; a
  buffer only where it is a parameter or inside its ``alloc``;
* SSA: no var or buffer is defined twice in a function;
* types: index count equals the buffer's rank, indices and bindings are integers, a store's
  value has the buffer's dtype, ``if`` and block predicates are bool, ``select`` branches and
  the operands of binary ops and comparisons agree; front-end nodes never appear;
* a thread loop is bound to a hardware index (blockIdx.x/y/z, threadIdx.x/y/z);
* fragments (``warp`` buffers) and tensorized loop nests follow the rules of
  ``ir/intrin/verify.py`` (accessed only by tensor intrinsics, run by whole warps with
  warp-uniform operands, shapes that match the intrinsic).

Device level (``Level.KERNEL``): no blocks, no vthread loops, no global allocations, every
buffer 1-D (unless the kernel's ``launch.flat`` is False: split off from the host before its
buffers are flattened), the launch and shared-memory limits of the current target
(:func:`ptxforge.target.current_target`; shared memory, static plus dynamic, up to the
opt-in limit (the static limit is checked by ``validate_gpu`` once ``plan_dynamic_shared``
has run), every dynamically placed buffer aligned to 16 bytes,
inside ``launch.dynamic_shared_bytes`` and overlapping no other), no thread loop longer than
the launch extent of its tag, and no thread loop nested in
another loop bound to the same index. Scheduled IR may nest those: a cache stage computed
inside a ``threadIdx.x`` loop and bound to ``threadIdx.x`` itself is cooperative fetching
(TVM's ``threadIdx.x_1``), which the lowering pass ``merge_thread_loops`` folds into the
outer loop.

Host level (``Level.HOST``): only ``alloc`` of global buffers and ``launch`` of kernels of the
module, with as many arguments as the kernel has parameters, each of the parameter's dtype
and element count.
"""

from __future__ import annotations

from collections.abc import Callable

from ..target import Target, as_target
from . import dtype as dt
from .attrs import Level
from .expr import (
    Bin,
    Call,
    Cast,
    Cmp,
    Expr,
    FloatImm,
    IntImm,
    IRError,
    Load,
    Not,
    Reduce,
    Select,
    TensorRead,
    Var,
    children,
)
from .exprprint import expr_str
from .intrin import ANNOTATION
from .intrin.verify import check_fragment_access, check_fragment_alloc, check_tensorized
from .printer import FuncPrinter
from .stmt import (
    Alloc,
    AsyncCommit,
    AsyncCopy,
    AsyncWait,
    Barrier,
    Block,
    Buffer,
    For,
    If,
    Launch,
    Let,
    Module,
    PrimFunc,
    Seq,
    Stmt,
    Store,
    WgmmaSync,
)
from .stmt_tma import TMA_STMTS, TensorMap
from .verify_tma import check_not_tensor_map, check_tma_stmt

HARDWARE_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z",
                 "threadIdx.x", "threadIdx.y", "threadIdx.z")

DYNAMIC_SHARED_ALIGN = 16
"""Byte alignment of every buffer placed in dynamic shared memory (a 16-byte vector access
must not straddle a buffer's start)."""

CONTEXT_LINES = 3
"""Lines shown before and after the faulty statement's first line."""


class IRVerifyError(IRError):
    """A broken IR invariant.

    ``pass_name`` is the pass after which it was found (or None), ``function`` the
    function's name, ``reason`` the one-line description without the IR context.
    """

    def __init__(self, message: str, reason: str, pass_name: str | None = None,
                 function: str | None = None):
        super().__init__(message)
        self.reason = reason
        self.pass_name = pass_name
        self.function = function


Namer = Callable[[object], str]


def verify(ir: Module | PrimFunc, pass_name: str | None = None,
           target: str | Target | None = None) -> None:
    """Check ``ir`` (a module, or one function) and raise :class:`IRVerifyError` if broken.

    ``pass_name`` names the pass that produced ``ir``; it heads the error message. A lone
    function is checked without a module, so a host function's launches are checked only
    for argument scoping, not against the kernels. Kernels are checked against ``target``'s
    limits (default: the current target).
    """
    target = as_target(target)
    if isinstance(ir, Module):
        module, funcs = ir, list(ir.functions.values())
    elif isinstance(ir, PrimFunc):
        module, funcs = None, [ir]
    else:
        reason = f"verify takes a Module or a PrimFunc, got {type(ir).__name__}"
        raise IRVerifyError(reason, reason, pass_name)
    for f in funcs:
        _FuncVerifier(f, module, pass_name, target).run()


class _FuncVerifier:
    def __init__(self, func: PrimFunc, module: Module | None, pass_name: str | None,
                 target: Target):
        self.func = func
        self.module = module
        self.pass_name = pass_name
        self.target = target
        self.kind = func.level.value
        # a kernel split off before its buffers are flattened says so with launch.flat
        self.flat = self.kind == "kernel" and func.launch.flat
        self.dyn_spans: list[tuple[int, int, Buffer]] = []  # dynamic shared placements
        self._lifetimes = None  # shared live ranges, for overlapping placements
        self.vars: set[int] = set()  # ids of vars in scope
        self.bufs: set[int] = set()  # ids of buffers in scope
        self.defined: set[int] = set()  # ids of every var and buffer defined so far
        self.hw_loops: dict[str, For] = {}  # hardware tag -> the enclosing loop bound to it
        self.launch: dict[str, int] = {}  # hardware tag -> launch extent (kernels)
        self.shared_bytes = 0
        self.intrin_loop: For | None = None  # the enclosing tensorized loop, if any
        # pre-order numbers of the enclosing statements (they index FuncPrinter.spans) and
        # whether each is a Seq, which has no line of its own to show as context
        self.path: list[int] = []
        self.path_is_seq: list[bool] = []
        self.count = 0

    # -- reporting -------------------------------------------------------------------------
    def fail(self, describe: Callable[[Namer], str], at_function: bool = False):
        """Raise the error; ``describe(name)`` words it with the printed names of values."""
        printer = FuncPrinter()
        try:
            printer.func(self.func)
            lines, spans = printer.lines, printer.spans
        except Exception:  # the context is a courtesy; the error below still raises
            lines, spans = [], []
        reason = describe(printer.name)
        head = "IR verification failed"
        if self.pass_name:
            head += f" after pass '{self.pass_name}'"
        message = f"{head}: in function @{self.func.name}: {reason}"
        if lines:
            fault = None if at_function or not self.path else self.path[-1]
            parent = None
            if fault is not None:
                outer = [k for k, seq in zip(self.path[:-1], self.path_is_seq[:-1]) if not seq]
                parent = outer[-1] if outer else None
            message += "\n" + _context(lines, spans, fault, parent)
        raise IRVerifyError(message, reason, self.pass_name, self.func.name)

    # -- function level --------------------------------------------------------------------
    def run(self) -> None:
        f = self.func
        for b in f.params:
            if not isinstance(b, Buffer):
                self.fail(lambda n, b=b: f"parameter {b!r} is not a Buffer", True)
            self.define(b, "buffer", True)
            if b.scope != "global":
                self.fail(lambda n, b=b: f"parameter {n(b)} is in {b.scope} memory; function "
                                         "parameters are global buffers", True)
            # a tensor map keeps the tensor's dims: its map describes them
            if self.flat and b.ndim != 1 and not isinstance(b, TensorMap):
                self.fail(lambda n, b=b: f"kernel parameter {n(b)} has shape {list(b.shape)}; "
                                         "device IR buffers are flat (1-D)", True)
            self.bufs.add(id(b))
        if self.kind == "kernel":
            self.check_launch_config()
        self.stmt(f.body)

    def check_launch_config(self) -> None:
        launch, t = self.func.launch, self.target
        grid, block = launch.grid, launch.block
        threads = launch.threads_per_block
        if threads > t.max_threads_per_block:
            self.fail(lambda n: f"launch limit exceeded: {threads} threads per block "
                      f"(block = {block}); the limit is {t.max_threads_per_block}", True)
        for axis, (g, b, gmax, bmax) in enumerate(zip(grid, block, t.max_grid_dim,
                                                      t.max_block_dim)):
            xyz = "xyz"[axis]
            if b > bmax:
                self.fail(lambda n, xyz=xyz, b=b, bmax=bmax: f"launch limit exceeded: "
                          f"blockDim.{xyz} = {b}; the limit is {bmax}", True)
            if g > gmax:
                self.fail(lambda n, xyz=xyz, g=g, gmax=gmax: f"launch limit exceeded: "
                          f"gridDim.{xyz} = {g}; the limit is {gmax}", True)
            self.launch[f"blockIdx.{xyz}"] = g
            self.launch[f"threadIdx.{xyz}"] = b
        optin = t.max_shared_memory_per_block_optin
        if launch.dynamic_shared_bytes > optin:
            self.fail(lambda n: f"launch limit exceeded: {launch.dynamic_shared_bytes} bytes "
                      f"of dynamic shared memory per block; {t.arch} allows at most {optin} "
                      "(with the opt-in)", True)

    # -- statements ------------------------------------------------------------------------
    def define(self, obj, what: str, at_function: bool = False) -> None:
        if id(obj) in self.defined:
            self.fail(lambda n: f"{what} {n(obj)} is defined twice; every var and buffer is "
                                "defined once (SSA): give the copy a new object",
                      at_function)
        self.defined.add(id(obj))

    def stmt(self, s: Stmt) -> None:
        self.path.append(self.count)
        self.path_is_seq.append(isinstance(s, Seq))
        self.count += 1
        self.check_stmt(s)
        self.path.pop()
        self.path_is_seq.pop()

    def check_stmt(self, s: Stmt) -> None:
        if self.kind == "host" and not isinstance(s, (Seq, Alloc, Launch)):
            self.fail(lambda n: f"a host function holds only alloc, launch and sequences of "
                                f"them; found {type(s).__name__}")
        if isinstance(s, Seq):
            for c in s.stmts:
                self.stmt(c)
        elif isinstance(s, Store):
            self.check_access(s.buffer, s.indices, "store to")
            for e in s.indices + (s.value,):
                self.expr(e)
            if s.value.dtype != s.buffer.dtype:
                self.fail(lambda n: f"store to {n(s.buffer)} ({s.buffer.dtype}) of a "
                                    f"{s.value.dtype} value {expr_str(s.value, n, 'ir')}")
        elif isinstance(s, For):
            self.check_for(s)
        elif isinstance(s, Block):
            self.check_block(s)
        elif isinstance(s, If):
            self.expr(s.cond)
            self.need_bool(s.cond, "if condition")
            self.stmt(s.then)
            if s.else_ is not None:
                self.stmt(s.else_)
        elif isinstance(s, Alloc):
            self.check_alloc(s)
        elif isinstance(s, Let):
            self.expr(s.value)
            if s.var.dtype != s.value.dtype:
                self.fail(lambda n: f"let {n(s.var)}: a {s.var.dtype} var bound to a "
                                    f"{s.value.dtype} value")
            self.define(s.var, "var")
            self.vars.add(id(s.var))
            self.stmt(s.body)
            self.vars.discard(id(s.var))
        elif isinstance(s, Barrier):
            if s.named:
                self.check_named_barrier(s)
        elif isinstance(s, WgmmaSync):
            if self.kind != "kernel":
                self.fail(lambda n: f"{s.text} in a {self.kind} function; the wgmma protocol "
                                    "belongs to kernels (device IR)")
        elif isinstance(s, (AsyncCopy, AsyncCommit, AsyncWait)):
            self.check_async(s)
        elif isinstance(s, Launch):
            self.check_launch(s)
        elif isinstance(s, TMA_STMTS):
            check_tma_stmt(self, s)
        else:
            self.fail(lambda n: f"unknown statement type {type(s).__name__}")

    def check_named_barrier(self, s: Barrier) -> None:
        """A named barrier belongs to a kernel, and counts at most the block's threads (the
        id and the count's granularity are checked when the barrier is made)."""
        if self.kind != "kernel":
            self.fail(lambda n: f"{s.text} in a {self.kind} function; named barriers belong "
                                "to kernels (device IR), where the launch gives the block")
            return
        threads = self.func.launch.threads_per_block
        if s.threads > threads:
            self.fail(lambda n: f"{s.text}: {s.threads} threads named at a barrier of a block "
                                f"of {threads}; it would never complete: name at most the "
                                "block's threads")

    def check_async(self, s: Stmt) -> None:
        if self.kind != "kernel":
            self.fail(lambda n: f"{type(s).__name__} in a {self.kind} function; asynchronous "
                                "copies and their groups belong to kernels (device IR)")
        if not isinstance(s, AsyncCopy):
            return
        for b, idx, scope, what in ((s.dst, s.dst_index, "shared", "destination"),
                                    (s.src, s.src_index, "global", "source")):
            self.check_access(b, (idx,), f"async_copy {what}")
            self.expr(idx)
            if b.scope != scope:
                self.fail(lambda n, b=b, what=what, scope=scope: (
                    f"async_copy {what} {n(b)} is in {b.scope} memory; cp.async copies "
                    "global to shared"))
        if s.src_bytes is not None:
            self.expr(s.src_bytes)
            if s.src_bytes.dtype != "int32":
                self.fail(lambda n: f"async_copy: the bytes read are {s.src_bytes.dtype}; "
                                    "cp.async's src-size is int32")

    def check_for(self, s: For) -> None:
        v = s.var
        if not dt.is_int(v.dtype):
            self.fail(lambda n: f"loop var {n(v)} is {v.dtype}; loop vars are integers")
        if s.extent < 0:
            self.fail(lambda n: f"loop {n(v)} has a negative extent {s.extent}")
        self.define(v, "var")
        tag = s.thread if s.kind == "thread" else ""
        if s.kind == "thread":
            if tag not in HARDWARE_TAGS:
                self.fail(lambda n: f"thread loop {n(v)} is bound to {tag!r}; a thread loop "
                                    f"needs one of {', '.join(HARDWARE_TAGS)}")
            outer = self.hw_loops.get(tag)
            if outer is not None and self.kind == "kernel":
                self.fail(lambda n: f"thread loop {n(v)} is bound to {tag} inside loop "
                                    f"{n(outer.var)}, which is bound to {tag} too")
            if self.kind == "kernel" and s.extent > self.launch[tag]:
                axis = "xyz".index(tag[-1])
                key = "grid" if tag.startswith("block") else "block"
                self.fail(lambda n: f"thread loop {n(v)} over {tag} has extent {s.extent}, "
                          f"above the launch extent {self.launch[tag]} "
                          f"(launch.{key}[{axis}])")
        elif s.kind == "vthread" and self.kind == "kernel":
            self.fail(lambda n: f"vthread loop {n(v)} in a kernel; lowering must remove "
                                "virtual threads before device IR")
        self.vars.add(id(v))
        outer = self.hw_loops.get(tag)
        if tag:
            self.hw_loops[tag] = s
        outer_intrin = self.intrin_loop
        if ANNOTATION in s.annotations:
            check_tensorized(self, s)
            self.intrin_loop = s
        self.stmt(s.body)
        self.intrin_loop = outer_intrin
        if tag:
            if outer is None:
                del self.hw_loops[tag]
            else:
                self.hw_loops[tag] = outer
        self.vars.discard(id(v))

    def check_block(self, s: Block) -> None:
        if self.kind == "kernel":
            self.fail(lambda n: f"block {s.name} in a kernel; device IR has no blocks")
        if len(s.iter_vars) != len(s.bindings):
            self.fail(lambda n: f"block {s.name} has {len(s.iter_vars)} iteration vars but "
                                f"{len(s.bindings)} bindings")
        for iv, b in zip(s.iter_vars, s.bindings):
            self.expr(b)  # bindings are evaluated outside the block
            if not dt.is_int(b.dtype):
                self.fail(lambda n, iv=iv, b=b: f"block {s.name}: iteration var {n(iv.var)} "
                          f"is bound to a {b.dtype} value {expr_str(b, n, 'ir')}; bindings "
                          "are integers")
            if not dt.is_int(iv.var.dtype):
                self.fail(lambda n, iv=iv: f"block {s.name}: iteration var {n(iv.var)} is "
                                           f"{iv.var.dtype}; iteration vars are integers")
        for iv in s.iter_vars:
            self.define(iv.var, "var")
            self.vars.add(id(iv.var))
        if s.predicate is not None:
            self.expr(s.predicate)
            self.need_bool(s.predicate, f"predicate of block {s.name}")
        if s.init is not None:
            self.stmt(s.init)
        self.stmt(s.body)
        for iv in s.iter_vars:
            self.vars.discard(id(iv.var))

    def check_alloc(self, s: Alloc) -> None:
        b = s.buffer
        self.define(b, "buffer")
        check_fragment_alloc(self, b)
        if self.kind == "kernel":
            if b.scope == "global":
                self.fail(lambda n: f"kernel allocates global buffer {n(b)}; global "
                                    "temporaries are allocated by the host function")
            # a tensor map keeps the tensor's dims: its map describes them
            if self.flat and b.ndim != 1 and not isinstance(b, TensorMap):
                self.fail(lambda n: f"buffer {n(b)} has shape {list(b.shape)}; device IR "
                                    "buffers are flat (1-D)")
            if b.scope == "shared":
                self.check_shared_alloc(s)
        elif s.dyn_offset is not None:
            self.fail(lambda n: f"buffer {n(b)} is placed in dynamic shared memory in a "
                                f"{self.kind} function; only kernels have shared memory")
        elif self.kind == "host" and b.scope != "global":
            self.fail(lambda n: f"host function allocates {b.scope} buffer {n(b)}; the host "
                                "allocates only global buffers")
        self.bufs.add(id(b))
        self.stmt(s.body)
        self.bufs.discard(id(b))

    def lifetimes(self):
        """The kernel's shared live ranges (computed once, on the first overlap)."""
        if self._lifetimes is None:
            from .shared_lifetimes import shared_lifetimes

            self._lifetimes = shared_lifetimes(self.func)
        return self._lifetimes

    def check_shared_alloc(self, s: Alloc) -> None:
        b, t = s.buffer, self.target
        nbytes = b.size * dt.nbytes(b.dtype)
        if s.dyn_offset is None:
            # over the static limit is legal until plan_dynamic_shared places the buffers;
            # validate_gpu, the simulator and codegen enforce it on finished kernels
            self.shared_bytes += nbytes
        else:
            off, dyn = s.dyn_offset, self.func.launch.dynamic_shared_bytes
            if off % DYNAMIC_SHARED_ALIGN:
                self.fail(lambda n: f"buffer {n(b)} sits at dynamic shared offset {off}, "
                          f"which is not a multiple of {DYNAMIC_SHARED_ALIGN} bytes")
            if off + nbytes > dyn:
                self.fail(lambda n: f"buffer {n(b)} ({nbytes} bytes at dynamic shared "
                          f"offset {off}) ends past the kernel's dynamic_shared_bytes = {dyn}")
            for lo, hi, other in self.dyn_spans:
                # buffers may share bytes where one is provably dead before the other's
                # first access (ir/shared_lifetimes.py)
                if off < hi and lo < off + nbytes and not self.lifetimes().disjoint(b, other):
                    self.fail(lambda n, other=other: f"buffer {n(b)} (dynamic shared bytes "
                              f"{off}..{off + nbytes}) overlaps {n(other)}")
            self.dyn_spans.append((off, off + nbytes, b))
        optin = t.max_shared_memory_per_block_optin
        total = self.shared_bytes + self.func.launch.dynamic_shared_bytes
        if total > optin:
            self.fail(lambda n: f"launch limit exceeded: shared memory per block reaches "
                      f"{total} bytes with {n(b)}; {t.arch} allows at most {optin} (static "
                      "plus dynamic, with the opt-in)")

    def check_launch(self, s: Launch) -> None:
        if self.kind != "host":
            self.fail(lambda n: f"launch of {s.kernel} in a {self.kind} function; only the "
                                "host function launches kernels")
        for a in s.args:
            if not isinstance(a, Buffer):
                self.fail(lambda n, a=a: f"launch of {s.kernel}: argument {a!r} is not a "
                                         "buffer")
            self.check_buffer_in_scope(a)
        if self.module is None:
            return
        kernel = self.module.functions.get(s.kernel)
        if kernel is None:
            self.fail(lambda n: f"launch of {s.kernel!r}, but the module has no such "
                                f"function (it has {', '.join(self.module.functions)})")
        if kernel.level is not Level.KERNEL:
            self.fail(lambda n: f"launch of {s.kernel!r}, which is a "
                                f"{kernel.level.value} function, not a kernel")
        if len(s.args) != len(kernel.params):
            self.fail(lambda n: f"launch of {s.kernel} passes {len(s.args)} args; the kernel "
                                f"takes {len(kernel.params)}")
        for k, (a, p) in enumerate(zip(s.args, kernel.params)):
            if a.dtype != p.dtype or a.size != p.size:
                self.fail(lambda n, k=k, a=a, p=p: f"launch of {s.kernel}: arg {k} "
                          f"({n(a)}: {a.dtype}, {a.size} elements) does not match kernel "
                          f"param {k} ({p.name}: {p.dtype}, {p.size} elements)")

    # -- expressions -----------------------------------------------------------------------
    def need_bool(self, e: Expr, what: str) -> None:
        if e.dtype != "bool":
            self.fail(lambda n: f"{what} is {e.dtype}, not bool: {expr_str(e, n, 'ir')}")

    def check_buffer_in_scope(self, b: Buffer) -> None:
        if id(b) not in self.bufs:
            self.fail(lambda n: f"buffer {n(b)} is used where it is neither a parameter of "
                                f"@{self.func.name} nor allocated by an enclosing alloc")

    def check_access(self, b: Buffer, indices: tuple, what: str) -> None:
        self.check_buffer_in_scope(b)
        check_not_tensor_map(self, b, what)
        check_fragment_access(self, b, what, tuple(indices))
        if len(indices) != b.ndim:
            self.fail(lambda n: f"{what} {n(b)}: {len(indices)} indices for a "
                                f"{b.ndim}-d buffer of shape {list(b.shape)}")
        for i in indices:
            if not isinstance(i, Expr):
                self.fail(lambda n, i=i: f"{what} {n(b)}: index {i!r} is a Python "
                                         f"{type(i).__name__}, not an IR expression")
            if not dt.is_int(i.dtype):
                self.fail(lambda n, i=i: f"{what} {n(b)}: index {expr_str(i, n, 'ir')} is "
                                         f"{i.dtype}; indices are integers")

    def expr(self, e: Expr) -> None:
        stack = [e]
        seen: set[int] = set()  # shared subtrees are checked once
        while stack:
            x = stack.pop()
            if id(x) in seen:
                continue
            seen.add(id(x))
            if not isinstance(x, Expr):
                self.fail(lambda n, x=x: f"{x!r} ({type(x).__name__}) where an IR "
                                         "expression belongs; wrap constants with const()")
            if isinstance(x, Var):
                if id(x) not in self.vars:
                    self.fail(lambda n, x=x: f"var {n(x)} is used outside the for, block or "
                                             "let that defines it")
                continue
            if isinstance(x, (IntImm, FloatImm)):
                continue
            if isinstance(x, (Bin, Cmp)):
                if x.a.dtype != x.b.dtype:
                    self.fail(lambda n, x=x: f"operands of {x.op} have different dtypes "
                              f"({x.a.dtype}, {x.b.dtype}): {expr_str(x, n, 'ir')}")
                if x.op in ("and", "or") and x.a.dtype != "bool":
                    self.fail(lambda n, x=x: f"logical {x.op} on {x.a.dtype} operands: "
                                             f"{expr_str(x, n, 'ir')}")
            elif isinstance(x, Not):
                self.need_bool(x.a, "operand of logical not")
            elif isinstance(x, Select):
                self.need_bool(x.cond, "select condition")
                if x.t.dtype != x.f.dtype or x.dtype != x.t.dtype:
                    self.fail(lambda n, x=x: f"select branches have different dtypes "
                              f"({x.t.dtype}, {x.f.dtype}): {expr_str(x, n, 'ir')}")
            elif isinstance(x, Call):
                # a shuffle's lane mask and width are int32 whatever it moves (checked
                # when it is built)
                if x.op != "shfl_xor" and len({a.dtype for a in x.args}) > 1:
                    self.fail(lambda n, x=x: f"arguments of {x.op} have different dtypes: "
                                             f"{expr_str(x, n, 'ir')}")
            elif isinstance(x, Load):
                self.check_access(x.buffer, x.indices, "load from")
            elif isinstance(x, (TensorRead, Reduce)):
                self.fail(lambda n, x=x: f"front-end node {type(x).__name__} in the IR: "
                          f"{expr_str(x, n, 'ir')}; to_ir lowers te reads and reductions")
            elif not isinstance(x, Cast):
                self.fail(lambda n, x=x: f"unknown expression type {type(x).__name__}")
            stack.extend(children(x))


def _context(lines: list, spans: list, fault: int | None, parent: int | None) -> str:
    """Printed lines around the faulty statement, within its parent; an arrow marks it."""
    if fault is None or fault >= len(spans):
        first, lo, hi, last = 0, 0, min(len(lines) - 1, CONTEXT_LINES), len(lines) - 1
        mark = 0
    else:
        mark = spans[fault][0]
        first, last = spans[parent] if parent is not None else (0, len(lines) - 1)
        lo = max(first, mark - CONTEXT_LINES)
        hi = min(last, mark + CONTEXT_LINES)

    def fmt(k: int) -> str:
        arrow = "-->" if k == mark else "   "
        return f"  {arrow} {k + 1:4d} | {lines[k]}"

    out = []
    if lo > first:
        out.append(fmt(first))
        if lo > first + 1:
            out.append("             ...")
    out.extend(fmt(k) for k in range(lo, hi + 1))
    if hi < last:
        if hi < last - 1:
            out.append("             ...")
        out.append(fmt(last))
    return "\n".join(out)
