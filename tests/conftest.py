"""Test configuration: GPU tests run only where a CUDA GPU answers."""

from __future__ import annotations

import functools
import os

import pytest

# every IR a pass produces in the test suite must print, parse back and print the same
os.environ.setdefault("PTXFORGE_CHECK_ROUNDTRIP", "1")


@functools.lru_cache(maxsize=1)
def gpu_available() -> bool:
    try:
        from cuda.bindings import driver
    except Exception:
        return False
    try:
        (err,) = driver.cuInit(0)
        if int(err) != 0:
            return False
        err, count = driver.cuDeviceGetCount()
        return int(err) == 0 and count > 0
    except Exception:
        return False


def pytest_configure(config):
    # pytest-xdist's default "load" hands each worker a fixed first quarter of the suite in
    # order; the auto-scheduler and tuning files at the front of it took one worker minutes
    # past the other. "worksteal" lets an idle worker take queued tests from a busy one.
    # An explicit --dist on the command line is kept.
    if hasattr(config, "workerinput") or getattr(config.option, "dist", "no") != "load":
        return
    if not any(a == "--dist" or a.startswith("--dist=") or a == "-d"
               for a in config.invocation_params.args):
        config.option.dist = "worksteal"


def pytest_collection_modifyitems(config, items):
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU with a CUDA driver; none found here")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _ptxforge_logger_restored():
    """Each test leaves the ``ptxforge`` logger as it found it: a test that runs the command
    line in this process (``cli.main.main``) gives the logger a handler on pytest's captured
    stderr, closed after that test, and stops it propagating, so later tests' ``caplog``
    would see nothing and their messages would fail to write."""
    import logging

    log = logging.getLogger("ptxforge")
    handlers, level, propagate = list(log.handlers), log.level, log.propagate
    yield
    log.handlers[:] = handlers
    log.setLevel(level)
    log.propagate = propagate
