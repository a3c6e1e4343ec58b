"""The pass infrastructure: registry, text form, pipelines, contexts and instruments."""

from __future__ import annotations

import importlib.metadata
import io
import math
import os
import re
import sys
import textwrap
import time
import types
import warnings
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pytest
from ptxforge.ir import te
from ptxforge.ir.expr import IRError, Var, const
from ptxforge.ir.stmt import For, Module, Seq, Store, map_stmt, walk
from ptxforge.ir.to_ir import to_ir
from ptxforge.passes import (
    DEFAULT_REGISTRY,
    ENTRY_POINT_GROUP,
    DumpIR,
    Pass,
    PassArgumentError,
    PassContext,
    PassError,
    PassInstrument,
    PassRegistry,
    PassRegistryError,
    PassTiming,
    Pipeline,
    PipelineParseError,
    PrintAfter,
    Ref,
    UnknownPassError,
    get_pass,
    parse_pass,
    positional,
    read_dump,
    register_function_pass,
    register_pass,
)

REG = PassRegistry()
"""An isolated registry for the passes of these tests."""


@pytest.fixture(autouse=True)
def _no_roundtrip_instrument(monkeypatch):
    # these tests inspect the instrument list and run deliberately broken passes
    monkeypatch.setenv("PTXFORGE_CHECK_ROUNDTRIP", "0")


