"""``tvm.auto_scheduler``: the Ansor-style auto-scheduler (``ptxforge.autosched``)."""

from ptxforge.autosched import *  # noqa: F401,F403
