"""The package layering: every import points down the floors of docs/architecture.md.

The import graph is read from the source with ``ast``: module-level imports, imports inside
functions and under ``if TYPE_CHECKING:`` (each is a dependency of the layering even where
it does not run at import time), ``from ptxforge import NAME`` and ``ptxforge.NAME`` of the
names the root package loads on first use (``_LAZY`` in ``__init__.py``). Imports made by
``importlib`` with a computed name are not read.

Each module belongs to a package (its top folder; a module at the root is its own package;
see :func:`package_of`). :data:`FLOORS` lists the packages from the ground up: a package may
import the packages of lower floors, never one of its own floor or above. Circles inside one
package are its own business; no circle may cross packages, which the floors imply and
:func:`test_no_import_circle_crosses_packages` checks by itself.

Run as a script (``python3 tests/test_layering.py``) it prints the figures: files, imports,
circles of the file graph and every violation.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: Folders at the root that are not part of the package: scripts and tests use it from above.
NOT_PACKAGE = frozenset({"tests", "bench", "examples", "docs", "build", "dist"})

#: The packages from the ground floor up. A package may import any package of a lower floor;
#: packages of one floor are independent of each other.
FLOORS: tuple[tuple[str, ...], ...] = (
    # import nothing of the project: the target description, the compile-stage clock, the
    # one-step file writer, the network reader the graph layer installs for the tuners, the
    # progress bar and logger of long runs, and the root package (which loads its names on
    # first use)
    ("ptxforge", "target", "stages", "atomic_file", "network_reader", "progress"),
    ("ir",),                          # dtypes, expressions, te, ComputeDAG, tensor IR
    ("passes",),                      # pass infrastructure, schedule and lowering passes
    ("te",),                          # ptxforge.te: the te front end plus create_schedule
    ("backend_sim", "backend_ptx"),   # device IR on the CPU; NVPTX codegen and CUDA runtime
    ("ops",),                         # te computes and their default schedules
    ("nd",),                          # devices and arrays
    ("measure",),                     # builders, runners, records, the GPU time estimate
    ("runtime",),                     # exported modules and the network executor
    ("driver", "workloads"),          # ptxforge.lower / build; the tutorials' workloads
    ("autosched",),                   # the auto-scheduler
    ("autotvm",),                     # template tuning (reuses autosched's cost-model guard)
    ("graph",),                       # networks: graph IR, importers, fusion, build
    # the torch.compile backend and tune_torch (tuning through autosched's network loop);
    # TVM's names mapped onto all of the above
    ("torch", "tvm"),
    ("cli",),                         # python -m ptxforge, and every __main__ module
)

#: Modules at the root that make one package together.
ROOT_MODULE_PACKAGE = {"torch_backend": "torch", "torch_options": "torch",
                       "torch_partition": "torch", "torch_tuning": "torch",
                       "torch_call": "torch", "torch_report": "torch"}


def package_of(module: str) -> str:
    """The package of a dotted module name (``ptxforge.ir.te`` -> ``ir``). A ``__main__``
    module is a command line wherever it stands, so it belongs to ``cli``."""
    parts = module.split(".")[1:]
    if not parts:
        return "ptxforge"
    if parts[-1] == "__main__":
        return "cli"
    return ROOT_MODULE_PACKAGE.get(parts[0], parts[0])


FLOOR_OF = {pkg: level for level, floor in enumerate(FLOORS) for pkg in floor}


@dataclass(frozen=True)
class Import:
    """One import: ``importer`` (a module) needs ``imported`` (a module) at ``path:line``."""

    importer: str
    imported: str
    path: str
    line: int

    def __str__(self) -> str:
        return (f"{self.path}:{self.line}: {package_of(self.importer)} -> "
                f"{package_of(self.imported)} ({self.importer} imports {self.imported})")


def find_modules(root: Path) -> dict[str, Path]:
    """Every module of the package under ``root``: dotted name -> file."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] in NOT_PACKAGE or any(p.startswith(".") for p in rel.parts):
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(["ptxforge", *parts])] = path
    return modules


def _lazy_names(root_init: Path) -> dict[str, str]:
    """The root package's names loaded on first use (``_LAZY``): name -> module."""
    tree = ast.parse(root_init.read_text(encoding="utf-8"))
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "_LAZY"):
            table = ast.literal_eval(node.value)
            return {name: "ptxforge" + module for name, (module, _) in table.items()}
    return {}


