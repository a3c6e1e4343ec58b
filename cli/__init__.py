"""The command line: ``python -m ptxforge`` / ``ptxforge`` with subcommands demo, inspect,
records, plot (and the tuning and benchmark commands)."""

from .main import main

__all__ = ["main"]
