"""The command line's progress bar and logger: :mod:`ptxforge.progress`, which the library's
long runs (network tuning, ``tune_torch``) share with the commands."""

from __future__ import annotations

from ..progress import LOGGER_NAME, ProgressBar, is_terminal, logger, setup_logging

__all__ = ["LOGGER_NAME", "ProgressBar", "is_terminal", "logger", "setup_logging"]
