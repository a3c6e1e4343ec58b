"""Cost-model transfer on the command line: tune-op saves its model (--save-model) and
seeds another search with one (--load-model), `records train-model` fits a model on a log,
and a file that is not a model is refused before anything is tuned."""

from __future__ import annotations

import json

import numpy as np
import pytest
from ptxforge.autosched.model_file import load_model
from ptxforge.cli.main import main

WORKLOAD = "conv2d:1,7,7,16,32,3,3,1,1"
OTHER = "conv2d:1,14,14,16,16,3,3,1,1"


@pytest.fixture(autouse=True)
def _fast_builds(monkeypatch):
    # the IR round-trip check of the test suite would slow the builds down several times
    monkeypatch.setenv("PTXFORGE_CHECK_ROUNDTRIP", "0")


def tune(workload, log, *extra):
    return main(["tune-op", workload, "--runner", "sim", "--no-sim-check", "--per-round", "8",
                 "--trials", "8", "--log", str(log), *extra])


def test_save_train_and_load_a_model(tmp_path, capsys):
    log, saved, trained = tmp_path / "a.json", tmp_path / "a.npz", tmp_path / "t.npz"
    assert tune(WORKLOAD, log, "--save-model", str(saved)) == 0
    ok = sum(1 for line in log.read_text().splitlines()
             if json.loads(line)["result"]["error_no"] == 0)
    samples, trees, count = load_model(saved)
    assert len(samples) == 8 and trees is not None and count > 0 and ok > 0

    capsys.readouterr()
    assert main(["records", "train-model", str(log), "-o", str(trained)]) == 0
    assert "trained on 8 records of 1 workloads" in capsys.readouterr().out
    a, _, _ = load_model(trained)
    # the same samples; the log holds them in the order builds finished, the model in the
    # order results came back, which parallel builds may swap
    np.testing.assert_array_equal(np.sort(a.labels), np.sort(samples.labels))

    log2 = tmp_path / "b.json"
    assert tune(OTHER, log2, "--load-model", str(trained)) == 0
    assert "cost model " + str(trained) + ": 8 samples" in capsys.readouterr().err
    assert len(log2.read_text().splitlines()) == 8


def test_a_file_that_is_not_a_model_is_refused_before_tuning(tmp_path, capsys):
    junk = tmp_path / "junk.npz"
    junk.write_text("not a model")
    log = tmp_path / "c.json"
    assert main(["tune-op", WORKLOAD, "--runner", "sim", "--trials", "8", "--log", str(log),
                 "--load-model", str(junk)]) == 1
    assert "not a ptxforge cost model file" in capsys.readouterr().err
    assert not log.exists()
    assert main(["tune-op", WORKLOAD, "--runner", "sim", "--trials", "8", "--log", str(log),
                 "--load-model", str(tmp_path / "none.npz")]) == 1
    assert "does not exist" in capsys.readouterr().err


def test_train_model_needs_an_output_and_records_it_can_read(tmp_path, capsys):
    empty = tmp_path / "empty.json"
    empty.write_text("")
    with pytest.raises(SystemExit, match="--output"):
        main(["records", "train-model", str(empty)])
    with pytest.raises(SystemExit, match="no auto-scheduler record"):
        main(["records", "train-model", str(empty), "-o", str(tmp_path / "m.npz")])
    assert not (tmp_path / "m.npz").exists()


@pytest.mark.slow
def test_tune_network_saves_a_model_that_seeds_another_network(tmp_path, capsys):
    saved = tmp_path / "r18.npz"
    common = ("--image-size", "16", "--runner", "sim", "--no-sim-check")
    assert main(["tune-network", "resnet_v1-18", *common, "--trials", "18", "--log",
                 str(tmp_path / "a.json"), "--save-model", str(saved)]) == 0
    samples, _, _ = load_model(saved)
    assert len(samples) == 18
    assert f"cost model saved to {saved} (18 samples)" in capsys.readouterr().err
    assert main(["tune-network", "resnet_v1-34", *common, "--trials", "18", "--log",
                 str(tmp_path / "b.json"), "--load-model", str(saved)]) == 0
    assert f"cost model {saved}: 18 samples" in capsys.readouterr().err
    # a network's log names workloads that exist once its tasks are extracted: --network
    # (in this process they are registered already; in a new one --network does it)
    trained = tmp_path / "t.npz"
    assert main(["records", "train-model", str(tmp_path / "b.json"), "-o", str(trained),
                 "--network", "resnet_v1-34", "--image-size", "16"]) == 0
    assert len(load_model(trained)[0]) == 18
