"""Finalizers that free GPU memory or unload modules report a failed release as one
warning, except where the failure is expected: at interpreter exit, and in a forked worker
dropping what it inherited from the process that initialized CUDA."""

from __future__ import annotations

import os
import warnings

import pytest
from ptxforge.backend_ptx import cuda_driver
from ptxforge.backend_ptx.cuda_driver import CudaError, release_failed


def _error(name: str) -> CudaError:
    return CudaError("cuMemFree", name, "driver message")


def _warned(monkeypatch, name: str, init_pid) -> list:
    monkeypatch.setattr(cuda_driver, "_init_pid", init_pid)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        release_failed(_error(name))
    return [str(w.message) for w in seen]


def test_a_forked_child_drops_inherited_resources_quietly(monkeypatch):
    assert _warned(monkeypatch, "CUDA_ERROR_NOT_INITIALIZED", os.getpid() + 1) == []


def test_the_initializing_process_is_told_when_the_driver_is_not_initialized(monkeypatch):
    (msg,) = _warned(monkeypatch, "CUDA_ERROR_NOT_INITIALIZED", os.getpid())
    assert "could not release a CUDA resource" in msg and "NOT_INITIALIZED" in msg


@pytest.mark.parametrize("pid", ["parent", "child"])
def test_other_failures_warn_in_any_process(monkeypatch, pid):
    init_pid = os.getpid() if pid == "parent" else os.getpid() + 1
    (msg,) = _warned(monkeypatch, "CUDA_ERROR_ILLEGAL_ADDRESS", init_pid)
    assert "ILLEGAL_ADDRESS" in msg


def test_exit_time_errors_stay_quiet(monkeypatch):
    assert _warned(monkeypatch, "CUDA_ERROR_DEINITIALIZED", os.getpid()) == []
