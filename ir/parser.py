"""Reads the text of :mod:`ptxforge.ir.printer` back into IR objects.

A small tokenizer feeds a recursive-descent parser. Names resolve to SSA objects per
function: every use of a name is the object its definition (a parameter, ``alloc``, ``for``,
block iteration var or ``let``) made. A name defined twice in one function means the same
object both times, as the printer gives distinct objects distinct names; that keeps
print -> parse -> print a fixed point even for IR the verifier would reject.

Errors raise :class:`IRParseError`, whose message names the line and column and what was
expected there, and shows the offending line.
"""

from __future__ import annotations

import bisect
import difflib
import json
import re
import sys
from collections.abc import Callable

from . import dtype as dt
from .attrs import FuncAttrs
from .expr import (
    BIN_OPS,
    INTRINSICS,
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
    Select,
    Var,
)
from .parser_tma import TMA_WORDS, TmaParsing
from .printer import FLOAT_WORD_RE, is_reserved, print_func, print_module, print_stmt
from .stmt import (
    FOR_KINDS,
    SCOPES,
    THREAD_TAGS,
    Alloc,
    AsyncCommit,
    AsyncCopy,
    AsyncWait,
    Barrier,
    Block,
    BlockVar,
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


class IRParseError(IRError):
    """IR text that does not parse. ``line`` and ``col`` (1-based) locate the problem."""

    def __init__(self, reason: str, line: int, col: int, source_line: str = ""):
        self.reason = reason
        self.line = line
        self.col = col
        text = f"line {line}, column {col}: {reason}"
        if source_line:
            text += f"\n    {source_line}\n    {' ' * (col - 1)}^"
        super().__init__(text)


# ---------------------------------------------------------------------------------------
# tokens

_TOKEN_RE = re.compile(
    r"""
    (?:[ \t\r\n]+|\#[^\n]*)*          # blanks and comments before the token
    (?:
      (?P<num>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?[A-Za-z0-9]*)
    | (?P<name>[A-Za-z_][A-Za-z0-9_.]*)
    | (?P<str>"(?:[^"\\\n]|\\.)*")
    | (?P<op>&&|\|\||==|!=|<=|>=|[-+*/<>!=@(){}\[\],:])
    | (?P<eof>\Z)
    | (?P<bad>.)
    )
    """,
    re.VERBOSE,
)
_NUMBER_RE = re.compile(r"(\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)([A-Za-z][A-Za-z0-9]*)?\Z")

SUFFIX_DTYPE = {
    "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
    "f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64",
    "f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2",
}

_BIN_SYMBOLS = {"+": "add", "-": "sub", "*": "mul", "/": "div", "&&": "and", "||": "or"}
_CMP_SYMBOLS = {"==": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}
_PRECEDENCE = {"||": 1, "&&": 2, "==": 3, "!=": 3, "<": 3, "<=": 3, ">": 3, ">=": 3,
               "+": 4, "-": 4, "*": 5, "/": 5}

_LOOKAHEAD = 1
"""The parser looks at most this many tokens past the current one."""

_DEEP_RECURSION = 6000
"""Recursion limit while parsing: each parenthesis level costs a few Python frames, and
the printer nests one level per operator."""


class _Token:
    __slots__ = ("kind", "text", "pos")

    def __init__(self, kind: str, text: str, pos: int):
        self.kind = kind
        self.text = text
        self.pos = pos


def _is_dtype(text: str) -> bool:
    try:
        dt.check(text)
    except dt.DTypeError:
        return False
    return True


def _to_tuples(value):
    """JSON arrays come back as tuples, so ``(1, 2)`` and ``[1, 2]`` print the same."""
    if isinstance(value, list):
        return tuple(_to_tuples(v) for v in value)
    if isinstance(value, dict):
        return {k: _to_tuples(v) for k, v in value.items()}
    return value


def _run(parser: _Parser, parse: Callable):
    """Run ``parse()`` with room for deeply nested expressions."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, _DEEP_RECURSION))
    try:
        return parse()
    except RecursionError:
        parser.fail(f"expressions nested more than about {_DEEP_RECURSION // 4} levels deep")
    finally:
        sys.setrecursionlimit(old)


class _Parser(TmaParsing):
    def __init__(self, text: str, env: dict | None = None):
        self.text = text
        self.env = dict(env or {})
        self.syms: dict = dict(self.env)
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.toks = self._tokenize(text)
        self.i = 0

    # -- tokens and errors ---------------------------------------------------------------
    def _tokenize(self, text: str) -> list:
        toks = []
        match = _TOKEN_RE.match
        pos = 0
        while True:
            m = match(text, pos)
            kind = m.lastgroup
            start = m.start(kind)
            if kind == "eof":
                break
            if kind == "bad":
                if m.group(kind) == '"':
                    self.fail_at(start, "unterminated string (a quote opens it but none "
                                        "closes it on the same line)")
                self.fail_at(start, f"unexpected character {m.group(kind)!r}")
            toks.append(_Token(kind, m.group(kind), start))
            pos = m.end()
        # padding, so that looking a few tokens ahead never runs off the end
        toks.extend(_Token("eof", "", len(text)) for _ in range(_LOOKAHEAD + 1))
        return toks

    def fail_at(self, pos: int, reason: str):
        line = bisect.bisect_right(self.line_starts, pos) - 1
        start = self.line_starts[line]
        end = self.text.find("\n", start)
        source = self.text[start:] if end < 0 else self.text[start:end]
        raise IRParseError(reason, line + 1, pos - start + 1, source.rstrip())

    def fail(self, reason: str, tok: _Token | None = None):
        self.fail_at((tok or self.peek()).pos, reason)

    def peek(self, k: int = 0) -> _Token:
        return self.toks[self.i + k]

    def next(self) -> _Token:
        tok = self.toks[self.i]
        if tok.kind != "eof":
            self.i += 1
        return tok

    def at(self, text: str, k: int = 0) -> bool:
        tok = self.peek(k)
        return tok.text == text and tok.kind in ("op", "name")

    @staticmethod
    def describe(tok: _Token) -> str:
        return "the end of the text" if tok.kind == "eof" else repr(tok.text)

    def expect(self, text: str, context: str) -> _Token:
        if not self.at(text):
            self.fail(f"expected '{text}' {context}, got {self.describe(self.peek())}")
        return self.next()

    def build(self, tok: _Token, ctor, *args):
        """Call an IR constructor, reporting its complaint at ``tok``."""
        try:
            return ctor(*args)
        except IRError as e:
            self.fail(str(e), tok)

    # -- names and definitions -------------------------------------------------------------
    def ident(self, what: str) -> _Token:
        tok = self.peek()
        if tok.kind != "name" or is_reserved(tok.text):
            self.fail(f"expected {what}, got {self.describe(tok)}")
        return self.next()

    def label(self, what: str) -> str:
        tok = self.peek()
        if tok.kind == "str":
            self.next()
            return json.loads(tok.text)
        if tok.kind != "name":
            self.fail(f"expected {what}, got {self.describe(tok)}")
        return self.next().text

    def dtype_name(self, what: str = "a dtype") -> str:
        tok = self.peek()
        if tok.kind != "name" or not _is_dtype(tok.text):
            self.fail(f"expected {what} (one of bool, int8..int64, uint8..uint64, float16, "
                      f"bfloat16, float32, float64), got {self.describe(tok)}")
        return self.next().text

    def define_var(self, tok: _Token, dtype: str) -> Var:
        old = self.syms.get(tok.text)
        if old is None:
            var = Var(tok.text, dtype)
            self.syms[tok.text] = var
            return var
        if not isinstance(old, Var):
            self.fail(f"'{tok.text}' already names a buffer; a var needs another name", tok)
        if old.dtype != dtype:
            self.fail(f"var '{tok.text}' is defined again with dtype {dtype}; it was "
                      f"{old.dtype} (one name is one var within a function)", tok)
        return old

    def define_buffer(self, tok: _Token, dtype: str, shape, scope: str, strides) -> Buffer:
        old = self.syms.get(tok.text)
        if old is None:
            buf = self.build(tok, Buffer, tok.text, dtype, shape, scope, strides)
            self.syms[tok.text] = buf
            return buf
        if not isinstance(old, Buffer):
            self.fail(f"'{tok.text}' already names a var; a buffer needs another name", tok)
        same = (old.dtype, old.shape, old.scope, old.strides) == (
            dtype, tuple(shape), scope, None if strides is None else tuple(strides))
        if not same:
            self.fail(f"buffer '{tok.text}' is defined again with another type; "
                      "one name is one buffer within a function", tok)
        return old

    def lookup(self, tok: _Token):
        obj = self.syms.get(tok.text)
        if obj is None:
            self.fail(f"undefined name '{tok.text}': no parameter, alloc, loop, block var or "
                      "let defines it before this point", tok)
        return obj

    def lookup_var(self, tok: _Token) -> Var:
        obj = self.lookup(tok)
        if not isinstance(obj, Var):
            self.fail(f"'{tok.text}' is a buffer, not a scalar; read it as {tok.text}[...]", tok)
        return obj

    def lookup_buffer(self, tok: _Token) -> Buffer:
        obj = self.lookup(tok)
        if not isinstance(obj, Buffer):
            self.fail(f"'{tok.text}' is a scalar var, not a buffer; it cannot be indexed", tok)
        return obj

    # -- literals --------------------------------------------------------------------------
    def int_literal(self, what: str) -> int:
        neg = self.at("-")
        if neg:
            self.next()
        tok = self.peek()
        if tok.kind != "num" or not tok.text.isdigit():
            self.fail(f"expected {what} (an integer), got {self.describe(tok)}")
        self.next()
        return -int(tok.text) if neg else int(tok.text)

    def int_list(self, what: str) -> list:
        self.expect("[", f"to open the {what}")
        out = []
        while not self.at("]"):
            out.append(self.int_literal(f"an integer in the {what}"))
            if not self.at(","):
                break
            self.next()
        self.expect("]", f"to close the {what}")
        return out

    def number(self, tok: _Token) -> Expr:
        m = _NUMBER_RE.match(tok.text)
        if m is None:
            self.fail(f"malformed number {tok.text!r}", tok)
        body, suffix = m.group(1), m.group(2)
        if suffix is None:
            if not body.isdigit():
                self.fail(f"the float constant {body} needs a dtype suffix "
                          f"(f16, bf16, f32 or f64), as in {body}f32", tok)
            return IntImm(int(body), dt.INDEX)
        dtype = SUFFIX_DTYPE.get(suffix)
        if dtype is None:
            self.fail(f"unknown constant suffix {suffix!r} in {tok.text!r}; "
                      f"expected one of {', '.join(SUFFIX_DTYPE)}", tok)
        if dt.is_float(dtype):
            return FloatImm(float(body), dtype)
        if not body.isdigit():
            self.fail(f"{tok.text!r}: an integer constant cannot have a fraction or exponent",
                      tok)
        return IntImm(int(body), dtype)

    def json_value(self):
        tok = self.peek()
        if self.at("{"):
            return self.json_object()
        if self.at("["):
            self.next()
            items = []
            while not self.at("]"):
                items.append(self.json_value())
                if not self.at(","):
                    break
                self.next()
            self.expect("]", "to close the JSON list")
            return tuple(items)
        if tok.kind == "str":
            self.next()
            return json.loads(tok.text)
        neg = self.at("-")
        if neg:
            self.next()
            tok = self.peek()
        if tok.kind == "num":
            self.next()
            try:
                v = json.loads(tok.text)
            except ValueError:
                self.fail(f"malformed JSON number {tok.text!r}", tok)
            return -v if neg else v
        words = {"true": True, "false": False, "null": None,
                 "Infinity": float("inf"), "NaN": float("nan")}
        if tok.kind == "name" and tok.text in words and (not neg or tok.text == "Infinity"):
            self.next()
            v = words[tok.text]
            return -v if neg else v
        self.fail(f"expected a JSON value, got {self.describe(tok)}")

    def json_object(self) -> dict:
        self.expect("{", "to open the attribute dict")
        out = {}
        while not self.at("}"):
            tok = self.peek()
            if tok.kind != "str":
                self.fail(f"expected a quoted attribute name, got {self.describe(tok)}")
            self.next()
            self.expect(":", "after the attribute name")
            out[json.loads(tok.text)] = _to_tuples(self.json_value())
            if not self.at(","):
                break
            self.next()
        self.expect("}", "to close the attribute dict")
        return out

    # -- expressions -----------------------------------------------------------------------
    def expr(self, min_prec: int = 1) -> Expr:
        lhs = self.unary()
        while True:
            tok = self.peek()
            prec = _PRECEDENCE.get(tok.text) if tok.kind == "op" else None
            if prec is None or prec < min_prec:
                return lhs
            self.next()
            rhs = self.expr(prec + 1)
            if tok.text in _CMP_SYMBOLS:
                lhs = Cmp(_CMP_SYMBOLS[tok.text], lhs, rhs)
            else:
                lhs = self.build(tok, Bin, _BIN_SYMBOLS[tok.text], lhs, rhs)

    def unary(self) -> Expr:
        tok = self.peek()
        if self.at("!"):
            self.next()
            return self.build(tok, Not, self.unary())
        if self.at("-"):
            self.next()
            nxt = self.peek()
            literal = nxt.kind == "num" or (nxt.kind == "name" and FLOAT_WORD_RE.match(nxt.text))
            value = self.unary()
            if literal and isinstance(value, FloatImm):
                return FloatImm(-value.value, value.dtype)
            if literal and isinstance(value, IntImm) and value.dtype != "bool":
                return IntImm(-value.value, value.dtype)
            zero = (FloatImm(0.0, value.dtype) if dt.is_float(value.dtype)
                    else IntImm(0, value.dtype))
            return self.build(tok, Bin, "sub", zero, value)
        return self.primary()

    def primary(self) -> Expr:
        tok = self.next()
        if tok.kind == "num":
            return self.number(tok)
        if tok.kind == "op" and tok.text == "(":
            e = self.expr()
            self.expect(")", "to close the parenthesis")
            return e
        if tok.kind == "name":
            text = tok.text
            if text in ("True", "False"):
                return IntImm(text == "True", "bool")
            m = FLOAT_WORD_RE.match(text)
            if m:
                return FloatImm(float(m.group(1)), SUFFIX_DTYPE[m.group(2)])
            if is_reserved(text):
                self.fail(f"expected an expression, got the keyword '{text}'", tok)
            if self.at("("):
                return self.call(tok)
            if self.at("["):
                buf = self.lookup_buffer(tok)
                return Load(buf, self.indices(f"the indices of {text}"))
            return self.lookup_var(tok)
        self.fail(f"expected an expression, got {self.describe(tok)}", tok)

    def indices(self, what: str) -> tuple:
        self.expect("[", f"to open {what}")
        out = []
        while not self.at("]"):
            out.append(self.expr())
            if not self.at(","):
                break
            self.next()
        self.expect("]", f"to close {what}")
        return tuple(out)

    def call(self, tok: _Token) -> Expr:
        name = tok.text
        self.expect("(", f"after {name}")
        args: list = []
        dtype = None
        while not self.at(")"):
            if self.at("dtype") and self.at("=", 1):
                self.next()
                self.next()
                dtype = self.dtype_name("the result dtype")
                break
            args.append(self.expr())
            if not self.at(","):
                break
            self.next()
        self.expect(")", f"to close the arguments of {name}")

        def arity(n: int) -> None:
            if len(args) != n:
                self.fail(f"{name} takes {n} argument(s), got {len(args)}", tok)

        if name == "select":
            arity(3)
            return Select(*args)
        if _is_dtype(name):
            arity(1)
            return Cast(name, args[0])
        if name in BIN_OPS:
            arity(2)
            return self.build(tok, Bin, name, args[0], args[1], dtype)
        if name in INTRINSICS:
            arity(INTRINSICS[name])
            return self.build(tok, Call, name, tuple(args), dtype or args[0].dtype)
        self.fail(f"unknown function '{name}'; expected select, a cast such as float32(x), "
                  f"one of {', '.join(b for b in BIN_OPS)} or an intrinsic "
                  f"({', '.join(sorted(INTRINSICS))})", tok)

    # -- statements ------------------------------------------------------------------------
    def region(self, context: str) -> Stmt:
        open_tok = self.expect("{", context)
        return self.region_rest(open_tok)

    def region_rest(self, open_tok: _Token, first: list | None = None) -> Stmt:
        stmts = list(first or [])
        while not self.at("}"):
            if self.peek().kind == "eof":
                line = bisect.bisect_right(self.line_starts, open_tok.pos)
                self.fail(f"expected '}}' to close the region opened on line {line}, "
                          "got the end of the text")
            stmts.append(self.stmt())
        self.next()
        return stmts[0] if len(stmts) == 1 else Seq(stmts)

    def stmt(self) -> Stmt:
        tok = self.peek()
        word = tok.text if tok.kind == "name" else ""
        if word == "for":
            return self.for_stmt()
        if word == "if":
            self.next()
            cond = self.expr()
            then = self.region("to open the body of the if")
            else_ = None
            if self.at("else"):
                self.next()
                else_ = self.region("after else")
            return self.build(tok, If, cond, then, else_)
        if word == "block":
            return self.block_stmt()
        if word == "alloc":
            self.next()
            name = self.ident("the name of the allocated buffer")
            self.expect(":", "after the buffer name")
            buf = self.buffer_type(name)
            offset = None
            if self.at("dynamic"):
                self.next()
                self.expect("(", "after dynamic")
                offset = self.int_literal("the dynamic shared-memory offset (bytes)")
                self.expect(")", "to close the dynamic offset")
            body = self.region("to open the body of the alloc")
            return self.build(tok, Alloc, buf, body, offset)
        if word == "let":
            self.next()
            name = self.ident("the name of the let var")
            dtype = None
            if self.at(":"):
                self.next()
                dtype = self.dtype_name()
            self.expect("=", "after the let var")
            value_tok = self.peek()
            value = self.expr()
            var = self.define_var(name, dtype or value.dtype)
            body = self.region("to open the body of the let")
            return self.build(value_tok, Let, var, value, body)
        if word in ("barrier", "barrier_arrive"):
            self.next()
            if word == "barrier" and not self.at("("):
                return Barrier()
            self.expect("(", f"after {word} (a named barrier: {word}(id, threads))")
            bid = self.int_literal("the barrier id (1-15)")
            self.expect(",", "between the barrier id and its thread count")
            threads = self.int_literal("the barrier's thread count")
            self.expect(")", f"to close {word}")
            return self.build(tok, Barrier, bid, threads, word == "barrier_arrive")
        if word in ("wgmma_fence", "wgmma_commit", "fence_proxy_async"):
            self.next()
            return WgmmaSync(word.removeprefix("wgmma_"))
        if word == "wgmma_wait":
            self.next()
            self.expect("(", "after wgmma_wait")
            n = self.int_literal("the number of wgmma groups left pending")
            self.expect(")", "to close wgmma_wait")
            return self.build(tok, WgmmaSync, "wait", n)
        if word in ("async_copy", "async_commit", "async_wait"):
            return self.async_stmt(tok)
        if word in TMA_WORDS:
            return self.tma_stmt(tok)
        if word == "launch":
            self.next()
            kernel = self.label("a kernel name")
            self.expect("(", "after the kernel name")
            args = []
            while not self.at(")"):
                args.append(self.lookup_buffer(self.ident("a buffer argument")))
                if not self.at(","):
                    break
                self.next()
            self.expect(")", "to close the launch arguments")
            return Launch(kernel, args)
        if tok.kind == "name" and not is_reserved(word) and self.at("[", 1):
            self.next()
            buf = self.lookup_buffer(tok)
            idx = self.indices(f"the indices of {tok.text}")
            self.expect("=", "after the store target")
            value = self.expr()
            return self.build(tok, Store, buf, idx, value)
        self.fail("expected a statement (for, if, block, alloc, let, barrier, launch or "
                  f"a store 'buf[...] = value'), got {self.describe(tok)}")

    def async_stmt(self, tok: _Token) -> Stmt:
        """``async_copy(dst[i], src[j], bytes[, src_bytes])``, ``async_commit``,
        ``async_wait(N)``."""
        word = self.next().text
        if word == "async_commit":
            return AsyncCommit()
        self.expect("(", f"after {word}")
        if word == "async_wait":
            n = self.int_literal("the number of groups left pending")
            self.expect(")", "to close async_wait")
            return self.build(tok, AsyncWait, n)
        ends = []
        for what in ("destination", "source"):
            at = self.peek()
            e = self.expr()
            if not isinstance(e, Load) or len(e.indices) != 1:
                self.fail(f"async_copy's {what} must be a flat buffer element 'buf[index]'", at)
            ends.append(e)
            self.expect(",", f"after the {what} of async_copy")
        nbytes = self.int_literal("the bytes copied")
        src_bytes = None
        if self.at(","):
            self.next()
            src_bytes = self.expr()
        self.expect(")", "to close async_copy")
        (dst, src) = ends
        return self.build(tok, AsyncCopy, dst.buffer, dst.indices[0], src.buffer,
                          src.indices[0], nbytes, src_bytes)

    def for_stmt(self) -> Stmt:
        tok = self.next()
        name = self.ident("a loop var name")
        dtype = dt.INDEX
        if self.at(":"):
            self.next()
            dtype = self.dtype_name()
        self.expect("in", "after the loop var")
        extent = self.int_literal("the loop extent")
        kind, thread = "serial", ""
        nxt = self.peek()
        if nxt.kind == "name" and nxt.text in FOR_KINDS:
            kind = self.next().text
            if kind in ("thread", "vthread"):
                self.expect("(", f"after {kind}: a {kind} loop names its thread tag")
                tag = self.peek()
                if tag.kind != "name" or tag.text not in THREAD_TAGS:
                    self.fail(f"expected a thread tag ({', '.join(THREAD_TAGS)}), "
                              f"got {self.describe(tag)}")
                thread = self.next().text
                self.expect(")", "after the thread tag")
        annotations = self.json_object() if self._attrs() else {}
        var = self.define_var(name, dtype)
        body = self.region("to open the loop body")
        return self.build(tok, For, var, extent, body, kind, thread, annotations)

    def _attrs(self) -> bool:
        if self.at("attrs"):
            self.next()
            return True
        return False

    def block_stmt(self) -> Stmt:
        tok = self.next()
        name = self.label("a block name")
        self.expect("(", "after the block name")
        iters, bindings = [], []
        while not self.at(")"):
            vtok = self.ident("a block iteration var name")
            self.expect(":", "after the block iteration var")
            dtype = dt.INDEX
            if self.peek().kind == "name" and _is_dtype(self.peek().text):
                dtype = self.next().text
            kind = self.peek()
            if kind.text not in ("S", "R") or kind.kind != "name":
                self.fail(f"expected the iteration kind S (spatial) or R (reduce), "
                          f"got {self.describe(kind)}")
            self.next()
            self.expect("[", "to open the iteration extent")
            extent = self.int_literal("the iteration extent")
            self.expect("]", "to close the iteration extent")
            self.expect("=", "before the binding of the block iteration var")
            var = self.define_var(vtok, dtype)
            iters.append(BlockVar(var, extent, kind.text))
            bindings.append(self.expr())
            if not self.at(","):
                break
            self.next()
        self.expect(")", "to close the block iteration vars")
        predicate = None
        if self.at("where"):
            self.next()
            predicate = self.expr()
        annotations = self.json_object() if self._attrs() else {}
        open_tok = self.expect("{", "to open the block body")
        init = None
        if self.at("init"):
            self.next()
            init = self.region("after init")
        body = self.region_rest(open_tok)
        return self.build(tok, Block, name, iters, bindings, body, init, predicate,
                          annotations)

    def buffer_type(self, name: _Token) -> Buffer:
        dtype = self.dtype_name("the buffer's dtype")
        shape = self.int_list("shape")
        scope = "global"
        nxt = self.peek()
        if nxt.kind == "name" and nxt.text in SCOPES:
            scope = self.next().text
        strides = None
        if self.at("strides"):
            self.next()
            strides = self.int_list("strides")
        if self.at("tensormap"):
            return self.tensor_map(name, dtype, shape, scope, strides)
        return self.define_buffer(name, dtype, shape, scope, strides)

    # -- functions and modules -------------------------------------------------------------
    def func(self) -> PrimFunc:
        self.expect("@", "to start a function")
        name = self.label("a function name")
        self.syms = dict(self.env)  # names are scoped to one function
        self.expect("(", "after the function name")
        params = []
        while not self.at(")"):
            ptok = self.ident("a parameter name")
            self.expect(":", "after the parameter name")
            params.append(self.buffer_type(ptok))
            if not self.at(","):
                break
            self.next()
        self.expect(")", "to close the parameters")
        attrs = FuncAttrs()
        if self._attrs():
            tok = self.peek()
            data = self.json_object()
            try:
                attrs = FuncAttrs.from_json(data)
            except IRError as e:
                self.fail(f"function {name}: {e}", tok)
        body = self.region("to open the function body")
        return PrimFunc(name, params, body, attrs)

    def module(self) -> Module:
        attrs = {}
        if self.at("module"):
            self.next()
            self.expect("attrs", "after module")
            attrs = self.json_object()
        funcs = []
        seen = set()
        while self.peek().kind != "eof":
            tok = self.peek(1)
            f = self.func()
            if f.name in seen:
                self.fail(f"a second function named {f.name!r}; function names are unique "
                          "within a module", tok)
            seen.add(f.name)
            funcs.append(f)
        return Module(funcs, attrs)

    def finish(self) -> None:
        if self.peek().kind != "eof":
            self.fail(f"expected the end of the text, got {self.describe(self.peek())}")


# ---------------------------------------------------------------------------------------
# entry points


def parse_module(text: str) -> Module:
    """Parse a module (as printed by :func:`ptxforge.ir.printer.print_module`)."""
    p = _Parser(text)
    return _run(p, p.module)


def parse_func(text: str) -> PrimFunc:
    """Parse exactly one function (as printed by :func:`ptxforge.ir.printer.print_func`)."""
    p = _Parser(text)

    def one():
        f = p.func()
        p.finish()
        return f

    return _run(p, one)


def parse_stmt(text: str, env: dict | None = None) -> Stmt:
    """Parse a statement sequence. ``env`` maps names to the vars and buffers it uses freely."""
    p = _Parser(text, env)

    def stmts():
        out = []
        while p.peek().kind != "eof":
            out.append(p.stmt())
        return out[0] if len(out) == 1 else Seq(out)

    return _run(p, stmts)


def parse_expr(text: str, env: dict | None = None) -> Expr:
    """Parse one expression; ``env`` maps names to vars and buffers."""
    p = _Parser(text, env)

    def one():
        e = p.expr()
        p.finish()
        return e

    return _run(p, one)


def roundtrip_check(ir: Module | PrimFunc | Stmt) -> Module | PrimFunc | Stmt:
    """Assert that print -> parse -> print is a fixed point for ``ir``; return the parse.

    Raises AssertionError with a diff of the two texts when it is not, and
    :class:`IRParseError` when the printed text does not parse.
    """
    if isinstance(ir, Module):
        text = print_module(ir)
        parsed = parse_module(text)
        again = print_module(parsed)
    elif isinstance(ir, PrimFunc):
        text = print_func(ir)
        parsed = parse_func(text)
        again = print_func(parsed)
    elif isinstance(ir, Stmt):
        text = print_stmt(ir)
        parsed = parse_stmt(text)
        again = print_stmt(parsed)
    else:
        raise TypeError(f"roundtrip_check takes a Module, PrimFunc or Stmt, got {type(ir)}")
    if again != text:
        diff = "\n".join(difflib.unified_diff(text.splitlines(), again.splitlines(),
                                              "printed", "reprinted", lineterm=""))
        raise AssertionError(f"print -> parse -> print is not a fixed point:\n{diff}")
    return parsed


assert_roundtrip = roundtrip_check
