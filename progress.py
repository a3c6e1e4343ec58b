"""Progress output of long runs (the command line's tuning commands, ``tune_torch``): a
one-line progress bar that is drawn only on a terminal, and the ``ptxforge`` logger for
messages. It imports nothing of the project, so every floor may report progress.

The bar redraws itself in place (carriage return) on ``stdout`` when that is a TTY and stays
silent otherwise, so logs and pipes get only the messages. Messages go through
``logging.getLogger("ptxforge")``; :func:`setup_logging` sends them to ``stderr`` with a
handler that clears the bar's line before a message and redraws it after.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

LOGGER_NAME = "ptxforge"
logger = logging.getLogger(LOGGER_NAME)

# the bar being drawn now, if any: the log handler clears and redraws it around messages
_active: ProgressBar | None = None


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is an interactive terminal."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or not a real file
        return False


class ProgressBar:
    """``[#####.....] 24/64 trials  round 3  best 0.1234 ms`` redrawn in place.

    Args:
        total: the count that fills the bar (trials, rounds, ...).
        unit: what is counted, shown after the count.
        stream: where the bar is drawn (default ``sys.stdout``).
        enabled: draw the bar; default: only when ``stream`` is a terminal.
        width: characters between the brackets.
    """

    def __init__(self, total: int, unit: str = "trials", stream: TextIO | None = None,
                 enabled: bool | None = None, width: int = 30):
        self.total = max(int(total), 0)
        self.unit = unit
        self.stream = stream if stream is not None else sys.stdout
        self.enabled = is_terminal(self.stream) if enabled is None else bool(enabled)
        self.width = width
        self.done = 0
        self.info = ""
        self._drawn = False

    def line(self) -> str:
        """The bar's text (without the carriage return)."""
        frac = min(self.done / self.total, 1.0) if self.total else 1.0
        filled = int(round(frac * self.width))
        bar = "#" * filled + "." * (self.width - filled)
        text = f"[{bar}] {self.done}/{self.total} {self.unit}"
        return f"{text}  {self.info}" if self.info else text

    def update(self, done: int, info: str = "") -> None:
        """Set the count to ``done`` and the text after it to ``info``; redraw."""
        global _active
        self.done = int(done)
        self.info = info
        if not self.enabled:
            return
        _active = self
        self._draw()

    def _draw(self) -> None:
        self.stream.write("\r\x1b[K" + self.line())
        self.stream.flush()
        self._drawn = True

    def clear(self) -> None:
        """Erase the bar's line (it is drawn again by the next :meth:`update`)."""
        if self.enabled and self._drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._drawn = False

    def close(self) -> None:
        """Leave the last state of the bar on its own line and stop drawing."""
        global _active
        if self.enabled and self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False
        if _active is self:
            _active = None

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _BarAwareHandler(logging.StreamHandler):
    """A stream handler that keeps messages off the progress bar's line."""

    def emit(self, record: logging.LogRecord) -> None:
        bar = _active
        redraw = bar is not None and bar._drawn
        if redraw:
            bar.clear()
        super().emit(record)
        if redraw:
            bar._draw()


def setup_logging(verbosity: int = 0, stream: TextIO | None = None) -> logging.Logger:
    """Send the ``ptxforge`` logger's messages to ``stream`` (default ``sys.stderr``) as
    plain lines: ``verbosity`` -1 shows warnings only, 0 information, 1 and up debugging
    too. Calling it again replaces the handler."""
    level = logging.WARNING if verbosity < 0 else logging.INFO if verbosity == 0 \
        else logging.DEBUG
    for h in list(logger.handlers):
        if isinstance(h, _BarAwareHandler):
            logger.removeHandler(h)
    handler = _BarAwareHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
    return logger