def small_module() -> Module:
    A = te.placeholder((4, 8), name="A")
    B = te.compute((4, 8), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((4, 8), lambda i, j: B[i, j] + 1.0, name="C")
    return to_ir([A, C])


# ---------------------------------------------------------------------------------------
# passes used by the tests


@register_pass(registry=REG)
@dataclass(frozen=True)
class Split(Pass):
    """Test pass with a reference and a list."""

    name = "split"
    loop: Ref = positional()
    factors: tuple[int, ...] = ()
    nparts: bool = False

    def apply(self, module, ctx):
        raise IRError(f"loop {self.loop} not found")


@register_pass(registry=REG)
@dataclass(frozen=True)
class Bind(Pass):
    name = "bind"
    loop: Ref = positional()
    thread: str = positional()

    def apply(self, module, ctx):
        return module


@register_pass(registry=REG)
@dataclass(frozen=True)
class Pragma(Pass):
    name = "pragma"
    loop: Ref = positional()
    key: str = positional()
    value: int | float | bool | str | None = positional()

    def apply(self, module, ctx):
        return module


@register_pass(registry=REG)
@dataclass(frozen=True)
class Kinds(Pass):
    """Every supported kind of parameter."""

    name = "kinds"
    i: int = 0
    f: float = 0.0
    b: bool = False
    s: str = ""
    r: Ref | None = None
    opt: int | None = None
    num: int | float = 0
    mode: Literal["shared", "local"] = "shared"
    refs: tuple[Ref, ...] = ()
    nested: tuple[tuple[int, ...], ...] = ()
    pair: tuple[int, str] = (0, "")
    anything: object = None

    def apply(self, module, ctx):
        return module


@register_pass(registry=REG)
@dataclass(frozen=True)
class AnnotateLoops(Pass):
    """Sets ``key = value`` on every loop (changes the printed IR)."""

    name = "annotate_loops"
    key: str = "note"
    value: int = 1

    def apply(self, module, ctx):
        def fs(s):
            if isinstance(s, For):
                return s.replace(annotations={**s.annotations, self.key: self.value})
            return None

        out = module
        for f in module.functions.values():
            out = out.with_function(f.replace(body=map_stmt(f.body, fstmt=fs)))
        return out


@register_function_pass("noop", registry=REG)
def noop(module, ctx):
    """Returns its input."""
    return module


@register_function_pass("rebuild", registry=REG)
def rebuild(module, ctx):
    """Returns a new module object with the same text."""
    return Module(list(module.functions.values()), module.attrs)


@register_function_pass("slow", registry=REG)
def slow(module, ctx):
    time.sleep(0.03)
    return module


@register_function_pass("breaks_ir", registry=REG)
def breaks_ir(module, ctx):
    f = module.main
    out = f.params[-1]
    bad = Store(out, (Var("zz"),) * out.ndim, const(1.0, out.dtype))
    return module.with_function(f.replace(body=Seq([f.body, bad])))


@register_function_pass("bad_return", registry=REG)
def bad_return(module, ctx):
    return "not a module"


@register_function_pass("key_error", registry=REG)
def key_error(module, ctx):
    return {}["missing"]


@register_function_pass("runs_children", registry=REG)
def runs_children(module, ctx):
    """Runs two passes inside itself, through the same context."""
    module = AnnotateLoops(key="child", value=2)(module, ctx)
    return noop()(module, ctx)


def parse(text: str) -> Pipeline:
    return Pipeline.parse(text, REG)


# ---------------------------------------------------------------------------------------
# registry


def test_registry_get_and_names():
    assert REG.get("split") is Split
    assert "split" in REG and "nope" not in REG
    names = REG.names()
    assert names == sorted(names)
    assert {"split", "bind", "pragma", "noop"} <= set(names)


def test_unknown_pass_suggests_close_names():
    with pytest.raises(UnknownPassError) as info:
        REG.get("splt")
    assert "unknown pass 'splt'; did you mean 'split'?" in str(info.value)
    assert info.value.suggestions == ("split",)
    assert isinstance(info.value, IRError) and isinstance(info.value, ValueError)
    with pytest.raises(UnknownPassError, match="known passes: .*bind.*split"):
        REG.get("zzzzzz")


def test_duplicate_name_needs_override():
    reg = PassRegistry()

    @register_pass(registry=reg)
    class First(Pass):
        name = "dup"

        def apply(self, module, ctx):
            return module

    class Second(Pass):
        name = "dup"

        def apply(self, module, ctx):
            return module

    with pytest.raises(PassRegistryError, match="'dup' is already registered.*override=True"):
        reg.register(Second)
    assert reg.get("dup") is First
    reg.register(Second, override=True)
    assert reg.get("dup") is Second
    assert reg.unregister("dup") is Second
    with pytest.raises(UnknownPassError):
        reg.get("dup")


def test_register_rejects_malformed_classes():
    reg = PassRegistry()

    class NoName(Pass):
        def apply(self, module, ctx):
            return module

    class BadName(Pass):
        name = "bad-name"

        def apply(self, module, ctx):
            return module

    @dataclass(frozen=True)
    class NameField(Pass):
        name: str = "x"

        def apply(self, module, ctx):
            return module

    with pytest.raises(PassRegistryError, match="needs a class attribute 'name'"):
        reg.register(NoName)
    with pytest.raises(PassRegistryError, match="identifier"):
        reg.register(BadName)
    with pytest.raises(PassRegistryError, match="declares 'name' as a field"):
        reg.register(NameField)
    class NoApply(Pass):
        name = "no_apply"

    with pytest.raises(PassRegistryError, match="only Pass subclasses"):
        reg.register(int)
    with pytest.raises(PassRegistryError, match="'no_apply'. does not implement apply"):
        reg.register(NoApply)


def test_register_makes_a_frozen_dataclass():
    reg = PassRegistry()

    @register_pass(registry=reg)
    class Plain(Pass):
        name = "plain"
        n: int = 3

        def apply(self, module, ctx):
            return module

    p = Plain(n=4)
    assert p.text == "plain(n=4)"
    with pytest.raises(AttributeError):
        p.n = 5  # frozen
    assert hash(p) == hash(Plain(n=4))


def test_function_pass():
    assert noop.name == "noop" and issubclass(noop, Pass)
    assert noop().text == "noop()"
    assert noop.__doc__ == "Returns its input."
    m = small_module()
    assert noop()(m, PassContext(verify=False)) is m
    with pytest.raises(PipelineParseError, match=r"noop\(\) takes 0 arguments but 1"):
        parse("noop(1)")


def test_builtin_packages_load_lazily(tmp_path, monkeypatch):
    pkg = tmp_path / "fake_builtin_passes"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (tmp_path / "fake_registry_holder.py").write_text("REG = None\n")
    (pkg / "tile.py").write_text(textwrap.dedent("""
        from ptxforge.passes import Pass, register_pass
        import fake_registry_holder

        @register_pass(registry=fake_registry_holder.REG)
        class Tile(Pass):
            name = "tile"

            def apply(self, module, ctx):
                return module
    """))
    (pkg / "_private.py").write_text("raise RuntimeError('private modules are not passes')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import fake_registry_holder

    reg = PassRegistry(builtin_packages=("fake_builtin_passes",))
    fake_registry_holder.REG = reg

    # a user pass with a built-in's name is reported when the built-ins load
    @register_pass(registry=reg)
    class UserTile(Pass):
        name = "tile"

        def apply(self, module, ctx):
            return module

    assert "fake_builtin_passes.tile" not in sys.modules
    assert reg.get("tile") is UserTile  # a hit loads nothing
    with pytest.raises(PassRegistryError, match="has the name of the built-in pass"):
        reg.get("other")
    assert "fake_builtin_passes.tile" in sys.modules
    assert "fake_builtin_passes._private" not in sys.modules

    # with override=True the user's pass replaces the built-in one
    sys.modules.pop("fake_builtin_passes.tile")
    reg2 = PassRegistry(builtin_packages=("fake_builtin_passes",))
    fake_registry_holder.REG = reg2
    reg2.register(UserTile, override=True)
    assert reg2.names() == ["tile"]
    assert reg2.get("tile") is UserTile
    sys.modules.pop("fake_builtin_passes.tile")
    reg3 = PassRegistry(builtin_packages=("fake_builtin_passes",))
    fake_registry_holder.REG = reg3
    assert reg3.get("tile").__module__ == "fake_builtin_passes.tile"


# ---------------------------------------------------------------------------------------
# entry points


def _entry_point(name: str, value: str):
    return importlib.metadata.EntryPoint(name=name, value=value, group=ENTRY_POINT_GROUP)


def test_entry_points_load_lazily(tmp_path, monkeypatch):
    (tmp_path / "ep_plugin_mod.py").write_text(textwrap.dedent("""
        from ptxforge.passes import Pass

        class Fancy(Pass):
            name = "fancy"
            level: int = 1

            def apply(self, module, ctx):
                return module
    """))
    (tmp_path / "ep_registering_mod.py").write_text(textwrap.dedent("""
        from ptxforge.passes import register_function_pass
        import fake_ep_holder

        @register_function_pass("from_module", registry=fake_ep_holder.REG)
        def from_module(module, ctx):
            return module
    """))
    (tmp_path / "fake_ep_holder.py").write_text("REG = None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import fake_ep_holder

    reg = PassRegistry(entry_point_group=ENTRY_POINT_GROUP)
    fake_ep_holder.REG = reg
    calls = []

    def fake_entry_points(**kw):
        calls.append(kw)
        return [_entry_point("fancy", "ep_plugin_mod:Fancy"),
                _entry_point("from_module", "ep_registering_mod")]

    monkeypatch.setattr(importlib.metadata, "entry_points", fake_entry_points)
    assert "ep_plugin_mod" not in sys.modules
    cls = reg.get("fancy")
    assert calls and calls[0] == {"group": "ptxforge.passes"}
    assert cls.__name__ == "Fancy" and cls.__module__ == "ep_plugin_mod"
    # a plain (undecorated) class from an entry point becomes a frozen dataclass pass
    assert Pipeline.parse("fancy(level=3)", reg)[0] == cls(level=3)
    assert "ep_registering_mod" not in sys.modules  # only the entry point named 'fancy'
    assert reg.names() == ["fancy", "from_module"]
    assert reg.get("from_module")().text == "from_module()"


def test_broken_entry_points(tmp_path, monkeypatch):
    (tmp_path / "ep_not_a_pass.py").write_text("def thing():\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    eps = [_entry_point("missing", "ep_no_such_module_xyz:Pass"),
           _entry_point("wrong", "ep_not_a_pass:thing")]
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **kw: eps)
    reg = PassRegistry(entry_point_group=ENTRY_POINT_GROUP)
    with pytest.raises(PassRegistryError, match="cannot load pass plug-in 'missing'"):
        reg.get("missing")
    with pytest.raises(PassRegistryError, match="expected a Pass subclass or a module"):
        reg.get("wrong")
    reg2 = PassRegistry(entry_point_group=ENTRY_POINT_GROUP)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert reg2.names() == []
    messages = sorted(str(w.message) for w in caught)
    assert len(messages) == 2
    assert "cannot load pass plug-in 'missing'" in messages[0]
    assert "pass plug-in 'wrong' (ep_not_a_pass:thing)" in messages[1]


# ---------------------------------------------------------------------------------------
# text form


CANONICAL = [
    "split(conv.ff, factors=[1, 2, 2])",
    "split(conv.ff.o.i, factors=[4], nparts=True)",
    "split(conv.ff)",
    'bind(conv.ff.o, "blockIdx.x")',
    'pragma(compute.nn.o, "auto_unroll_max_step", 512)',
    'pragma(a, "x", 1.5)',
    'pragma(a, "x", True)',
    'pragma(a, "x", None)',
    'pragma(a, "x", "text")',
    "noop()",
    "kinds()",
    "kinds(i=-3, f=0.25, b=True)",
    'kinds(s="with \\"quotes\\" and \\\\ and \\n")',
    'kinds(s="ünïcode ✓")',
    "kinds(r=stage.loop)",
    'kinds(r="not a name")',
    'kinds(r="None")',
    "kinds(opt=7)",
    "kinds(num=2)",
    "kinds(num=2.0)",
    "kinds(f=1e-05)",
    "kinds(f=1e+20)",
    "kinds(f=inf)",
    "kinds(f=-inf)",
    'kinds(mode="local")',
    'kinds(refs=[a.b, c, "d e"])',
    "kinds(nested=[[1, 2], [], [3]])",
    'kinds(pair=[1, "a"])',
    'kinds(anything=[1, "x", [2.5]])',
    'split(conv.ff, factors=[1, 2, 2]), bind(conv.ff.o, "blockIdx.x"), noop()',
    "",
]


@pytest.mark.parametrize("text", CANONICAL)
def test_canonical_text_is_a_fixed_point(text):
    p = parse(text)
    assert p.text == text
    again = parse(p.text)
    assert again == p and list(again) == list(p)
    for q in p:
        assert parse_pass(q.text, REG) == q
        hash(q)


def test_text_of_passes_built_in_python():
    p = Split("conv.ff", factors=[1, 2, 2])
    assert p.factors == (1, 2, 2)  # lists become tuples so the pass is hashable
    assert p.text == "split(conv.ff, factors=[1, 2, 2])"
    assert str(p) == p.text
    k = Kinds(i=np.int64(5), f=3, num=np.float32(0.5), nested=[[1], [2, 3]])
    assert type(k.i) is int and k.f == 3.0 and type(k.f) is float
    assert type(k.num) is float and k.nested == ((1,), (2, 3))
    assert parse(k.text)[0] == k
    assert Kinds(num=2).num == 2 and type(Kinds(num=2).num) is int  # int | float keeps ints
    assert Kinds(f=math.inf).text == "kinds(f=inf)"
    assert math.isnan(parse("kinds(f=nan)")[0].f)


def test_non_canonical_text_reads_to_the_canonical_form():
    text = """
        # a pipeline written by hand
        split(loop="conv.ff", factors=[1,2,2],)
        bind(
            conv.ff.o,
            "blockIdx.x"
        ),
        noop,   # parentheses are optional without arguments
        kinds(refs=["a.b"], f=2)
    """
    p = parse(text)
    assert p.text == ('split(conv.ff, factors=[1, 2, 2]), bind(conv.ff.o, "blockIdx.x"), '
                      "noop(), kinds(f=2.0, refs=[a.b])")


def test_one_pass_per_line_form():
    passes = [Split(f"stage{i}.loop", factors=[i, 2]) for i in range(10)]
    p = Pipeline(passes)
    multi = p.format(one_per_line=True)
    assert multi.count("\n") == len(passes) - 1
    assert parse(multi) == p
    assert str(p) == multi  # long pipelines print one per line
    assert str(p[:1]) == p[0].text
    assert parse(multi.replace(",\n", "\n")) == p  # line breaks alone separate passes


def test_type_errors_name_pass_field_and_value():
    with pytest.raises(PassArgumentError) as info:
        Split("conv.ff", factors=[1, "a"])
    assert str(info.value) == "split: parameter 'factors' expects list of int, got [1, \"a\"]"
    assert info.value.pass_name == "split" and info.value.param == "factors"
    with pytest.raises(PassArgumentError, match="parameter 'i' expects int, got True"):
        Kinds(i=True)
    with pytest.raises(PassArgumentError, match="parameter 'b' expects bool, got 1"):
        Kinds(b=1)
    with pytest.raises(PassArgumentError, match="parameter 'mode' expects one of 'shared'"):
        Kinds(mode="global")
    with pytest.raises(PassArgumentError, match="parameter 'pair' expects \\[int, str\\]"):
        Kinds(pair=(1, 2))
    with pytest.raises(PassArgumentError, match="parameter 'loop' expects ref"):
        Split("")
    assert isinstance(info.value, IRError) and isinstance(info.value, TypeError)


def test_signature_and_params():
    assert Split.signature() == "split(loop: ref, factors: list of int = [], nparts: bool = False)"
    assert Split("a", factors=[2]).params() == {"loop": "a", "factors": (2,), "nparts": False}
    assert Split("a").replace(factors=[3]).factors == (3,)


def _column(text: str, fragment: str) -> int:
    return text.index(fragment) + 1


PARSE_ERRORS = [
    ("split(conv.ff factors=[1])", "factors=", "expected ',' or ')'"),
    ("split(conv.ff, factors=[1, 2, 2]), splt(x)", "splt", "unknown pass 'splt'; did you mean "
                                                            "'split'?"),
    ("split(a, [1], False, 4)", "4", "takes 3 arguments but 4 were given"),
    ("split(factors=[1])", ")", "missing required parameter 'loop'"),
    ('split(a, factors=[1, "x"])', '[1, "x"]', "parameter 'factors' expects list of int"),
    ("split(a, fctors=[1])", "fctors", "no parameter 'fctors'; did you mean 'factors'?"),
    ("split(a, loop=b)", "loop=", "got two values for parameter 'loop'"),
    ("split(a, factors=[1], factors=[2])", "factors=[2]", "got parameter 'factors' twice"),
    ("split(factors=[1], a)", "a)", "positional argument cannot follow a keyword"),
    ('bind(a, "blockIdx.x)', '"blockIdx', "unterminated string"),
    ("split(a, factors=[1 2])", "2]", "expected ',' or ']'"),
    ("split(a) bind(b, \"x\")", "bind", "expected ',' or a line break between passes"),
    ("noop(), , noop()", ", noop", "expected a pass name"),
    ("conv.split(a)", "conv", "a pass name is a plain identifier"),
    ("split(a, $)", "$", "unexpected character '$'"),
    ("split(a,", "", "expected a value"),
]


@pytest.mark.parametrize("text,at,message", PARSE_ERRORS)
def test_parse_errors_give_the_column(text, at, message):
    with pytest.raises(PipelineParseError) as info:
        parse(text)
    e = info.value
    expected = len(text) + 1 if at == "" else _column(text, at)
    assert e.column == expected, str(e)
    assert e.line == 1
    assert message in str(e)
    assert f"column {expected}" in str(e)
    # the caret line points at the column under the quoted source line
    lines = str(e).split("\n")
    assert lines[-1].index("^") == lines[-2].index(text[:1]) + expected - 1


def test_parse_error_on_a_later_line():
    text = 'noop(),\nbind(a, "x"),\n  split(a, factors=[1.5])'
    with pytest.raises(PipelineParseError) as info:
        parse(text)
    assert (info.value.line, info.value.column) == (3, text.split("\n")[2].index("[") + 1)
    assert "line 3, column" in str(info.value)


def test_unknown_pass_in_text_is_also_an_unknown_pass_error():
    with pytest.raises(UnknownPassError) as info:
        parse("noop(), nope()")
    assert isinstance(info.value, PipelineParseError)
    assert info.value.suggestions == ("noop",)
    assert info.value.column == 9


def test_parse_pass_needs_exactly_one():
    assert parse_pass("noop()", REG) == noop()
    with pytest.raises(PipelineParseError, match="exactly one pass, got 2"):
        parse_pass("noop(), noop()", REG)


# ---------------------------------------------------------------------------------------
# pipelines


def test_pipeline_sequence_behavior():
    a, b, c = Split("x"), Bind("x.o", "threadIdx.x"), noop()
    p = Pipeline([a, b])
    assert len(p) == 2 and list(p) == [a, b] and p[1] is b and p[-1] is b
    assert isinstance(p[:1], Pipeline) and p[:1].text == a.text
    assert (p + c).text == f"{a.text}, {b.text}, {c.text}"
    assert (p + Pipeline([c]))[2] is c
    assert (p + [c]) == Pipeline([a, b, c])
    assert ([c] + p)[0] is c
    assert (a + b) == p and (c + p)[0] is c
    assert p == parse(p.text) and hash(p) == hash(parse(p.text))
    assert p != Pipeline([b, a])
    assert len(Pipeline()) == 0 and Pipeline().text == ""
    assert eval(repr(p), {"Pipeline": type("P", (), {"parse": staticmethod(parse)})}) == p
    with pytest.raises(TypeError, match="pipeline entry 1 is not a Pass"):
        Pipeline([a, "noop()"])


def test_pipeline_runs_passes_in_order():
    m = small_module()
    p = parse('annotate_loops(key="first", value=1), annotate_loops(key="second", value=2)')
    out = p(m, PassContext())
    loops = [s for s in walk(out.main.body) if isinstance(s, For)]
    assert loops and all(list(s.annotations) == ["first", "second"] for s in loops)
    assert all(not s.annotations for s in walk(m.main.body) if isinstance(s, For))


# ---------------------------------------------------------------------------------------
# errors


def test_pass_error_wraps_the_original():
    m = small_module()
    p = Split("conv.ff", factors=[1, 2, 2])
    with pytest.raises(PassError) as info:
        parse(p.text)(m, PassContext(verify=False))
    e = info.value
    assert str(e) == "pass split(conv.ff, factors=[1, 2, 2]) failed: loop conv.ff not found"
    assert e.pass_ == p and e.module is m
    assert isinstance(e.original, IRError) and e.__cause__ is e.original
    assert isinstance(e, IRError) and isinstance(e, ValueError)


def test_pass_error_for_bugs_and_bad_returns():
    m = small_module()
    with pytest.raises(PassError, match=r"pass key_error\(\) failed: KeyError: 'missing'"):
        key_error()(m)
    with pytest.raises(PassError, match=r"bad_return\(\) failed: TypeError: .*returned str"):
        bad_return()(m)
    with pytest.raises(TypeError, match="needs a Module"):
        noop()("not a module")


# ---------------------------------------------------------------------------------------
# contexts


def test_nested_contexts():
    outer_out, inner_out = io.StringIO(), io.StringIO()
    outer = PassContext(print_after="all", stream=outer_out, config={"who": "outer"})
    inner = PassContext(print_after="all", stream=inner_out, config={"who": "inner"})
    seen = []

    @register_function_pass("who", registry=PassRegistry())
    def who(module, ctx):
        seen.append((ctx.config["who"], PassContext.current() is ctx))
        return module

    m = small_module()
    default = PassContext.current()
    assert not default.active and PassContext.current() is not default
    with outer as got:
        assert got is outer and PassContext.current() is outer and outer.active
        who()(m)
        with inner:
            assert PassContext.current() is inner
            who()(m)
            who()(m, outer)  # an explicit context wins, and is current while it runs
            assert PassContext.current() is inner
        assert PassContext.current() is outer and not inner.active
        who()(m)
    assert not outer.active and PassContext.current() is not outer
    assert seen == [("outer", True), ("inner", True), ("outer", True), ("outer", True)]
    assert outer_out.getvalue().count(";; IR after who()") == 3
    assert inner_out.getvalue().count(";; IR after who()") == 1


class Recorder(PassInstrument):
    def __init__(self, tag, log, skip=()):
        self.tag, self.log, self.skip = tag, log, set(skip)

    def enter_ctx(self, ctx):
        self.log.append((self.tag, "enter"))

    def exit_ctx(self, ctx):
        self.log.append((self.tag, "exit"))

    def should_run(self, pass_, module):
        return pass_.name not in self.skip

    def run_before_pass(self, pass_, module):
        self.log.append((self.tag, "before", pass_.name))

    def run_after_pass(self, pass_, module_before, module_after):
        self.log.append((self.tag, "after", pass_.name))

    def run_on_error(self, pass_, module, error):
        self.log.append((self.tag, "error", pass_.name, type(error).__name__))


def test_instrument_hooks_and_order():
    log = []
    ctx = PassContext([Recorder("a", log), Recorder("b", log, skip={"rebuild"})],
                      verify=False)
    m = small_module()
    with ctx:
        with ctx:  # re-entering does not enter the instruments again
            out = parse("noop(), rebuild()")(m)
        assert out is m  # rebuild was skipped
        with pytest.raises(PassError):
            Split("x")(m)
    assert log == [
        ("a", "enter"), ("b", "enter"),
        ("a", "before", "noop"), ("b", "before", "noop"),
        ("b", "after", "noop"), ("a", "after", "noop"),
        ("a", "before", "split"), ("b", "before", "split"),
        ("b", "error", "split", "PassError"), ("a", "error", "split", "PassError"),
        ("b", "exit"), ("a", "exit"),
    ]
    with pytest.raises(TypeError, match="PassInstrument"):
        PassContext(["not an instrument"])


# ---------------------------------------------------------------------------------------
# instruments


PIPELINE = 'noop(), annotate_loops(key="k", value=3), rebuild(), annotate_loops(key="j")'


def _headers(text: str) -> list[str]:
    return [line for line in text.split("\n") if line.startswith(";;")]


def test_print_before_and_after_all():
    m = small_module()
    p = parse(PIPELINE)
    out = io.StringIO()
    result = p(m, PassContext(print_before="all", print_after="all", stream=out))
    text = out.getvalue()
    expected = []
    for q in p:
        expected += [f";; IR before {q.text}", f";; IR after {q.text}"]
    assert _headers(text) == expected
    # the first print is the input, the last the result
    first = text.split(";; IR before noop()\n", 1)[1].split(";; IR after")[0]
    assert first.rstrip("\n") == str(m).rstrip("\n")
    last = text.rsplit(f";; IR after {p[-1].text}\n", 1)[1]
    assert last.rstrip("\n") == str(result).rstrip("\n")


def test_print_named_passes_and_only_changed():
    m = small_module()
    p = parse(PIPELINE)
    out = io.StringIO()
    p(m, PassContext(print_after=["annotate_loops"], stream=out))
    assert _headers(out.getvalue()) == [
        ';; IR after annotate_loops(key="k", value=3)', ';; IR after annotate_loops(key="j")']

    out = io.StringIO()
    p(m, PassContext(print_after_change=True, stream=out))
    # noop returns its input and rebuild a new module with the same text: neither prints
    assert _headers(out.getvalue()) == [
        ';; IR after annotate_loops(key="k", value=3)', ';; IR after annotate_loops(key="j")']

    out = io.StringIO()
    p(m, PassContext(print_after=["noop", "rebuild"], print_after_change=True, stream=out))
    assert out.getvalue() == ""

    out = io.StringIO()
    p(m, PassContext(print_before=["rebuild"], stream=out))
    assert _headers(out.getvalue()) == [";; IR before rebuild()"]
    assert 'attrs {"k": 3}' in out.getvalue() or '"k": 3' in out.getvalue()


def test_print_to_stdout_by_default(capsys):
    noop()(small_module(), PassContext(print_before="all"))
    assert capsys.readouterr().out.startswith(";; IR before noop()\n")


def test_misspelt_print_names_warn():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with PassContext(print_after=["nooop_not_a_pass_xyz"], stream=io.StringIO()):
            pass
    assert any("print_after names no known pass" in str(w.message) for w in caught)


def test_pass_timing():
    m = small_module()
    timing = PassTiming()
    ctx = PassContext([timing], verify=False)
    assert ctx.timing is timing
    parse("noop(), slow(), noop(), runs_children()")(m, ctx)
    names = [r[1] for r in timing.records]
    assert names == ["noop", "slow", "noop", "annotate_loops", "noop", "runs_children"]
    assert [r[3] for r in timing.records] == [0, 0, 0, 1, 1, 0]
    rows = timing.by_name()
    assert rows[0][0] == "slow" and rows[0][2] >= 0.03
    assert [r[2] for r in rows] == sorted((r[2] for r in rows), reverse=True)
    assert dict((r[0], r[1]) for r in rows)["noop"] == 3
    assert timing.total == pytest.approx(
        sum(r[2] for r in timing.records if r[3] == 0))
    lines = timing.summary().split("\n")
    assert lines[2].split()[-1] == "slow"
    assert len(lines) == 2 + len(rows)


def test_time_passes_prints_a_summary_on_exit():
    out = io.StringIO()
    with PassContext(time_passes=True, stream=out) as ctx:
        slow()(small_module())
        assert out.getvalue() == ""
    assert ctx.timing is not None and ctx.timing.records[0][1] == "slow"
    assert out.getvalue().startswith("pass timing: ")
    assert "slow" in out.getvalue()


def test_dump_dir(tmp_path):
    m = small_module()
    p = parse(PIPELINE + ", runs_children()")
    folder = tmp_path / "dump"
    result = p(m, PassContext(dump_dir=str(folder)))
    files = sorted(os.listdir(folder))
    stages = ["noop", "annotate_loops", "rebuild", "annotate_loops", "annotate_loops",
              "noop", "runs_children"]  # a nested pass is dumped when it finishes
    assert files == ["000_input.txt"] + [f"{k + 1:03d}_{n}.txt" for k, n in
                                         enumerate(stages)] + ["pipeline.txt"]
    first = (folder / "000_input.txt").read_text()
    assert first == f";; IR input, before noop()\n{str(m).rstrip()}\n"
    last = (folder / "007_runs_children.txt").read_text()
    assert last == f";; IR after runs_children()\n{str(result).rstrip()}\n"
    second = (folder / "002_annotate_loops.txt").read_text()
    assert second.startswith(';; IR after annotate_loops(key="k", value=3)\n')
    header, module = read_dump(folder / "002_annotate_loops.txt")
    assert header == 'IR after annotate_loops(key="k", value=3)'
    assert str(module) == str(AnnotateLoops(key="k", value=3)(m))
    ran = parse((folder / "pipeline.txt").read_text())
    assert [q.name for q in ran] == stages


def test_dump_dir_instrument_resets_per_context(tmp_path):
    dump = DumpIR(tmp_path)
    ctx = PassContext([dump], verify=False)
    noop()(small_module(), ctx)
    noop()(small_module(), ctx)  # a new activation of the context starts over
    assert sorted(os.listdir(tmp_path)) == ["000_input.txt", "001_noop.txt", "pipeline.txt"]
    assert len(dump.files) == 3


# ---------------------------------------------------------------------------------------
# verification


def test_verify_hook_gets_the_pass_text(monkeypatch):
    calls = []
    import ptxforge.ir.verify as verify_module

    monkeypatch.setattr(verify_module, "verify",
                        lambda module, pass_name=None, target=None:
                        calls.append((module, pass_name, target)))
    m = small_module()
    p = AnnotateLoops(key="v")
    out = p(m)  # verification is on by default, against the context's target
    assert calls == [(out, 'annotate_loops(key="v")', PassContext().target)]
    calls.clear()
    p(m, PassContext(config={"target": "cuda -arch=sm_80"}))
    assert calls[0][2].arch == "sm_80"
    calls.clear()
    p(m, PassContext(verify=False))
    assert calls == []
    ctx = PassContext(verify=False)
    ctx.verify = True
    assert ctx.verify and isinstance(ctx.instruments[0], type(PassContext().instruments[0]))
    noop()(m, ctx)
    assert calls == [(m, "noop()", ctx.target)]


def test_verifier_catches_a_broken_pass():
    m = small_module()
    with pytest.raises(IRError) as info:
        parse("noop(), breaks_ir()")(m)
    assert "breaks_ir()" in str(info.value)
    assert not isinstance(info.value, PassError)  # the verifier's own error, not wrapped
    assert breaks_ir()(m, PassContext(verify=False)) is not m


def test_missing_verifier_module_is_skipped(monkeypatch):
    monkeypatch.setitem(sys.modules, "ptxforge.ir.verify", None)
    m = small_module()
    assert isinstance(breaks_ir()(m), Module)


# ---------------------------------------------------------------------------------------
# the example of docs/custom_pass.md


DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                   "custom_pass.md")


@pytest.fixture
def doc_pass_module():
    """The first code block of docs/custom_pass.md, run as a module: registers the pass
    ``unroll_innermost`` in the default registry (removed again afterwards)."""
    with open(DOC, encoding="utf-8") as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    assert "class UnrollInnermost(Pass)" in blocks[0]
    mod = types.ModuleType("ptxforge_doc_unroll_innermost")
    sys.modules[mod.__name__] = mod
    try:
        exec(compile(blocks[0], DOC, "exec"), mod.__dict__)
        yield mod
    finally:
        DEFAULT_REGISTRY.unregister("unroll_innermost")
        del sys.modules[mod.__name__]


def _matmul_module() -> Module:
    A = te.placeholder((8, 8), name="A")
    B = te.placeholder((8, 8), name="B")
    k = te.reduce_axis((0, 8), name="k")
    C = te.compute((8, 8), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return to_ir([A, B, C])


def test_doc_example_pass(doc_pass_module, tmp_path):
    cls = doc_pass_module.UnrollInnermost
    assert get_pass("unroll_innermost") is cls
    m = _matmul_module()
    pipeline = Pipeline.parse("unroll_innermost(max_step=64)")
    assert pipeline[0] == cls(max_step=64) and pipeline.text == "unroll_innermost(max_step=64)"
    out_stream = io.StringIO()
    with PassContext(print_before=["unroll_innermost"], print_after=["unroll_innermost"],
                     dump_dir=str(tmp_path), stream=out_stream):
        out = pipeline(m)

    loops = {s.var.name: s for s in walk(out.main.body) if isinstance(s, For)}
    assert loops["k"].annotations == {"auto_unroll_max_step": 64}
    assert not loops["i"].annotations and not loops["j"].annotations

    printed = out_stream.getvalue()
    assert printed == (f";; IR before unroll_innermost(max_step=64)\n{str(m).rstrip()}\n"
                       f";; IR after unroll_innermost(max_step=64)\n{str(out).rstrip()}\n")
    assert str(out) != str(m)
    dumped = (tmp_path / "001_unroll_innermost.txt").read_text()
    assert dumped == f";; IR after unroll_innermost(max_step=64)\n{str(out).rstrip()}\n"
    assert (tmp_path / "pipeline.txt").read_text().strip() == pipeline.text

    assert cls.signature() == "unroll_innermost(max_step: int = 16, max_extent: int = 0)"
    assert str(cls().apply(m, PassContext())) != str(m)
    assert str(cls(max_extent=4).apply(m, PassContext())) == str(m)  # every loop is longer
    with pytest.raises(PassArgumentError, match="'max_step' expects int, got \"big\""):
        cls(max_step="big")


def test_doc_example_via_entry_point(doc_pass_module, monkeypatch):
    cls = doc_pass_module.UnrollInnermost
    ep = _entry_point("unroll_innermost", f"{doc_pass_module.__name__}:UnrollInnermost")
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **kw: [ep])
    reg = PassRegistry(entry_point_group=ENTRY_POINT_GROUP)
    p = Pipeline.parse("unroll_innermost(max_step=8, max_extent=8)", reg)
    assert reg.get("unroll_innermost") is cls
    out = p(_matmul_module())
    loops = [s for s in walk(out.main.body) if isinstance(s, For)]
    assert loops[-1].annotations == {"auto_unroll_max_step": 8}


def test_unknown_name_in_default_registry_suggests_doc_pass(doc_pass_module, monkeypatch):
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **kw: [])
    with pytest.raises(PipelineParseError, match="did you mean 'unroll_innermost'") as info:
        Pipeline.parse("unroll_inermost(max_step=64)")
    assert info.value.suggestions[0] == "unroll_innermost"


def test_print_after_instrument_can_be_given_directly():
    out = io.StringIO()
    inst = PrintAfter(["annotate_loops"], only_changed=True, stream=out)
    parse('annotate_loops(key="a"), annotate_loops(key="a")')(
        small_module(), PassContext([inst]))
    # the second run sets the same annotation again: the printed IR does not change
    assert _headers(out.getvalue()) == [';; IR after annotate_loops(key="a")']


def test_every_registered_pass_has_a_name_and_round_trips():
    names = DEFAULT_REGISTRY.names()
    assert names == sorted(names)
    for name in names:
        cls = get_pass(name)
        assert cls.name == name and cls.signature().startswith(f"{name}(")
        if all(not spec.required for spec in cls.params_spec()):
            p = cls()
            assert Pipeline.parse(p.text) == Pipeline([p]), name
