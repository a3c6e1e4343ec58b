"""The tensor IR: buffers, statements, functions and modules.

Statements are ops with regions, immutable once built (passes build new trees and share
unchanged subtrees). Buffers and vars are SSA values: defined once (a function parameter,
an ``Alloc``, a ``For``, a block iteration var, a ``Let``), equal by identity.

The same node set serves three levels:

* tensor IR, as made by ``to_ir``: loop nests over ``Block`` s (one instance of a stage,
  with iteration vars bound to loop expressions, an optional reduction ``init``);
* scheduled IR: the same after schedule passes (split, reorder, bind, compute_at, ...);
* device IR, after lowering: no blocks, every buffer flat (1-D), kernels as functions of
  level ``Level.KERNEL`` with a launch configuration (``func.launch``), and a host function
  whose body allocates global temporaries and ``Launch`` es the kernels in order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from . import dtype as dt
from .attrs import FuncAttrs, KernelAttrs, Level
from .expr import Expr, IRError, Load, Var, transform
from .expr import children as expr_children

SCOPES = ("global", "shared", "local", "warp", "warpgroup")
"""``warp``: a matrix fragment owned by one warp; ``warpgroup``: a wgmma accumulator owned
by a warpgroup of 128 threads (see ``ir/intrin``)."""
FOR_KINDS = ("serial", "unroll", "vectorize", "thread", "vthread")
THREAD_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y",
               "threadIdx.z", "vthread")


class Buffer:
    """A multi-dimensional array in a memory scope (global, shared, local).

    ``strides`` is None for a compact row-major layout; ``storage_align`` sets padded
    strides (in elements).
    """

    __slots__ = ("name", "dtype", "shape", "scope", "strides")

    def __init__(self, name: str, dtype: str, shape, scope: str = "global", strides=None):
        if scope not in SCOPES:
            raise IRError(f"buffer {name}: unknown scope {scope!r}; expected one of {SCOPES}")
        shape = tuple(int(s) for s in shape)
        if any(s < 0 for s in shape):
            raise IRError(f"buffer {name}: negative extent in shape {list(shape)}")
        self.name = name
        self.dtype = dt.check(dtype)
        self.shape = shape
        self.scope = scope
        self.strides = None if strides is None else tuple(int(s) for s in strides)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        """Elements to allocate (respecting padded strides)."""
        if not self.shape:
            return 1
        if self.strides is None:
            n = 1
            for s in self.shape:
                n *= s
            return n
        if not all(self.shape):
            return 0
        return sum((e - 1) * st for e, st in zip(self.shape, self.strides)) + 1

    def compact_strides(self) -> tuple:
        if self.strides is not None:
            return self.strides
        out = []
        acc = 1
        for s in reversed(self.shape):
            out.append(acc)
            acc *= s
        return tuple(reversed(out))

    def __getitem__(self, indices) -> Load:
        if not isinstance(indices, tuple):
            indices = (indices,)
        from .expr import as_expr

        return Load(self, tuple(as_expr(i) for i in indices))

    def __repr__(self):
        return f"Buffer({self.name}, {self.dtype}, {list(self.shape)}, {self.scope})"


class Stmt:
    __slots__ = ()

    def __repr__(self):
        from .printer import print_stmt  # the IR text printer

        return print_stmt(self)


class Seq(Stmt):
    __slots__ = ("stmts",)

    def __init__(self, stmts):
        flat = []
        for s in stmts:
            if s is None:
                continue
            if isinstance(s, Seq):
                flat.extend(s.stmts)
            else:
                flat.append(s)
        self.stmts = tuple(flat)


def seq(*stmts) -> Stmt:
    """A sequence, collapsed to the single statement when there is one."""
    s = Seq(stmts)
    if len(s.stmts) == 1:
        return s.stmts[0]
    return s


class For(Stmt):
    """``for var in [0, extent)``.

    ``kind``: ``serial``, ``unroll``, ``vectorize``, ``thread`` (the var is a hardware index
    named by ``thread``: blockIdx.x/y/z or threadIdx.x/y/z) or ``vthread`` (a virtual
    thread, removed by lowering). ``annotations`` hold pragmas such as
    ``auto_unroll_max_step`` and ``unroll_explicit``.
    """

    __slots__ = ("var", "extent", "kind", "thread", "body", "annotations")

    def __init__(self, var: Var, extent: int, body: Stmt, kind: str = "serial",
                 thread: str = "", annotations: dict | None = None):
        if kind not in FOR_KINDS:
            raise IRError(f"loop {var.name}: unknown kind {kind!r}; expected one of {FOR_KINDS}")
        if kind in ("thread", "vthread"):
            if thread not in THREAD_TAGS:
                raise IRError(f"loop {var.name}: kind {kind} needs a thread tag, got {thread!r}")
        elif thread:
            raise IRError(f"loop {var.name}: only thread loops carry a thread tag ({thread})")
        if not isinstance(extent, int) or isinstance(extent, bool):
            raise IRError(f"loop {var.name}: extent must be an int, got {extent!r}")
        self.var = var
        self.extent = extent
        self.kind = kind
        self.thread = thread
        self.body = body
        self.annotations = dict(annotations or {})

    def replace(self, **kw) -> For:
        return For(kw.get("var", self.var), kw.get("extent", self.extent),
                   kw.get("body", self.body), kw.get("kind", self.kind),
                   kw.get("thread", self.thread), kw.get("annotations", self.annotations))


class If(Stmt):
    __slots__ = ("cond", "then", "else_")

    def __init__(self, cond: Expr, then: Stmt, else_: Stmt | None = None):
        if cond.dtype != "bool":
            raise IRError(f"if condition must be bool, got {cond.dtype}: {cond}")
        self.cond = cond
        self.then = then
        self.else_ = else_


class BlockVar:
    """An iteration var of a block: ``var`` in ``[0, extent)``, kind ``S`` or ``R``."""

    __slots__ = ("var", "extent", "kind")

    def __init__(self, var: Var, extent: int, kind: str):
        if kind not in ("S", "R"):
            raise IRError(f"block var {var.name}: kind must be 'S' or 'R', got {kind!r}")
        self.var = var
        self.extent = int(extent)
        self.kind = kind

    def __repr__(self):
        return f"BlockVar({self.var.name}, {self.extent}, {self.kind})"


class Block(Stmt):
    """One instance of a stage.

    ``iter_vars[k]`` takes the value ``bindings[k]`` (an expression of the enclosing loop
    vars); ``predicate`` (or None) guards the instance (from non-dividing splits); ``init``
    (or None) is the reduction's initial store, run before the first reduction step of each
    output element; ``body`` is the stage's store.
    """

    __slots__ = ("name", "iter_vars", "bindings", "predicate", "init", "body", "annotations")

    def __init__(self, name: str, iter_vars, bindings, body: Stmt, init: Stmt | None = None,
                 predicate: Expr | None = None, annotations: dict | None = None):
        iter_vars = tuple(iter_vars)
        bindings = tuple(bindings)
        if len(iter_vars) != len(bindings):
            raise IRError(
                f"block {name}: {len(iter_vars)} iteration vars but {len(bindings)} bindings"
            )
        self.name = name
        self.iter_vars = iter_vars
        self.bindings = bindings
        self.predicate = predicate
        self.init = init
        self.body = body
        self.annotations = dict(annotations or {})

    def replace(self, **kw) -> Block:
        return Block(kw.get("name", self.name), kw.get("iter_vars", self.iter_vars),
                     kw.get("bindings", self.bindings), kw.get("body", self.body),
                     kw.get("init", self.init), kw.get("predicate", self.predicate),
                     kw.get("annotations", self.annotations))


class Alloc(Stmt):
    """Allocate ``buffer`` (in its scope) for the extent of ``body``.

    ``dyn_offset`` (kernels only, shared buffers only) places the buffer in the kernel's
    dynamic shared memory at that byte offset instead of declaring it statically; the kernel's
    ``launch.dynamic_shared_bytes`` covers every such buffer.
    """

    __slots__ = ("buffer", "body", "dyn_offset")

    def __init__(self, buffer: Buffer, body: Stmt, dyn_offset: int | None = None):
        if dyn_offset is not None:
            if buffer.scope != "shared":
                raise IRError(f"alloc {buffer.name}: only shared buffers live in dynamic "
                              f"shared memory, not {buffer.scope} ones")
            if not isinstance(dyn_offset, int) or isinstance(dyn_offset, bool) \
                    or dyn_offset < 0:
                raise IRError(f"alloc {buffer.name}: dynamic offset must be a non-negative "
                              f"int, got {dyn_offset!r}")
        self.buffer = buffer
        self.body = body
        self.dyn_offset = dyn_offset

    def replace(self, **kw) -> Alloc:
        return Alloc(kw.get("buffer", self.buffer), kw.get("body", self.body),
                     kw.get("dyn_offset", self.dyn_offset))


class Store(Stmt):
    __slots__ = ("buffer", "indices", "value")

    def __init__(self, buffer: Buffer, indices, value: Expr):
        indices = tuple(indices)
        if len(indices) != buffer.ndim:
            raise IRError(
                f"store to {buffer.name}: {len(indices)} indices for a {buffer.ndim}-d buffer"
            )
        if value.dtype != buffer.dtype:
            raise IRError(
                f"store to {buffer.name} ({buffer.dtype}) of a {value.dtype} value: {value}"
            )
        self.buffer = buffer
        self.indices = indices
        self.value = value


class Barrier(Stmt):
    """A CTA barrier. The default, ``Barrier()``, is ``__syncthreads()``: every thread of
    the block waits here (``bar.sync 0``). A named barrier gives an ``id`` (1-15) and the
    ``threads`` taking part (a multiple of 32): ``bar.sync id, threads`` waits until that
    many threads have arrived at barrier ``id``, counting the waiting ones; with
    ``arrive=True``, ``bar.arrive id, threads`` counts the thread and goes on without
    waiting (a producer signalling a consumer that syncs). Named barriers may sit under
    warp-uniform conditions (a branch on the warpgroup): only the named count must arrive.
    The shapes are checked here; the count against the block, by the verifier."""

    __slots__ = ("id", "threads", "arrive")

    MAX_ID = 15
    """Hardware barriers 0-15 per CTA; 0 is ``__syncthreads()``'s."""

    def __init__(self, id: int = 0, threads: int | None = None, arrive: bool = False):
        if not isinstance(id, int) or isinstance(id, bool) or not 0 <= id <= self.MAX_ID:
            raise IRError(f"barrier: id must be an int 0-{self.MAX_ID}, got {id!r}")
        if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool)
                                    or threads <= 0 or threads % 32):
            raise IRError(f"barrier {id}: the thread count must be a positive multiple of 32 "
                          f"(whole warps arrive), got {threads!r}")
        if (threads is None) != (id == 0):
            raise IRError(
                f"barrier {id}: a named barrier takes an id 1-{self.MAX_ID} and a thread "
                f"count; id 0 is the whole block's __syncthreads() and takes neither (got "
                f"threads={threads!r})")
        if arrive and threads is None:
            raise IRError("barrier arrive: bar.arrive needs a named barrier (an id 1-"
                          f"{self.MAX_ID} and a thread count); a whole-block barrier syncs")
        self.id = id
        self.threads = threads
        self.arrive = bool(arrive)

    @property
    def named(self) -> bool:
        """A barrier over a named set of threads (not ``__syncthreads()``)."""
        return self.threads is not None

    @property
    def text(self) -> str:
        """The barrier's IR text: ``barrier``, ``barrier(1, 256)``, ``barrier_arrive(1,
        256)``."""
        if not self.named:
            return "barrier"
        return f"barrier{'_arrive' if self.arrive else ''}({self.id}, {self.threads})"


