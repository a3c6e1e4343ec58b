"""Text form of the tensor IR.

The text reads like nested loops and carries everything needed to rebuild the IR; the
parser (:mod:`ptxforge.ir.parser`) reads it back, and print -> parse -> print is a fixed
point. One function looks like::

    @main(A: float32[64, 64], B: float32[64]) attrs {"kind": "prim"} {
      alloc T: float32[64] shared {
        for i in 64 {
          for k in 64 {
            block T(vi: S[64] = i, vk: R[64] = k) {
              init {
                T[vi] = 0f32
              }
              T[vi] = (T[vi] + A[vi, vk])
            }
          }
        }
        for i_1 in 64 thread(threadIdx.x) attrs {"pragma_unroll": 1} {
          B[i_1] = T[i_1]
        }
      }
    }

Grammar, informally (``{...}`` is a region: statements, one a line):

* function: ``@name(p: type, ...) attrs {json} {...}``; a type is ``dtype[shape]``, then
  the scope (omitted for global params, always written for ``alloc``) and, for padded
  layouts, ``strides[...]``;
* ``for v in N [serial|unroll|vectorize|thread(tag)|vthread(tag)] [attrs {json}] {...}``;
* ``block name(v: S[N] = expr, r: R[N] = expr) [where cond] [attrs {json}] {[init {...}] ...}``;
* ``if cond {...} [else {...}]``, ``alloc buf: type [dynamic(offset)] {...}`` (a shared
  buffer at a byte offset of the kernel's dynamic shared memory), ``let v = expr {...}``,
  ``buf[i, j] = expr``, ``barrier``, ``launch kernel(buf, ...)``;
* the TMA and mbarrier statements and the ``tensormap[box] swizzle(mode)`` parameter
  type of :mod:`ptxforge.ir.stmt_tma`.

A var that is not int32 carries its dtype where it is defined (``for i: int64 in 8``,
``let x: float32 = ...``, ``v: int64 S[8] = ...``). Vars and buffers are SSA values equal by
identity; names are hints, so the printer gives every distinct var and buffer of a function
a distinct name (``i``, ``i_1``, ...), in order of first appearance.
Attribute values are JSON; tuples print as lists (the parser reads lists back as tuples). A
function's attrs are its typed :class:`~ptxforge.ir.attrs.FuncAttrs` (``kind`` is the level;
a kernel has ``grid``, ``block`` and its other launch facts).
"""

from __future__ import annotations

import json
import math
import numbers
import re

import numpy as np

from . import dtype as dt
from .expr import IRError, Var
from .exprprint import expr_str
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
from .stmt_tma import KEYWORDS as TMA_KEYWORDS
from .stmt_tma import TMA_STMTS, TensorMap, stmt_text

INDENT = "  "

IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")
"""A name that prints bare; dots are allowed so ``ff.outer.inner`` stays as it is."""

FLOAT_WORD_RE = re.compile(r"(inf|nan)(f16|bf16|f32|f64)\Z")
"""Special float constants (``inff32``) lex as names, so no var may be called that."""

KEYWORDS = frozenset({
    "for", "in", "if", "else", "alloc", "block", "init", "where", "attrs", "let",
    "barrier", "barrier_arrive", "launch", "module", "True", "False", "async_copy",
    "async_commit", "async_wait", "wgmma_fence", "wgmma_commit", "wgmma_wait",
    "fence_proxy_async", *TMA_KEYWORDS,
})
"""Words that start statements or are constants; a var or buffer never prints as one."""


def is_reserved(name: str) -> bool:
    """Whether ``name`` cannot name a var or buffer in the text (a keyword or a constant)."""
    return name in KEYWORDS or FLOAT_WORD_RE.match(name) is not None


def legal_name(hint: str) -> str:
    """``hint`` turned into a name the parser reads as one identifier."""
    name = re.sub(r"[^A-Za-z0-9_.]", "_", hint or "v")
    if not (name[0].isalpha() or name[0] == "_"):
        name = "_" + name
    return name


def label_text(name: str) -> str:
    """A block, function or kernel name: bare when it lexes as a name, else quoted."""
    if IDENT_RE.match(name):
        return name
    return json.dumps(name)


