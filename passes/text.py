"""The text form of passes and pipelines: values, the lexer, and the call-list parser.

Grammar (whitespace is free inside a call; ``#`` starts a comment to the end of the line)::

    pipeline := [call (sep call)* [","]]       sep := "," or a line break (or both)
    call     := NAME ["(" [arg ("," arg)* [","]] ")"]
    arg      := [NAME "="] value
    value    := INT | FLOAT | STRING | "True" | "False" | "None" | DOTTED_NAME
              | "[" [value ("," value)* [","]] "]"

Strings are double-quoted with JSON escapes; a bare dotted name (``conv.ff.o``) is a
string too, used for stage and loop references. Lists read as tuples. This module only
reads the syntax; :mod:`ptxforge.passes.pipeline` binds calls to registered passes.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Any

from .errors import PipelineParseError
from .params import element_type, is_ref_type

KEYWORDS = {"True": True, "False": False, "None": None, "inf": math.inf, "nan": math.nan}
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*")
_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER_RE = re.compile(
    r"[+-]?(?:(?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|\d+)(?![A-Za-z_.\d])")
_SIGNED_INF_RE = re.compile(r"[+-]inf(?![A-Za-z0-9_.])")
_STRING_RE = re.compile(r'"(?:[^"\\\n]|\\.)*"')


def is_bare_name(s: str) -> bool:
    """True if ``s`` can print without quotes (a dotted name that is not a keyword)."""
    return bool(_NAME_RE.fullmatch(s)) and s not in KEYWORDS


def is_identifier(s: str) -> bool:
    """True for a plain (undotted) identifier, the form of pass and parameter names."""
    return bool(_IDENT_RE.fullmatch(s))


def format_value(value: Any, tp: Any = Any, ref: bool = False) -> str:
    """A parameter value in pass text. Strings at :data:`Ref` positions (or anywhere when
    ``ref``) print bare where they can; other strings are double-quoted."""
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        if (ref or is_ref_type(tp)) and is_bare_name(value):
            return value
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(format_value(v, element_type(tp, i), ref)
                               for i, v in enumerate(value)) + "]"
    raise ValueError(
        f"a {type(value).__name__} value ({value!r}) has no pass-text form; parameters hold "
        "ints, floats, bools, None, strings and lists of those")


# ---------------------------------------------------------------------------------------
# lexer


@dataclasses.dataclass(frozen=True)
class Token:
    kind: str  # NAME NUMBER STRING NEWLINE END or the punctuation itself: ( ) [ ] , =
    text: str
    pos: int
    value: Any = None


def tokenize(text: str) -> list[Token]:
    """Split pipeline text into tokens. Line breaks count only outside brackets."""
    tokens: list[Token] = []
    depth = 0
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            if depth == 0 and (not tokens or tokens[-1].kind != "NEWLINE"):
                tokens.append(Token("NEWLINE", "\n", i))
            i += 1
        elif c in " \t\r":
            i += 1
        elif c == "#":
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif c in "()[],=":
            if c in "([":
                depth += 1
            elif c in ")]":
                depth = max(0, depth - 1)
            tokens.append(Token(c, c, i))
            i += 1
        elif c == '"':
            m = _STRING_RE.match(text, i)
            if m is None:
                raise PipelineParseError("unterminated string (strings are double-quoted "
                                         "and end on the same line)", text, i)
            try:
                value = json.loads(m.group())
            except json.JSONDecodeError as e:
                raise PipelineParseError(f"bad escape in string: {e.msg}", text,
                                         i + e.pos) from None
            tokens.append(Token("STRING", m.group(), i, value))
            i = m.end()
        elif (m := _NUMBER_RE.match(text, i)) is not None:
            s = m.group()
            value: Any = float(s) if any(ch in s for ch in ".eE") else int(s)
            tokens.append(Token("NUMBER", s, i, value))
            i = m.end()
        elif (m := _SIGNED_INF_RE.match(text, i)) is not None:
            tokens.append(Token("NUMBER", m.group(), i, float(m.group())))
            i = m.end()
        elif (m := _NAME_RE.match(text, i)) is not None:
            tokens.append(Token("NAME", m.group(), i, m.group()))
            i = m.end()
        else:
            raise PipelineParseError(f"unexpected character {c!r}", text, i)
    tokens.append(Token("END", "", n))
    return tokens


# ---------------------------------------------------------------------------------------
# parser


@dataclasses.dataclass(frozen=True)
class Arg:
    """One argument of a call: ``key`` is None for a positional one; ``pos`` is the offset
    of the value, ``key_pos`` that of the key."""

    key: str | None
    value: Any
    pos: int
    key_pos: int


@dataclasses.dataclass(frozen=True)
class Call:
    """One pass in pipeline text, not yet bound to a pass class."""

    name: str
    pos: int
    args: tuple[Arg, ...]
    end: int  # offset just past the call


def _describe(tok: Token) -> str:
    if tok.kind == "END":
        return "the end of the text"
    if tok.kind == "NEWLINE":
        return "a line break"
    return repr(tok.text)


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.tokens = tokenize(text)
        self.i = 0

    def peek(self, k: int = 0) -> Token:
        return self.tokens[min(self.i + k, len(self.tokens) - 1)]

    def next(self) -> Token:
        tok = self.peek()
        self.i += 1
        return tok

    def error(self, message: str, tok: Token | None = None):
        tok = tok or self.peek()
        return PipelineParseError(message, self.text, tok.pos)

    def expect(self, kind: str, what: str) -> Token:
        tok = self.peek()
        if tok.kind != kind:
            raise self.error(f"expected {what}, got {_describe(tok)}")
        return self.next()

    def skip_newlines(self) -> None:
        while self.peek().kind == "NEWLINE":
            self.next()

    def pipeline(self) -> list[Call]:
        calls: list[Call] = []
        self.skip_newlines()
        while self.peek().kind != "END":
            calls.append(self.call())
            tok = self.peek()
            if tok.kind == "END":
                break
            if tok.kind not in (",", "NEWLINE"):
                raise self.error(f"expected ',' or a line break between passes, got "
                                 f"{_describe(tok)}")
            self.skip_newlines()
            if self.peek().kind == ",":
                self.next()
                self.skip_newlines()
        return calls

    def call(self) -> Call:
        tok = self.peek()
        if tok.kind != "NAME":
            raise self.error(f"expected a pass name, got {_describe(tok)}")
        if not is_identifier(tok.text):
            raise self.error(f"a pass name is a plain identifier, got {tok.text!r}")
        self.next()
        args: list[Arg] = []
        end = tok.pos + len(tok.text)
        if self.peek().kind == "(":
            self.next()
            seen_key = False
            while self.peek().kind != ")":
                a = self.arg()
                if a.key is None and seen_key:
                    raise PipelineParseError(
                        "a positional argument cannot follow a keyword argument",
                        self.text, a.pos)
                seen_key = seen_key or a.key is not None
                args.append(a)
                if self.peek().kind == ",":
                    self.next()
                elif self.peek().kind != ")":
                    raise self.error(f"expected ',' or ')' after an argument of {tok.text}, "
                                     f"got {_describe(self.peek())}")
            end = self.next().pos + 1
        return Call(tok.text, tok.pos, tuple(args), end)

    def arg(self) -> Arg:
        tok = self.peek()
        if tok.kind == "NAME" and self.peek(1).kind == "=":
            if not is_identifier(tok.text):
                raise self.error(f"a parameter name is a plain identifier, got {tok.text!r}")
            self.next()
            self.next()
            pos = self.peek().pos
            return Arg(tok.text, self.value(), pos, tok.pos)
        return Arg(None, self.value(), tok.pos, tok.pos)

    def value(self) -> Any:
        tok = self.peek()
        if tok.kind in ("NUMBER", "STRING"):
            self.next()
            return tok.value
        if tok.kind == "NAME":
            self.next()
            return KEYWORDS.get(tok.text, tok.text)
        if tok.kind == "[":
            self.next()
            items = []
            while self.peek().kind != "]":
                items.append(self.value())
                if self.peek().kind == ",":
                    self.next()
                elif self.peek().kind != "]":
                    raise self.error(f"expected ',' or ']' in a list, got "
                                     f"{_describe(self.peek())}")
            self.next()
            return tuple(items)
        raise self.error(f"expected a value (number, string, name, True/False/None or a "
                         f"[list]), got {_describe(tok)}")


def parse_calls(text: str) -> list[Call]:
    """Read pipeline text into unbound calls; raises :class:`PipelineParseError`."""
    if not isinstance(text, str):
        raise TypeError(f"pipeline text must be a str, got {type(text).__name__}")
    return _Parser(text).pipeline()
