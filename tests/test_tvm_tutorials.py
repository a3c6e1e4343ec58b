"""TVM's three tutorials (``examples/tvm_tutorials/``), their code as written apart from the
import prefix, the simulator for the GPU and the trial counts, run end to end on the CPU.

The runs are under the ``tutorials`` mark, which ``.ci/run`` runs after the fast suite
(``pytest -m tutorials``): a layer tutorial takes up to about 20 s of CPU in its processes.
The fast suite keeps the same flows at a smaller cost: ``test_example_autotvm.py`` (the
AutoTVM template tuned on the simulator, records, apply_history_best) and
``test_tvm_namespace.py::test_print_python_code_from_state`` (an auto-scheduler search
through ``ptxforge.tvm``). The network tutorial tunes 29 tasks and takes about 90 s on two
cores; it runs when ``PTXFORGE_TUTORIALS=all`` as well."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TUTORIALS = os.path.join(ROOT, "examples", "tvm_tutorials")


def _import_root() -> str:
    """The folder the child process imports ``ptxforge`` from: this one's (the checkout's
    folder may have another name than the package)."""
    import ptxforge

    parent = os.path.dirname(os.path.dirname(os.path.abspath(ptxforge.__file__)))
    return os.pathsep.join(filter(None, [parent, os.environ.get("PYTHONPATH", "")]))


def _run(name: str, cwd) -> str:
    # without the print / parse round trip of every pass that the suite turns on: the
    # tutorials' schedules round-trip in test_autotvm, test_autosched_sketch and
    # test_golden_schedules, and the check was three quarters of these runs' time
    env = {**os.environ, "PYTHONPATH": _import_root(), "PTXFORGE_SEED": "0",
           "PTXFORGE_CHECK_ROUNDTRIP": "0"}
    p = subprocess.run([sys.executable, os.path.join(TUTORIALS, name)], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p.stdout + p.stderr


def test_tutorials_differ_from_tvm_only_in_the_lines_they_list():
    for name in os.listdir(TUTORIALS):
        if not name.endswith(".py"):
            continue
        with open(os.path.join(TUTORIALS, name)) as f:
            text = f.read()
        code = [ln for ln in text.split("\n") if not ln.startswith("#")]
        assert not any(re.match(r"\s*(import tvm|from tvm)\b", ln) for ln in code), name
        assert "The only lines that differ from the tutorial" in text, name


@pytest.mark.slow
@pytest.mark.tutorials
def test_autoscheduler_conv2d_layer_tutorial(tmp_path):
    out = _run("autoscheduler_conv2d_layer.py", tmp_path)
    assert "Computational DAG:" in out and "Lowered TIR:" in out
    assert "no GPU on this machine" in out  # said up front by the tutorial's measure context
    assert "Execution time of this operator" in out and ".version" in out  # timed, PTX printed
    assert "Resume search:" in out and (tmp_path / "conv2d.json").stat().st_size > 0


@pytest.mark.slow
@pytest.mark.tutorials
def test_autotvm_conv2d_tutorial(tmp_path):
    out = _run("autotvm_conv2d.py", tmp_path)
    assert "ConfigSpace (len=" in out and "Best config:" in out
    assert re.search(r"Time cost of this operator: \d+\.\d+", out)
    assert len((tmp_path / "conv2d.log").read_text().strip().split("\n")) == 4


@pytest.mark.slow
@pytest.mark.tutorials
@pytest.mark.skipif(os.environ.get("PTXFORGE_TUTORIALS") != "all",
                    reason="about 90 s: set PTXFORGE_TUTORIALS=all")
def test_autoscheduler_network_tutorial(tmp_path):
    out = _run("autoscheduler_network.py", tmp_path)
    assert "Extract tasks..." in out and "Estimated total latency" in out
    assert re.search(r"Execution time summary \(estimated GPU time", out)
