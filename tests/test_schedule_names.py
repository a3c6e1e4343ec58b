"""passes/schedule/names.py: the one place names of stages and loops are decided."""

from __future__ import annotations

from ptxforge import te
from ptxforge.ir.to_ir import to_ir
from ptxforge.ir.traversal import block_paths, enclosing_loops
from ptxforge.passes.pipeline import Pipeline
from ptxforge.passes.schedule import names


def test_references_resolve_at_the_longest_stage_prefix():
    stages = {"C", "C.local", "A.shared"}
    assert names.resolve_ref("C.local.i.outer", stages) == ("C.local", "i.outer")
    assert names.resolve_ref("C.i.outer", stages) == ("C", "i.outer")
    assert names.resolve_ref("A.shared.ax0", stages) == ("A.shared", "ax0")
    assert names.resolve_ref("B.i", stages) is None
    assert names.resolve_ref("C", stages) is None
    assert names.loop_ref("C.local", "i") == "C.local.i"


def test_created_names():
    assert names.split_names("i", 2) == [names.split_outer("i"), names.split_inner("i")]
    assert names.split_names("i", 3) == ["i.0", "i.1", "i.2"]
    assert names.level_names("i", 3) == [
        names.split_outer(names.split_outer("i")), names.split_inner(names.split_outer("i")),
        names.split_inner("i")]
    assert names.level_names("i", 1) == ["i"]
    assert names.fused_name(["i"]) == "i"
    assert names.fused_name(["i", "j"]).startswith("i.j.")
    assert names.cache_name("A", "shared") == "A.shared"
    assert names.rfactor_name("C") != "C" and names.rfactor_name("C").startswith("C.")
    assert names.copy_axes(3) == ["ax0", "ax1", "ax2"]
    taken = {"x", "x_1"}
    assert names.fresh_name("x", taken) == "x_2" and "x_2" in taken
    assert names.fresh_name("y", taken) == "y"
    assert names.slot_name("C", "tile", "i") == "C.tile.i"
    assert names.slot_name("C", "unroll") == "C.unroll"
    assert names.python_identifier(names.split_inner(names.split_outer("C.i"))) == "C_i_o_i"
    assert names.python_identifier("1x.y") == "_1x_y"


def test_the_passes_name_what_they_make_as_names_predicts():
    a = te.placeholder((16, 8), name="A")
    k = te.reduce_axis((0, 8), name="k")
    c = te.compute((16,), lambda i: te.sum(a[i, k] * 2.0, axis=k), name="C")
    mod = to_ir([a, c])
    o, i = names.split_names("i", 2)
    text = (f'cache_read(A, "shared", [C]), split(C.i, factors=[4]), '
            f"fuse([C.{o}, C.{i}]), rfactor(C.k)")
    out = Pipeline.parse(text)(mod)
    paths = block_paths(out.main.body)
    assert names.cache_name("A", "shared") in paths
    assert names.rfactor_name("C") in paths
    loops = [n.var.name for n in enclosing_loops(paths[names.rfactor_name("C")])]
    assert names.fused_name([o, i]) in loops
    assert [n.var.name for n in enclosing_loops(paths[names.cache_name("A", "shared")])] == \
        names.copy_axes(2)


def _package_sources():
    import os

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in ("tests", "__pycache__") and not d.startswith(".")]
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(folder, f)
                with open(path, encoding="utf-8") as fh:
                    yield os.path.relpath(path, root), fh.read()


def test_no_code_spells_a_generated_name_or_builds_pass_text():
    import re

    literals = [f'"{names.SEP}{x}"' for x in (names.OUTER, names.INNER, names.FUSED,
                                               names.RFACTOR)]
    fstring = re.compile(
        r"f['\"](split|fuse|reorder|bind|compute_at|compute_inline|cache_read|cache_write|"
        r"pragma|unroll|vectorize|rfactor|storage_align|swizzle|tensorize|"
        r"software_pipeline)\(")
    spelled, built = [], []
    for path, text in _package_sources():
        if path != "passes/schedule/names.py":
            spelled += [f"{path}: {lit}" for lit in literals if lit in text]
        built += [f"{path}: {m.group(0)}" for m in fstring.finditer(text)]
    assert not spelled, spelled
    assert not built, built
