"""``--profile`` says where the builders' and the runner's time went, and tune-network takes
``--search-ahead`` and ``--target`` (records for another GPU end the run without a build)."""

from __future__ import annotations

import os
import re
import subprocess
import sys


def run_cli(*args) -> subprocess.CompletedProcess:
    env = {**os.environ, "PTXFORGE_CHECK_ROUNDTRIP": "0"}
    proc = subprocess.run([sys.executable, "-m", "ptxforge", *args], capture_output=True,
                          text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def test_tune_op_profile_splits_the_workers_time(tmp_path):
    proc = run_cli("tune-op", "dense", "--trials", "4", "--per-round", "4", "--runner", "sim",
                   "--no-sim-check", "--log", str(tmp_path / "d.json"), "--profile")
    m = re.search(r"builders: (\d+) workers?, 4 jobs: working ([\d.]+) worker-s \((\d+)% of "
                  r"\d+ x [\d.]+ s\), idle with nothing queued ([\d.]+), finished and waiting "
                  r"for the tuner's process ([\d.]+)", proc.stdout)
    assert m, proc.stdout[-2000:]
    assert int(m.group(1)) >= 1 and float(m.group(2)) > 0
    assert "main process: search" in proc.stdout


def test_tune_network_takes_search_ahead_and_target():
    import argparse

    from ptxforge.cli.tune import add_tune_network_parser

    parser = argparse.ArgumentParser()
    add_tune_network_parser(parser.add_subparsers(dest="cmd"))
    args = parser.parse_args(["tune-network", "bert", "--trials", "10", "--log", "x.json"])
    assert args.search_ahead == 2 and args.target == "cuda" and args.early_stop
    args = parser.parse_args(["tune-network", "bert", "--trials", "10", "--log", "x.json",
                              "--search-ahead", "0", "--target", "cuda -arch=sm_90a"])
    assert args.search_ahead == 0 and args.target == "cuda -arch=sm_90a"


def test_profile_splits_the_gpu_runners_time_by_part():
    from types import SimpleNamespace

    from ptxforge.cli.profile import format_profile
    from ptxforge.measure.runner_gpu import RUN_PARTS, RunParts

    parts = RunParts()
    parts.add({"unpack": 0.001, "inputs": 0.002, "load": 0.003, "check": 0.0, "time": 0.004},
              0.011, stopped_early=True)
    parts.add({"unpack": 0.001, "inputs": 0.0, "load": 0.003, "check": 0.002, "time": 0.012},
              0.019)
    parts.references += 1
    text = format_profile({"search": 1.0}, SimpleNamespace(), 2, 1.0,
                          SimpleNamespace(run_parts=parts))
    line = next(x for x in text.splitlines() if "runner parts:" in x)
    assert "2 candidates, 15.0 ms each in the worker" in line
    for name in RUN_PARTS:
        assert f"{name} " in line
    assert "time 8.0" in line and "other 1.0" in line
    assert "pilot for 1" in line and "references sent 1" in line
    # a runner without parts (the simulator's) adds no line
    assert "runner parts" not in format_profile({}, SimpleNamespace(), 2, 1.0,
                                                SimpleNamespace())


def test_both_tuning_commands_take_the_runners_early_stop():
    import argparse

    from ptxforge.cli.tune import add_tune_network_parser, add_tune_op_parser

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd")
    add_tune_network_parser(sub)
    add_tune_op_parser(sub)
    assert parser.parse_args(["tune-op", "seed", "--trials", "8", "--log", "x.json"]).early_stop
    assert not parser.parse_args(["tune-op", "seed", "--trials", "8", "--log", "x.json",
                                  "--no-early-stop"]).early_stop
    assert not parser.parse_args(["tune-network", "bert", "--trials", "10", "--log", "x.json",
                                  "--no-early-stop"]).early_stop
