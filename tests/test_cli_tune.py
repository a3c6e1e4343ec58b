"""The command line's tuning and benchmark commands on the CPU: tune-op writes records and
resumes without measuring a candidate twice, tune-network tunes, builds and checks a small
network with the simulator, bench refuses without a GPU, and the progress bar stays off
pipes."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys

import pytest
from ptxforge.cli.progress import ProgressBar
from ptxforge.cli.tune import gpu_present, parse_workload

WORKLOAD = "conv2d:1,7,7,16,32,3,3,1,1"


def run_cli(*args, cwd=None, ok=True) -> subprocess.CompletedProcess:
    # the IR round-trip check of the test suite would slow the builds down several times
    env = {**os.environ, "PTXFORGE_CHECK_ROUNDTRIP": "0"}
    proc = subprocess.run([sys.executable, "-m", "ptxforge", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=600, env=env)
    if ok:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def pipelines(path) -> list[str]:
    return [json.loads(line)["pipeline"] for line in path.read_text().splitlines()]


def test_tune_op_writes_records_and_resumes_without_remeasuring(tmp_path):
    log = tmp_path / "op.json"
    common = (WORKLOAD, "--runner", "sim", "--per-round", "8", "--log", str(log))
    proc = run_cli("tune-op", *common, "--trials", "8")
    first = pipelines(log)
    assert len(first) == 8
    assert re.search(r"8 trials in [\d.]+ s \([\d.]+ trials/s", proc.stdout)
    assert re.search(r"best: [\d.]+ ms \(estimated\), [\d.]+ GFLOP/s \(estimated\)", proc.stdout)
    assert "round 1: 8/8 trials" in proc.stderr
    # stdout is a pipe here: no progress bar drawn into it
    assert "\r" not in proc.stdout and "[#" not in proc.stdout

    proc = run_cli("tune-op", *common, "--trials", "16")
    both = pipelines(log)
    assert both[:8] == first and len(both) == 16  # only the missing trials were measured
    assert len(set(both)) == 16  # none of the earlier candidates was measured again
    assert "resuming from" in proc.stderr and "8 earlier trials" in proc.stderr
    assert "resumed after 8 trials" in proc.stdout

    # enough trials already: nothing is measured, the best is still reported
    proc = run_cli("tune-op", *common, "--trials", "16")
    assert len(pipelines(log)) == 16 and "nothing to measure" in proc.stdout
    assert "best:" in proc.stdout


def test_tune_op_rejects_a_malformed_workload(tmp_path):
    proc = run_cli("tune-op", "conv2d:1,7,7", "--trials", "1", "--runner", "sim", "--log",
                   str(tmp_path / "x.json"), ok=False)
    assert proc.returncode != 0 and "N,H,W,CO,CI,KH,KW,stride,pad" in proc.stderr
    assert not (tmp_path / "x.json").exists()


def test_tune_network_on_the_simulator(tmp_path):
    log = tmp_path / "net.json"
    proc = run_cli("tune-network", "resnet_v1-18", "--image-size", "16", "--runner", "sim",
                   "--trials", "18", "--no-sim-check", "--log", str(log))
    n_tasks = int(re.search(r"^(\d+) tasks$", proc.stderr, re.M).group(1))
    records = pipelines(log)
    assert len(records) == 18 >= n_tasks
    assert "[ Task Scheduler ]" in proc.stdout
    assert "* estimated by the simulator runner's model" in proc.stdout
    tuned, total = re.search(r"compiled in [\d.]+ s: (\d+) of (\d+) functions from the "
                             r"records", proc.stdout).groups()
    assert tuned == total  # every function was compiled from a record
    assert "the compiled network matches the numpy reference executor" in proc.stdout
    assert (tmp_path / "net.tasks.txt").exists()


def test_bench_refuses_without_a_gpu(tmp_path):
    if gpu_present():
        pytest.skip("a GPU is present: bench does not refuse")
    for args in (("bench", "op", "--log", str(tmp_path / "op.json")),
                 ("bench", "network", "resnet_v1-18", "--log", str(tmp_path / "net.json"),
                  "--dtype", "float16")):
        proc = run_cli(*args, ok=False)
        assert proc.returncode != 0
        assert "needs an NVIDIA GPU" in proc.stderr and "Traceback" not in proc.stderr


def test_parse_workload_forms():
    func, args = parse_workload("conv2d:2,14,14,8,4,3,3,2,1")
    assert func.__name__ == "conv2d_bias_relu"
    assert args == (2, 14, 14, 8, 4, 3, 3, (2, 2), (1, 1))
    assert parse_workload("seed")[1][3:5] == (512, 512)
    with pytest.raises(ValueError, match="unknown workload"):
        parse_workload("conv3d")


def test_progress_bar_draws_only_on_a_terminal():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    pipe = io.StringIO()
    with ProgressBar(10, stream=pipe) as bar:
        bar.update(5, "round 1")
    assert pipe.getvalue() == ""
    tty = Tty()
    with ProgressBar(10, stream=tty, width=10) as bar:
        bar.update(5, "round 1")
        assert bar.line() == "[#####.....] 5/10 trials  round 1"
    out = tty.getvalue()
    assert out.startswith("\r") and "5/10 trials  round 1" in out and out.endswith("\n")