class Namer:
    """Unique, deterministic names for the vars and buffers of one function.

    The first object met with a given hint gets the hint itself (made legal), the next ones
    ``hint_1``, ``hint_2``, ... skipping names already taken. Vars and buffers share one
    namespace, so a name in the text means exactly one object.
    """

    def __init__(self):
        self._names: dict[int, str] = {}
        self._taken: set[str] = set()
        # ids are only unique while the objects live; holding them keeps the map sound
        self._objects: list = []

    def __call__(self, obj) -> str:
        key = id(obj)
        name = self._names.get(key)
        if name is not None:
            return name
        base = legal_name(obj.name)
        name = base
        k = 0
        while name in self._taken or is_reserved(name):
            k += 1
            name = f"{base}_{k}"
        self._taken.add(name)
        self._names[key] = name
        self._objects.append(obj)
        return name


def json_text(value, where: str) -> str:
    """Attribute value as JSON text; tuples and lists both print as JSON arrays."""
    if value is None:
        return "null"
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        v = float(value)
        if math.isnan(v):
            return "NaN"
        if math.isinf(v):
            return "Infinity" if v > 0 else "-Infinity"
        return repr(v)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(json_text(v, where) for v in value) + "]"
    if isinstance(value, dict):
        items = []
        for k, v in value.items():
            if not isinstance(k, str):
                raise IRError(f"{where}: attribute key {k!r} is not a string; "
                              "attribute dicts must have string keys to print as JSON")
            items.append(f"{json.dumps(k)}: {json_text(v, where)}")
        return "{" + ", ".join(items) + "}"
    raise IRError(
        f"{where}: attribute value {value!r} ({type(value).__name__}) has no text form; "
        "use numbers, strings, bools, None, lists, tuples or dicts of those"
    )


def dtype_suffix(var: Var) -> str:
    """``: dtype`` for a var that is not int32 (the default at every definition site)."""
    return "" if var.dtype == dt.INDEX else f": {var.dtype}"


def buffer_type(buf: Buffer, always_scope: bool) -> str:
    """``dtype[shape] [scope] [strides[...]]``."""
    text = f"{buf.dtype}[{', '.join(str(s) for s in buf.shape)}]"
    if always_scope or buf.scope != "global":
        text += f" {buf.scope}"
    if buf.strides is not None:
        text += f" strides[{', '.join(str(s) for s in buf.strides)}]"
    if isinstance(buf, TensorMap):
        text += buf.type_suffix
    return text


