"""``tvm.auto_scheduler``: the Ansor-style auto-scheduler (``ptxforge.autosched``), with
TVM's measurement names: ``LocalBuilder`` and ``LocalRunner`` (``ptxforge.measure``) and
``SimRunner``, the CPU simulator runner that stands in for a GPU."""

from ptxforge.autosched import *  # noqa: F401,F403
from ptxforge.measure import LocalBuilder, LocalRunner, SimRunner  # noqa: F401
