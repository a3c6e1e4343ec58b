"""The print / parse round trip that the suite checks after every pass (``tests/conftest.py``
turns it on), switched off for stretches of a test.

A test that schedules or lowers many random states checks the round trip on the first few
and not on the rest: the check parses the IR after every pass and costs four to five times
the lowering itself, and the IR it would check differs from the first states' only in its
numbers. The suite's other tests check it on every pass they run.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

ENV = "PTXFORGE_CHECK_ROUNDTRIP"


@contextlib.contextmanager
def roundtrip_skipped(skip: bool = True) -> Iterator[None]:
    """Within the block, contexts made do not check the round trip when ``skip`` (with
    ``skip`` false the block keeps the suite's setting); the setting comes back after it."""
    before = os.environ.get(ENV)
    if skip:
        os.environ[ENV] = "0"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = before
