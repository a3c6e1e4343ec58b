"""Pass tests as IR text files: ``tests/ir_tests/*.test``, run through ``ptxforge opt``.

A test file holds comment lines (``# ...``), the pipeline (``# RUN: <pipeline text>``),
optionally ``# TARGET: <target string>``, then ``# INPUT:`` and the input module, then either
``# OUTPUT:`` and the module ``ptxforge opt`` must print, or ``# ERROR:`` and the one error
line it must report. ``PTXFORGE_UPDATE_IR_TESTS=1`` rewrites the expected outputs from the
current passes (review the diff before committing it).
"""

from __future__ import annotations

import os
import pathlib

import pytest
from ptxforge.cli.main import main

DIR = pathlib.Path(__file__).parent / "ir_tests"
FILES = sorted(DIR.glob("*.test"))


def read_test(path: pathlib.Path) -> dict:
    fields: dict = {"target": None}
    section = None
    body: dict = {"INPUT": [], "OUTPUT": [], "ERROR": []}
    for line in path.read_text().splitlines():
        if line.startswith("# RUN:"):
            fields["pipeline"] = line[len("# RUN:"):].strip()
        elif line.startswith("# TARGET:"):
            fields["target"] = line[len("# TARGET:"):].strip()
        elif line.rstrip() in ("# INPUT:", "# OUTPUT:", "# ERROR:"):
            section = line.rstrip()[2:-1]
        elif section is not None:
            body[section].append(line)
        elif line and not line.startswith("#"):
            raise ValueError(f"{path.name}: text before '# INPUT:' must be comments: {line!r}")
    if "pipeline" not in fields or not body["INPUT"]:
        raise ValueError(f"{path.name}: needs a '# RUN:' line and an '# INPUT:' section")
    fields.update({k.lower(): "\n".join(v).strip() for k, v in body.items()})
    return fields


def test_the_directory_has_tests():
    assert len(FILES) >= 6


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_ir_file(path, tmp_path, capsys):
    t = read_test(path)
    src = tmp_path / "input.ir"
    src.write_text(t["input"] + "\n")
    argv = ["opt", str(src), "-p", t["pipeline"]]
    if t["target"]:
        argv += ["--target", t["target"]]
    code = main(argv)
    out, err = capsys.readouterr()
    if os.environ.get("PTXFORGE_UPDATE_IR_TESTS") == "1":
        text = path.read_text()
        head = text[:text.index("# INPUT:")]
        tail = (f"# OUTPUT:\n{out.strip()}\n" if code == 0 else
                f"# ERROR:\n{err.strip().replace(str(src), 'input.ir')}\n")
        path.write_text(f"{head}# INPUT:\n{t['input']}\n{tail}")
        return
    if t["error"]:
        assert code == 1, f"expected an error, got:\n{out}"
        assert err.strip().replace(str(src), "input.ir") == t["error"]
        assert len(err.strip().splitlines()) == 1
    else:
        assert code == 0, err
        assert out.strip() == t["output"]