class _Resolver:
    """Turns import statements of one module into the modules of the package they load."""

    def __init__(self, modules: dict[str, Path]):
        self.modules = modules
        root_init = modules.get("ptxforge")
        self.lazy = _lazy_names(root_init) if root_init else {}

    def _is_package(self, module: str) -> bool:
        return self.modules[module].name == "__init__.py"

    def _existing(self, name: str) -> str | None:
        # ``import ptxforge.a.b.c`` where c is a name: the deepest module that exists
        while name and name not in self.modules:
            name = name.rpartition(".")[0]
        return name or None

    def resolve(self, module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
        if isinstance(node, ast.Import):
            return [m for a in node.names if a.name.split(".")[0] == "ptxforge"
                    if (m := self._existing(a.name))]
        if node.level:
            base = module.split(".")
            if not self._is_package(module):
                base.pop()
            if node.level > 1:
                # a relative import that climbs out of the package fails only when that
                # line runs (often a GPU-only branch), so the reader refuses it here
                assert node.level - 1 < len(base), (
                    f"{module}:{node.lineno} imports with {node.level} dots, above the "
                    "top of the package")
                base = base[:-(node.level - 1)]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        if source.split(".")[0] != "ptxforge":
            return []
        found = []
        for alias in node.names:
            sub = f"{source}.{alias.name}"
            if sub in self.modules:
                found.append(sub)
            elif source == "ptxforge" and alias.name in self.lazy:
                found.append(self.lazy[alias.name])
            elif m := self._existing(source):
                found.append(m)
        return [m for m in found if m in self.modules]


def read_imports(root: Path = ROOT) -> tuple[dict[str, Path], list[Import]]:
    """The modules under ``root`` and every import between them."""
    modules = find_modules(root)
    resolver = _Resolver(modules)
    imports = []
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        rel = str(path.relative_to(root))
        imports_root = False
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                imports_root |= isinstance(node, ast.Import) and any(
                    a.name == "ptxforge" and a.asname is None for a in node.names)
                for target in resolver.resolve(module, node):
                    if target != module:
                        imports.append(Import(module, target, rel, node.lineno))
        if imports_root:  # ``import ptxforge`` then ``ptxforge.build(...)``
            for node in ast.walk(tree):
                if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                        and node.value.id == "ptxforge" and node.attr in resolver.lazy):
                    imports.append(Import(module, resolver.lazy[node.attr], rel, node.lineno))
    return modules, imports


def upward_imports(imports: list[Import]) -> list[Import]:
    """The imports that do not point to a lower floor (a package's own modules excepted)."""
    bad = []
    for imp in imports:
        a, b = package_of(imp.importer), package_of(imp.imported)
        if a != b and FLOOR_OF[b] >= FLOOR_OF[a]:
            bad.append(imp)
    return bad


def circles(modules, imports: list[Import]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    succ: dict[str, set[str]] = defaultdict(set)
    for imp in imports:
        succ[imp.importer].add(imp.imported)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in modules:
        if start in index:
            continue
        work = [(start, iter(sorted(succ[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(succ[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return sorted(found, key=len, reverse=True)


@pytest.fixture(scope="module")
def graph():
    return read_imports()


def test_every_package_stands_on_a_floor(graph):
    modules, _ = graph
    unplaced = sorted({package_of(m) for m in modules} - set(FLOOR_OF))
    assert not unplaced, (f"packages {unplaced} stand on no floor: add each to FLOORS in "
                          "tests/test_layering.py and to docs/architecture.md's table")
    assert len(FLOOR_OF) == sum(map(len, FLOORS)), "a package stands on two floors"


def test_no_import_points_up(graph):
    _, imports = graph
    bad = upward_imports(imports)
    assert not bad, (f"{len(bad)} import(s) point up the floors of docs/architecture.md "
                     "(move the code to its floor, or let the higher package install a "
                     "hook):\n" + "\n".join(map(str, bad)))


def test_no_import_circle_crosses_packages(graph):
    modules, imports = graph
    crossing = [c for c in circles(modules, imports) if len({package_of(m) for m in c}) > 1]
    assert not crossing, "import circles across packages:\n" + "\n".join(
        f"{len(c)} modules: {', '.join(c)}" for c in crossing)


def floors_line() -> str:
    """:data:`FLOORS` in one line, from the ground up, as README.md and
    docs/architecture.md print it."""
    return " <- ".join(", ".join(f"`{pkg}`" for pkg in floor) for floor in FLOORS)


@pytest.mark.parametrize("doc", ["README.md", "docs/architecture.md"])
def test_the_docs_print_the_floors_in_one_line(doc):
    text = (ROOT / doc).read_text(encoding="utf-8")
    assert floors_line() in text, (f"{doc} should print the floors of tests/test_layering.py "
                                   f"in one line:\n{floors_line()}")


def test_the_torch_backend_has_no_circle(graph):
    # its modules share options, errors and the target choice through torch_options; none
    # imports the module that imports it
    modules, imports = graph
    torch = [c for c in circles(modules, imports) if any(package_of(m) == "torch" for m in c)]
    assert not torch, f"import circles in the torch backend: {torch}"


def test_the_checker_sees_every_kind_of_import(tmp_path):
    # a small package with one import of each form, two of them pointing up the floors
    files = {
        "__init__.py": '_LAZY = {"build": (".driver", "build")}\n',
        "driver.py": "",
        "ir/__init__.py": "",
        "ir/expr.py": "from . import te\n",
        "ir/te.py": "from .expr import Expr\n",
        "ir/dag.py": ("def f():\n    from ..passes.pipeline import Pipeline\n"
                      "def g():\n    from ptxforge import build\n"),
        "passes/__init__.py": "",
        "passes/pipeline.py": "import ptxforge.ir.expr\nfrom ..ir import te\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    modules, imports = read_imports(tmp_path)
    assert sorted(map(str, upward_imports(imports))) == [
        "ir/dag.py:2: ir -> passes (ptxforge.ir.dag imports ptxforge.passes.pipeline)",
        "ir/dag.py:4: ir -> driver (ptxforge.ir.dag imports ptxforge.driver)"]
    assert circles(modules, imports) == [["ptxforge.ir.expr", "ptxforge.ir.te"]]


def main() -> int:
    modules, imports = read_imports()
    found = circles(modules, imports)
    print(f"{len(modules)} modules, {len(imports)} imports; {len(found)} circles "
          f"(sizes {[len(c) for c in found]})")
    for c in found:
        if len({package_of(m) for m in c}) > 1:
            print(f"circle across packages, {len(c)} modules: {', '.join(c)}")
    print(f"floors: {floors_line()}")
    bad = upward_imports(imports)
    print(f"{len(bad)} import(s) point up:")
    for imp in bad:
        print(f"  {imp}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