class FuncPrinter:
    """Prints statements of one function into lines, naming values with one :class:`Namer`.

    ``spans[k]`` is the (first, last) line of the k-th statement in pre-order (children in
    the order of :func:`ptxforge.ir.stmt.stmt_children`); the verifier uses it to show the
    lines around a faulty statement.
    """

    def __init__(self, namer: Namer | None = None):
        self.name = namer or Namer()
        self.lines: list[str] = []
        self.spans: list[tuple[int, int]] = []

    def expr(self, e) -> str:
        return expr_str(e, name_of=self.name, style="ir")

    def emit(self, depth: int, text: str) -> None:
        self.lines.append(INDENT * depth + text)

    def region(self, s: Stmt, depth: int) -> None:
        self.stmt(s, depth + 1)

    def func_header(self, func: PrimFunc) -> str:
        params = ", ".join(f"{self.name(b)}: {buffer_type(b, False)}" for b in func.params)
        attrs = json_text(func.attrs.to_json(), f"function {func.name}")
        return f"@{label_text(func.name)}({params}) attrs {attrs} {{"

    def func(self, func: PrimFunc) -> None:
        self.lines.append(self.func_header(func))
        self.region(func.body, 0)
        self.lines.append("}")

    def stmt(self, s: Stmt, depth: int) -> None:
        k = len(self.spans)
        self.spans.append((len(self.lines), len(self.lines)))
        start = len(self.lines)
        self._stmt(s, depth)
        self.spans[k] = (start, max(start, len(self.lines) - 1))

    def _stmt(self, s: Stmt, depth: int) -> None:
        if isinstance(s, Seq):
            for c in s.stmts:
                self.stmt(c, depth)
        elif isinstance(s, Store):
            idx = ", ".join(self.expr(i) for i in s.indices)
            self.emit(depth, f"{self.name(s.buffer)}[{idx}] = {self.expr(s.value)}")
        elif isinstance(s, For):
            self._for(s, depth)
        elif isinstance(s, Block):
            self._block(s, depth)
        elif isinstance(s, If):
            self.emit(depth, f"if {self.expr(s.cond)} {{")
            self.region(s.then, depth)
            if s.else_ is not None:
                self.emit(depth, "} else {")
                self.region(s.else_, depth)
            self.emit(depth, "}")
        elif isinstance(s, Alloc):
            buf = s.buffer
            dyn = "" if s.dyn_offset is None else f" dynamic({s.dyn_offset})"
            self.emit(depth, f"alloc {self.name(buf)}: {buffer_type(buf, True)}{dyn} {{")
            self.region(s.body, depth)
            self.emit(depth, "}")
        elif isinstance(s, Let):
            head = f"let {self.name(s.var)}{dtype_suffix(s.var)} = {self.expr(s.value)} {{"
            self.emit(depth, head)
            self.region(s.body, depth)
            self.emit(depth, "}")
        elif isinstance(s, Barrier):
            self.emit(depth, s.text)
        elif isinstance(s, WgmmaSync):
            self.emit(depth, s.text)
        elif isinstance(s, (AsyncCopy, AsyncCommit, AsyncWait)):
            self.emit(depth, self._async(s))
        elif isinstance(s, TMA_STMTS):
            self.emit(depth, stmt_text(s, self.name, self.expr))
        elif isinstance(s, Launch):
            args = ", ".join(self.name(a) for a in s.args)
            self.emit(depth, f"launch {label_text(s.kernel)}({args})")
        else:
            raise IRError(f"the IR printer does not know the statement {type(s).__name__}")

    def _async(self, s: Stmt) -> str:
        if isinstance(s, AsyncCommit):
            return "async_commit"
        if isinstance(s, AsyncWait):
            return f"async_wait({s.pending})"
        dst = f"{self.name(s.dst)}[{self.expr(s.dst_index)}]"
        src = f"{self.name(s.src)}[{self.expr(s.src_index)}]"
        part = "" if s.src_bytes is None else f", {self.expr(s.src_bytes)}"
        return f"async_copy({dst}, {src}, {s.bytes}{part})"

    def _for(self, s: For, depth: int) -> None:
        head = f"for {self.name(s.var)}{dtype_suffix(s.var)} in {s.extent}"
        if s.kind in ("thread", "vthread"):
            head += f" {s.kind}({s.thread})"
        elif s.kind != "serial":
            head += f" {s.kind}"
        if s.annotations:
            head += f" attrs {json_text(s.annotations, f'loop {s.var.name}')}"
        self.emit(depth, head + " {")
        self.region(s.body, depth)
        self.emit(depth, "}")

    def _block(self, s: Block, depth: int) -> None:
        iters = []
        for iv, binding in zip(s.iter_vars, s.bindings):
            typ = "" if iv.var.dtype == dt.INDEX else f"{iv.var.dtype} "
            iters.append(f"{self.name(iv.var)}: {typ}{iv.kind}[{iv.extent}] = "
                         f"{self.expr(binding)}")
        head = f"block {label_text(s.name)}({', '.join(iters)})"
        if s.predicate is not None:
            head += f" where {self.expr(s.predicate)}"
        if s.annotations:
            head += f" attrs {json_text(s.annotations, f'block {s.name}')}"
        self.emit(depth, head + " {")
        if s.init is not None:
            self.emit(depth + 1, "init {")
            self.region(s.init, depth + 1)
            self.emit(depth + 1, "}")
        self.region(s.body, depth)
        self.emit(depth, "}")


def print_stmt(stmt: Stmt) -> str:
    """The text of one statement (names are made unique within it)."""
    p = FuncPrinter()
    p.stmt(stmt, 0)
    return "\n".join(p.lines)


def print_func(func: PrimFunc) -> str:
    """The text of one function."""
    p = FuncPrinter()
    p.func(func)
    return "\n".join(p.lines)


def print_module(module: Module) -> str:
    """The text of a module: its attrs (if any), then its functions separated by blank lines."""
    parts = []
    if module.attrs:
        parts.append(f"module attrs {json_text(module.attrs, 'module')}")
    parts.extend(print_func(f) for f in module.functions.values())
    return "\n\n".join(parts)
