"""Replacing a file in one step, through a temporary file created exclusively.

A fixed temporary name (``<path>.tmp``) follows a symlink planted at that name (writing
wherever it points) and is shared by two writers of one path; a temporary left by a failed
write (``distill -o DIR``) stays behind. :func:`replace_atomically` creates its temporary
file with a fresh random name and ``O_EXCL`` (:func:`tempfile.mkstemp`) next to the target,
removes it on any failure, and renames it over the target, which replaces a symlink at the
target rather than writing through it.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from typing import BinaryIO

FILE_MODE = 0o644
"""The permissions of a written file (``mkstemp`` creates its file readable by its owner
only)."""


def replace_atomically(path: str | os.PathLike, write: Callable[[BinaryIO], None]) -> str:
    """Call ``write(f)`` on a new temporary file next to ``path``, sync it and rename it to
    ``path``; a reader sees the old file or the whole new one, never a partial one. Raises
    ``IsADirectoryError`` (nothing written) when ``path`` is a folder."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise IsADirectoryError(f"{path} is a folder; give the name of a file to write")
    folder = os.path.dirname(path) or "."
    try:
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp",
                                   dir=folder)
    except OSError as e:
        # Name the file asked for, not the random temporary nobody asked for.
        raise _naming(e, path, f"cannot create a file in {folder}") from None
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, "w+b") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(e, OSError) and e.errno is not None and e.filename != path:
            raise _naming(e, path, "cannot write") from None
        raise
    return path


def _naming(e: OSError, path: str, doing: str) -> OSError:
    """``e`` (its type, by its errno) naming ``path``: an error of the temporary file or of
    a bare ``write`` (no file name at all) would otherwise not say which file failed."""
    if e.errno is None:
        return e
    return OSError(e.errno, f"{doing} ({e.strerror or e})", path)