class Let(Stmt):
    """Bind ``var`` to ``value`` in ``body`` (from common-subexpression elimination)."""

    __slots__ = ("var", "value", "body")

    def __init__(self, var: Var, value: Expr, body: Stmt):
        if var.dtype != value.dtype:
            raise IRError(f"let {var.name}: {var.dtype} var bound to a {value.dtype} value")
        self.var = var
        self.value = value
        self.body = body


class Launch(Stmt):
    """Host side: launch kernel ``kernel`` of the module with ``args`` (global buffers)."""

    __slots__ = ("kernel", "args")

    def __init__(self, kernel: str, args):
        self.kernel = kernel
        self.args = tuple(args)


class AsyncCopy(Stmt):
    """``cp.async``: copy ``bytes`` bytes (4, 8 or 16) from the global buffer ``src`` at
    element ``src_index`` to the shared buffer ``dst`` at element ``dst_index`` (device IR:
    flat buffers, one index each).

    The copy joins the thread's open group; its data lands in ``dst`` only when an
    :class:`AsyncWait` covers the group (the thread's later ``AsyncCommit`` closed it).
    ``src_bytes`` (None: all of them) is an int32 expression, the bytes actually read
    (cp.async's src-size operand): the rest of the ``bytes`` are zero-filled, so padding and
    tails copy zeros. It is a whole number of elements, from 0 to ``bytes``. Both
    addresses must be aligned to ``bytes``.
    """

    __slots__ = ("dst", "dst_index", "src", "src_index", "bytes", "src_bytes")

    def __init__(self, dst: Buffer, dst_index: Expr, src: Buffer, src_index: Expr,
                 nbytes: int, src_bytes: Expr | None = None):
        if nbytes not in ASYNC_COPY_BYTES:
            raise IRError(f"async_copy to {dst.name}: {nbytes} bytes; cp.async copies "
                          f"{', '.join(map(str, ASYNC_COPY_BYTES))} bytes")
        if dst.dtype != src.dtype:
            raise IRError(f"async_copy from {src.name} ({src.dtype}) to {dst.name} "
                          f"({dst.dtype}): the dtypes differ")
        if src_bytes is not None and src_bytes.dtype != "int32":
            raise IRError(f"async_copy to {dst.name}: the bytes read must be int32, got "
                          f"{src_bytes.dtype}: {src_bytes}")
        self.dst = dst
        self.dst_index = dst_index
        self.src = src
        self.src_index = src_index
        self.bytes = int(nbytes)
        self.src_bytes = src_bytes

    @property
    def lanes(self) -> int:
        """Elements copied."""
        return self.bytes // dt.nbytes(self.dst.dtype)

    def replace(self, **kw) -> AsyncCopy:
        return AsyncCopy(kw.get("dst", self.dst), kw.get("dst_index", self.dst_index),
                         kw.get("src", self.src), kw.get("src_index", self.src_index),
                         kw.get("nbytes", self.bytes), kw.get("src_bytes", self.src_bytes))


