"""The task scheduler's table file is replaced through an exclusively created temporary
with a random name: a symlink planted at the old fixed ``<table>.tmp`` name is never
followed, and no temporary is left behind."""

from __future__ import annotations

import os

import pytest

from ptxforge import autosched, te


@autosched.register_workload(override=True)
def hardening_table_relu(n):
    a = te.placeholder((n, 64), name="a")
    return [a, te.compute((n, 64), lambda i, j: te.max(a[i, j], 0.0), name="relu")]


def scheduler():
    tasks = [autosched.SearchTask(func=hardening_table_relu, args=(n,), desc=f"relu{n}")
             for n in (8, 16)]
    return autosched.TaskScheduler(tasks, callbacks=[])


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_a_symlink_at_the_old_temporary_name_is_not_followed(tmp_path, capsys):
    table = tmp_path / "tasks.txt"
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    os.symlink(victim, str(table) + ".tmp")
    autosched.PrintTableInfo(table).pre_tune(scheduler(), 0)
    assert victim.read_text() == "precious\n"
    assert "[ Task Scheduler ]" in table.read_text() and "relu16" in table.read_text()
    assert not table.is_symlink()
    # only the table, the planted link and its target: no temporary left behind
    assert sorted(p.name for p in tmp_path.iterdir()) == \
        ["tasks.txt", "tasks.txt.tmp", "victim.txt"]


def test_the_table_replaces_a_symlink_at_its_own_name(tmp_path, capsys):
    table = tmp_path / "sub" / "tasks.txt"
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    table.parent.mkdir()
    os.symlink(victim, table)
    autosched.PrintTableInfo(table).pre_tune(scheduler(), 1)
    assert victim.read_text() == "precious\n"
    assert not table.is_symlink() and "Next ID: 1" in table.read_text()


def test_a_table_file_that_is_a_folder_is_refused(tmp_path, capsys):
    with pytest.raises(IsADirectoryError, match="give the name of a file"):
        autosched.PrintTableInfo(tmp_path).pre_tune(scheduler(), 0)
