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
    assert args.search_ahead == 1 and args.target == "cuda"
    args = parser.parse_args(["tune-network", "bert", "--trials", "10", "--log", "x.json",
                              "--search-ahead", "0", "--target", "cuda -arch=sm_90a"])
    assert args.search_ahead == 0 and args.target == "cuda -arch=sm_90a"