class AsyncCommit(Stmt):
    """``cp.async.commit_group``: close the thread's open group of async copies."""

    __slots__ = ()


class AsyncWait(Stmt):
    """``cp.async.wait_group N``: wait until at most ``pending`` of the thread's committed
    groups are still in flight (0: all of them, ``cp.async.wait_all`` after a commit)."""

    __slots__ = ("pending",)

    def __init__(self, pending: int = 0):
        if not isinstance(pending, int) or isinstance(pending, bool) or pending < 0:
            raise IRError(f"async_wait: pending groups must be an int >= 0, got {pending!r}")
        self.pending = pending


class WgmmaSync(Stmt):
    """One step of wgmma's asynchronous protocol (sm_90a), run by a whole warpgroup:

    * ``fence``: ``wgmma.fence.sync.aligned``, before the first wgmma of a batch, once the
      warpgroup is done touching the accumulator registers;
    * ``fence_proxy_async``: ``fence.proxy.async.shared::cta``, makes earlier generic-proxy
      writes of shared memory (stores, cp.async) visible to the wgmmas that read them;
    * ``commit``: ``wgmma.commit_group.sync.aligned``, closes the issued wgmmas into a group;
    * ``wait``: ``wgmma.wait_group.sync.aligned pending``, until at most ``pending`` groups
      are still running.
    """

    __slots__ = ("op", "pending")

    OPS = ("fence", "fence_proxy_async", "commit", "wait")

    def __init__(self, op: str, pending: int = 0):
        if op not in self.OPS:
            raise IRError(f"wgmma sync: unknown step {op!r}; one of {', '.join(self.OPS)}")
        if not isinstance(pending, int) or isinstance(pending, bool) or pending < 0:
            raise IRError(f"wgmma_wait: pending groups must be an int >= 0, got {pending!r}")
        if op != "wait" and pending:
            raise IRError(f"wgmma sync {op} takes no pending count")
        self.op = op
        self.pending = pending

    @property
    def text(self) -> str:
        """The statement's text form (printer and parser)."""
        if self.op == "wait":
            return f"wgmma_wait({self.pending})"
        return "fence_proxy_async" if self.op == "fence_proxy_async" else f"wgmma_{self.op}"


