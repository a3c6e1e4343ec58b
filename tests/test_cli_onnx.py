"""The command line takes an ONNX file where it takes a zoo name: ``tune-network`` tunes,
builds and checks it on the simulator (``--input`` shapes a dynamic dimension and gives an
int64 input its value range), ``inspect`` prints its inputs, operators and fused functions,
``bench`` refuses without a GPU, and malformed ``--input`` values are clear errors."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

from ptxforge.cli.network_source import load_network, parse_input
from ptxforge.cli.tune import gpu_present

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def run_cli(*args, ok=True) -> subprocess.CompletedProcess:
    env = {**os.environ, "PTXFORGE_CHECK_ROUNDTRIP": "0"}
    proc = subprocess.run([sys.executable, "-m", "ptxforge", *args], capture_output=True,
                          text=True, timeout=600, env=env)
    if ok:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    """Token ids (int64, dynamic batch) scale features, then a dense layer and a ReLU."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.uniform(-0.5, 0.5, (16, 8)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.uniform(-0.5, 0.5, (8,)).astype(np.float32), "b")]
    nodes = [helper.make_node("Cast", ["ids"], ["idsf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["x", "idsf"], ["scaled"]),
             helper.make_node("MatMul", ["scaled", "w"], ["mm"]),
             helper.make_node("Add", ["mm", "b"], ["pre"]),
             helper.make_node("Relu", ["pre"], ["y"])]
    g = helper.make_graph(nodes, "tiny",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 16]),
                           helper.make_tensor_value_info("ids", TensorProto.INT64, ["n", 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])],
                          inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path = tmp_path_factory.mktemp("onnx") / "tiny.onnx"
    onnx.save(model, str(path))
    return str(path)


def test_tune_network_takes_an_onnx_file(model_path, tmp_path):
    log = tmp_path / "tiny.json"
    proc = run_cli("tune-network", model_path, "--input", "x:4x16",
                   "--input", "ids:4x16:int64:0..50", "--runner", "sim", "--trials", "4",
                   "--no-sim-check", "--layout", "NCHW", "--log", str(log))
    n_tasks = int(re.search(r"^(\d+) tasks$", proc.stderr, re.M).group(1))
    assert 1 <= n_tasks <= 4
    assert len(log.read_text().splitlines()) == 4
    assert "network tiny.onnx" in proc.stderr
    assert re.search(r"compiled in [\d.]+ s: (\d+) of \1 functions from the records", proc.stdout)
    assert "the compiled network matches the numpy reference executor" in proc.stdout


def test_inspect_prints_inputs_operators_and_fused_functions(model_path):
    out = run_cli("inspect", model_path, "--input", "x:2x16", "--input", "ids:2x16",
                  "--graph").stdout
    assert "input  x: [2, 16] float32" in out and "input  ids: [2, 16] int64" in out
    assert "output 0: [2, 8] float32" in out
    assert "nn.dense x1" in out and "cast x1" in out
    assert re.search(r"\d+ distinct fused functions \(float32\)", out)
    assert "vm_mod_fused_nn_dense" in out and "def @main" in out


def test_dynamic_inputs_without_a_shape_are_a_clear_error(model_path):
    proc = run_cli("inspect", model_path, ok=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "dynamic dimensions" in proc.stderr and "'x'" in proc.stderr


def test_bench_takes_an_onnx_file_and_refuses_without_a_gpu(model_path, tmp_path):
    if gpu_present():
        pytest.skip("a GPU is present: bench does not refuse")
    proc = run_cli("bench", "network", model_path, "--input", "x:2x16", "--input",
                   "ids:2x16", "--log", str(tmp_path / "none.json"), ok=False)
    assert proc.returncode != 0 and "needs an NVIDIA GPU" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_input_specs_parse_and_check(model_path):
    spec = parse_input("input_ids:1x128:int64:0..30522")
    assert (spec.name, spec.shape, spec.dtype, spec.low, spec.high) == (
        "input_ids", (1, 128), "int64", 0, 30522)
    assert parse_input("x:3,4").shape == (3, 4) and parse_input("s:scalar").shape == ()
    for bad, why in (("x", "NAME:SHAPE"), ("x:3xa", "not dims"), ("x:3:float99", "dtype"),
                     ("x:3:int64:5..2", "empty value range"), ("x:3:int64:7", "LOW..HIGH")):
        with pytest.raises(ValueError, match=why):
            parse_input(bad)
    with pytest.raises(ValueError, match="dtype float32, but the model's input 'ids' is int64"):
        load_network(model_path, ["x:2x16", "ids:2x16:float32"])
    with pytest.raises(ValueError, match="unknown network 'nonet'"):
        load_network("nonet")
    loaded = load_network(model_path, ["x:2x16", "ids:2x16:int64:5..9"])
    feeds = loaded.random_inputs(1)
    assert feeds["ids"].dtype == np.int64 and 5 <= feeds["ids"].min() <= feeds["ids"].max() < 9
    assert feeds["x"].dtype == np.float32 and feeds["x"].shape == (2, 16)