ASYNC_COPY_BYTES = (4, 8, 16)
"""The copy sizes of ``cp.async``."""


class OperandStmt(Stmt):
    """A statement with operands and no sub-statements whose class says how to read and
    rebuild them (the TMA and mbarrier statements of ``ir/stmt_tma.py``): traversals and
    rewrites of the IR reach their expressions and buffers through these methods."""

    __slots__ = ()

    def exprs(self) -> tuple:
        """The expressions it holds."""
        raise NotImplementedError

    def map_exprs(self, fe: Callable) -> Stmt:
        """Itself with ``fe`` applied to each expression (itself where none changed)."""
        raise NotImplementedError

    def map_buffers(self, bmap: dict) -> Stmt:
        """Itself with its buffers replaced by ``bmap`` (by identity)."""
        raise NotImplementedError


class PrimFunc:
    """A function: typed buffer parameters, a body and typed attributes.

    ``attrs`` is a :class:`~ptxforge.ir.attrs.FuncAttrs`: the function's level
    (``Level.PRIM`` tensor IR, ``Level.KERNEL`` or ``Level.HOST`` device IR) and, for a
    kernel, its launch and memory facts (``func.launch``).
    """

    __slots__ = ("name", "params", "body", "attrs")

    def __init__(self, name: str, params, body: Stmt, attrs: FuncAttrs | None = None):
        if attrs is None:
            attrs = FuncAttrs()
        if not isinstance(attrs, FuncAttrs):
            raise IRError(
                f"function {name}: attrs must be a FuncAttrs (FuncAttrs.prim(), "
                f"FuncAttrs.kernel(grid, block), FuncAttrs.host()), got {attrs!r}")
        self.name = name
        self.params = tuple(params)
        self.body = body
        self.attrs = attrs

    @property
    def level(self) -> Level:
        return self.attrs.level

    @property
    def launch(self) -> KernelAttrs:
        """A kernel's launch and memory facts; an error for other levels."""
        if self.attrs.launch is None:
            raise IRError(f"function {self.name} is a {self.attrs.level.describe()} function, "
                          "not a kernel; it has no launch configuration")
        return self.attrs.launch

    @property
    def shared_bytes(self) -> int:
        """Shared memory one block of this kernel uses: its static shared allocations plus
        its dynamic shared memory."""
        static, _ = shared_memory(self)
        return static + self.launch.dynamic_shared_bytes

    def replace(self, **kw) -> PrimFunc:
        return PrimFunc(kw.get("name", self.name), kw.get("params", self.params),
                        kw.get("body", self.body), kw.get("attrs", self.attrs))

    def __repr__(self):
        from .printer import print_func

        return print_func(self)


class Module:
    """An ordered collection of functions (``main`` first by convention)."""

    __slots__ = ("functions", "attrs")

    def __init__(self, functions, attrs: dict | None = None):
        if isinstance(functions, PrimFunc):
            functions = [functions]
        if isinstance(functions, dict):
            functions = list(functions.values())
        self.functions = {}
        for f in functions:
            if f.name in self.functions:
                raise IRError(f"module has two functions named {f.name}")
            self.functions[f.name] = f
        self.attrs = dict(attrs or {})

    def __getitem__(self, name: str) -> PrimFunc:
        try:
            return self.functions[name]
        except KeyError:
            raise IRError(
                f"no function {name!r} in the module; it has {list(self.functions)}"
            ) from None

    @property
    def main(self) -> PrimFunc:
        return self.functions.get("main") or next(iter(self.functions.values()))

    def with_function(self, func: PrimFunc) -> Module:
        fns = dict(self.functions)
        fns[func.name] = func
        return Module(list(fns.values()), self.attrs)

    def kernels(self) -> list:
        return self.at_level(Level.KERNEL)

    def at_level(self, level: Level) -> list:
        """The functions of one level, in order."""
        return [f for f in self.functions.values() if f.attrs.level is level]

    @property
    def host(self) -> PrimFunc | None:
        """The host function of a device module (None before split_host_device)."""
        hosts = self.at_level(Level.HOST)
        return hosts[0] if hosts else None

    def __str__(self):
        from .printer import print_module

        return print_module(self)

    __repr__ = __str__


# ---------------------------------------------------------------------------------------
# traversal


def shared_memory(func: PrimFunc) -> tuple[int, int]:
    """``(static, dynamic)`` bytes of shared memory per block of a kernel: the static
    shared allocations' total, and the end of the last buffer placed in dynamic shared
    memory (``launch.dynamic_shared_bytes`` is at least that)."""
    static = dynamic = 0
    seen: set[int] = set()
    for s in walk(func.body):
        if isinstance(s, Alloc) and s.buffer.scope == "shared" and id(s.buffer) not in seen:
            seen.add(id(s.buffer))
            nbytes = s.buffer.size * dt.nbytes(s.buffer.dtype)
            if s.dyn_offset is None:
                static += nbytes
            else:
                dynamic = max(dynamic, s.dyn_offset + nbytes)
    return static, dynamic


def stmt_children(s: Stmt) -> tuple:
    """Sub-statements, in order."""
    # the common node types by exact type first: every walk of the IR calls this
    t = type(s)
    if t is Seq:
        return s.stmts
    if t is For or t is Alloc or t is Let:
        return (s.body,)
    if t is Store:
        return ()
    if t is Block:
        return (s.body,) if s.init is None else (s.init, s.body)
    if isinstance(s, Seq):
        return s.stmts
    if isinstance(s, (For, Alloc, Let)):
        return (s.body,)
    if isinstance(s, If):
        return (s.then,) if s.else_ is None else (s.then, s.else_)
    if isinstance(s, Block):
        return (s.body,) if s.init is None else (s.init, s.body)
    return ()


def stmt_exprs(s: Stmt) -> tuple:
    """The expressions held directly by ``s`` (not by its sub-statements)."""
    if isinstance(s, Store):
        return s.indices + (s.value,)
    if isinstance(s, If):
        return (s.cond,)
    if isinstance(s, Let):
        return (s.value,)
    if isinstance(s, Block):
        return s.bindings + (() if s.predicate is None else (s.predicate,))
    if isinstance(s, AsyncCopy):
        return (s.dst_index, s.src_index) + (() if s.src_bytes is None else (s.src_bytes,))
    if isinstance(s, OperandStmt):
        return s.exprs()
    return ()


def walk(s: Stmt) -> Iterator[Stmt]:
    """Pre-order iteration over all statements."""
    stack = [s]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(reversed(stmt_children(x)))


def walk_exprs(e: Expr) -> Iterator[Expr]:
    stack = [e]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(expr_children(x))


def map_stmt(s: Stmt, fstmt: Callable | None = None, fexpr: Callable | None = None,
             visit: Callable[[Stmt], bool] | None = None) -> Stmt:
    """Rebuild ``s`` bottom-up.

    ``fexpr(expr) -> expr`` is applied to every expression held by a statement (the whole
    expression, not recursively: use :func:`ptxforge.ir.expr.transform` inside it for
    that). ``fstmt(stmt) -> stmt | None`` is applied to every statement after its children
    were rebuilt; None keeps it. Unchanged subtrees are shared, not copied. ``visit(stmt)
    -> bool`` (optional) keeps the subtrees it is false for as they are, unvisited.
    """

    def fe(e):
        return e if fexpr is None or e is None else fexpr(e)

    def go(x: Stmt) -> Stmt:
        if visit is not None and not visit(x):
            return x
        # the common node types by exact type first (every pass rebuilds through here),
        # then by isinstance for subclasses
        t = type(x)
        if t is For:
            b = go(x.body)
            y = x if b is x.body else x.replace(body=b)
        elif t is Store:
            idx = tuple([fe(i) for i in x.indices])
            v = fe(x.value)
            same = v is x.value and all(a is b for a, b in zip(idx, x.indices))
            y = x if same else Store(x.buffer, idx, v)
        elif t is Seq:
            stmts = x.stmts
            kids = [go(c) for c in stmts]
            y = x if all(a is b for a, b in zip(kids, stmts)) else Seq(kids)
        elif t is Block:
            y = _map_block(x, go, fe)
        elif isinstance(x, Seq):
            y = _map_seq(x, go)
        elif isinstance(x, For):
            y = _map_for(x, go)
        elif isinstance(x, If):
            c, then = fe(x.cond), go(x.then)
            e = None if x.else_ is None else go(x.else_)
            y = x if (c is x.cond and then is x.then and e is x.else_) else If(c, then, e)
        elif isinstance(x, Block):
            y = _map_block(x, go, fe)
        elif isinstance(x, Alloc):
            b = go(x.body)
            y = x if b is x.body else x.replace(body=b)
        elif isinstance(x, Store):
            y = _map_store(x, fe)
        elif isinstance(x, Let):
            v, b = fe(x.value), go(x.body)
            y = x if (v is x.value and b is x.body) else Let(x.var, v, b)
        elif isinstance(x, AsyncCopy):
            y = map_async_copy(x, fe)
        elif isinstance(x, OperandStmt):
            y = x.map_exprs(fe)
        else:
            y = x
        if fstmt is not None:
            r = fstmt(y)
            if r is not None:
                return r
        return y

    try:
        return go(s)
    finally:
        # ``go`` refers to itself through its closure: without this, every call would leave
        # a reference cycle (``go``, ``fe`` and the callbacks with all they hold) for the
        # cyclic collector, which builders keep paused while they build
        go = None


def _map_seq(x: Seq, go: Callable) -> Stmt:
    stmts = x.stmts
    kids = [go(c) for c in stmts]
    return x if all(a is b for a, b in zip(kids, stmts)) else Seq(kids)


def _map_for(x: For, go: Callable) -> Stmt:
    b = go(x.body)
    return x if b is x.body else x.replace(body=b)


def _map_block(x: Block, go: Callable, fe: Callable) -> Stmt:
    bind = tuple(fe(b) for b in x.bindings)
    pred = fe(x.predicate)
    init = None if x.init is None else go(x.init)
    body = go(x.body)
    same = (all(a is b for a, b in zip(bind, x.bindings)) and pred is x.predicate
            and init is x.init and body is x.body)
    return x if same else x.replace(bindings=bind, predicate=pred, init=init, body=body)


def _map_store(x: Store, fe: Callable) -> Stmt:
    idx = tuple(fe(i) for i in x.indices)
    v = fe(x.value)
    same = v is x.value and all(a is b for a, b in zip(idx, x.indices))
    return x if same else Store(x.buffer, idx, v)


def substitute_stmt(s: Stmt, vmap: dict) -> Stmt:
    """Replace vars by expressions in every expression of ``s``."""
    from .expr import substitute

    if not vmap:
        return s
    return map_stmt(s, fexpr=lambda e: substitute(e, vmap))


def replace_buffers(s: Stmt, bmap: dict) -> Stmt:
    """Replace buffers (keys, by identity) in loads, stores and allocations."""
    if not bmap:
        return s

    def fix_expr(e):
        return transform(e, lambda x: Load(bmap[x.buffer], x.indices)
                         if isinstance(x, Load) and x.buffer in bmap else None)

    def fix_stmt(x):
        if isinstance(x, Store) and x.buffer in bmap:
            return Store(bmap[x.buffer], x.indices, x.value)
        if isinstance(x, Alloc) and x.buffer in bmap:
            return x.replace(buffer=bmap[x.buffer])
        if isinstance(x, AsyncCopy) and (x.dst in bmap or x.src in bmap):
            return x.replace(dst=bmap.get(x.dst, x.dst), src=bmap.get(x.src, x.src))
        if isinstance(x, OperandStmt):
            y = x.map_buffers(bmap)
            return None if y is x else y
        if isinstance(x, Launch) and any(a in bmap for a in x.args):
            return Launch(x.kernel, [bmap.get(a, a) for a in x.args])
        return None

    return map_stmt(s, fstmt=fix_stmt, fexpr=fix_expr)


def map_async_copy(x: AsyncCopy, fe: Callable) -> AsyncCopy:
    """``x`` with ``fe`` applied to its index and zero-fill expressions."""
    d, sidx = fe(x.dst_index), fe(x.src_index)
    n = None if x.src_bytes is None else fe(x.src_bytes)
    if d is x.dst_index and sidx is x.src_index and n is x.src_bytes:
        return x
    return x.replace(dst_index=d, src_index=sidx, src_bytes=n)
