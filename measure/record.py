"""Record files: one JSON object per line and per measurement, on disk as it arrives.

A record holds the task's identity, the schedule as pass text, the tuner's payload and the
result. Files are only ever appended to, one ``write`` per record, so a run that dies (even
by ``kill -9``) loses at most the line being written; :class:`RecordWriter` also calls
``fsync`` at the end of every round, so a power cut loses at most that round. A file whose
last line was cut short (a full disk) is terminated with a newline before anything is
appended, so the next record starts on its own line.

One process writes a log at a time: a writer holds an exclusive ``flock`` on the file, and a
second process opening the same log raises :class:`RecordFileBusy` (two runs on one log
would measure the same candidates twice). Writers in one process share the lock.

Loaders skip any line that is not a well-formed record (bad encoding, too deep, wrong types,
costs that are not positive finite numbers, a payload that is not an object) with a
``RuntimeWarning`` naming the file and the line. The order of records does not matter to
them: the best record is chosen by :func:`rank`, the one rule every reader uses.

The task's module text is not stored (it is large and the tuner that reads a record knows
its task); a loaded record carries a :class:`TaskSpec` with an empty ``module_text``.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import stat
import threading
import warnings
from collections.abc import Iterable, Iterator

from .result import MeasureErrorNo, MeasureInput, MeasureResult, TaskSpec

FORMAT_VERSION = 1

MAX_LINE_BYTES = 1 << 20
"""Lines longer than this are not records (a record is a few kilobytes); they are skipped
unparsed, so a garbage line cannot make a loader spend unbounded memory."""


class RecordFileBusy(RuntimeError):
    """Another process is writing the record file."""


class RecordWriteError(OSError):
    """A record could not be appended (a full disk, an I/O error). An ``OSError`` with the
    original ``errno`` and the log as ``filename``; the message says how many records of
    this run the log holds, so the run can be resumed."""


class RecordTooLarge(ValueError):
    """A record longer than :data:`MAX_LINE_BYTES`, which every loader would skip."""


def encode(inp: MeasureInput, res: MeasureResult) -> str:
    """One record as a JSON line (without the newline); :class:`RecordTooLarge` for one
    longer than :data:`MAX_LINE_BYTES`, which no loader would read back."""
    line = json.dumps({"v": FORMAT_VERSION, "task": inp.task.to_json(),
                       "pipeline": inp.pipeline_text, "payload": inp.payload,
                       "result": res.to_json()}, separators=(",", ":"))
    if len(line) + 1 > MAX_LINE_BYTES and len(line.encode()) + 1 > MAX_LINE_BYTES:
        raise RecordTooLarge(
            f"a record of task {inp.task.name or inp.task.workload_key[:60]!r} takes "
            f"{len(line.encode())} bytes, over the {MAX_LINE_BYTES} a loader reads (an error "
            f"message or payload that large is a defect; {res.error_msg[:80]!r})")
    return line


def _encode_or_warn(path: str, inp: MeasureInput, res: MeasureResult) -> str | None:
    """The record's line with its newline, or None (with a warning naming the log) for a
    record too large to be read back."""
    try:
        return encode(inp, res) + "\n"
    except RecordTooLarge as e:
        warnings.warn(f"{path}: not writing {e}", RuntimeWarning, stacklevel=4)
        return None


def _field(d: dict, key: str, kind, what: str, default=None):
    if key not in d:
        if default is not None:
            return default
        raise ValueError(f"{what} has no {key!r}")
    v = d[key]
    if kind is float:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    elif kind is int:
        ok = isinstance(v, int) and not isinstance(v, bool)
    else:
        ok = isinstance(v, kind)
    if not ok:
        raise ValueError(f"{what}'s {key!r} must be {kind.__name__}, got {v!r:.80}")
    return v


def decode(line: str) -> tuple[MeasureInput, MeasureResult]:
    """The inverse of :func:`encode`; ``ValueError`` for a malformed line (wrong types,
    costs that are not positive finite numbers, a payload that is not an object)."""
    try:
        d = json.loads(line)
    except RecursionError:
        raise ValueError("nested too deeply to be a record") from None
    if not isinstance(d, dict) or d.get("v") != FORMAT_VERSION:
        raise ValueError(f"not a version-{FORMAT_VERSION} record")
    t = _field(d, "task", dict, "the record")
    flop = _field(t, "flop", float, "the task", 0.0)
    if flop < 0:
        raise ValueError(f"the task's flop must not be negative, got {flop!r}")
    task = TaskSpec(workload_key=_field(t, "key", str, "the task"),
                    target=_field(t, "target", str, "the task"), module_text="",
                    flop=float(flop), name=_field(t, "name", str, "the task", ""))
    payload = d.get("payload")
    if payload is not None and not isinstance(payload, dict):
        raise ValueError("the payload must be an object")
    r = _field(d, "result", dict, "the record")
    costs = _field(r, "costs", list, "the result")
    for c in costs:
        if not (isinstance(c, (int, float)) and not isinstance(c, bool) and math.isfinite(c)
                and c > 0):
            raise ValueError(f"costs must be positive finite numbers, got {costs!r:.80}")
    error_no = _field(r, "error_no", int, "the result")
    if error_no == 0 and not costs:
        raise ValueError("a successful result has no costs")
    _field(r, "estimated", bool, "the result", False)
    for key in ("error_msg", "device", "correctness"):
        _field(r, key, str, "the result", "")
    for key in ("all_cost", "timestamp"):
        _field(r, key, float, "the result", 0.0)
    return (MeasureInput(task, _field(d, "pipeline", str, "the record"), payload),
            MeasureResult.from_json(r))


# -- writing ----------------------------------------------------------------------------------


class _Log:
    """An open, locked record file shared by the writers of one process."""

    def __init__(self, path: str):
        self.path = path
        self.mutex = threading.Lock()
        self.users = 0
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            raise RecordFileBusy(
                f"{path} is being written by another process (another tuning run on the same "
                "log?); wait for it to finish or write to another log file") from None
        except OSError as e:  # a file system without locks: append, but say so
            warnings.warn(f"{path}: cannot lock the record file ({e.strerror or e}); a second "
                          "run writing it at the same time would not be detected",
                          RuntimeWarning, stacklevel=4)
        self._terminate_truncated_line()

    def _terminate_truncated_line(self) -> None:
        size = os.fstat(self.fd).st_size
        if not size:
            return
        with open(self.path, "rb") as f:
            f.seek(size - 1)
            last = f.read(1)
        if last != b"\n":
            warnings.warn(f"{self.path}: the last line is a truncated record; ending it so that "
                          "new records start on a line of their own", RuntimeWarning,
                          stacklevel=4)
            self.write(b"\n")

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]

    def close(self) -> None:
        os.close(self.fd)  # releases the lock


_LOGS: dict[str, _Log] = {}
_LOGS_MUTEX = threading.Lock()
_WRITTEN: dict[str, int] = {}  # path -> records this process appended


def records_written() -> dict[str, int]:
    """``{path: records appended}`` by this process's writers (what a command reports when
    it is interrupted)."""
    with _LOGS_MUTEX:
        return dict(_WRITTEN)


def _count(path: str, n: int) -> None:
    with _LOGS_MUTEX:
        _WRITTEN[path] = _WRITTEN.get(path, 0) + n


def _open_log(path: str) -> _Log:
    key = os.path.realpath(path)
    with _LOGS_MUTEX:
        log = _LOGS.get(key)
        if log is None or not _same_file(log.fd, path):  # none, or deleted/replaced since
            log = _LOGS[key] = _Log(path)
        log.users += 1
        return log


def _same_file(fd: int, path: str) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _release_log(log: _Log) -> None:
    with _LOGS_MUTEX:
        log.users -= 1
        if log.users <= 0:
            key = os.path.realpath(log.path)
            if _LOGS.get(key) is log:
                del _LOGS[key]
            log.close()


def _forget_logs_in_child() -> None:
    # a forked worker must not keep the parent's lock alive after the parent died (and a
    # mutex another thread held at the fork would stay held in the child forever)
    global _LOGS_MUTEX
    _LOGS_MUTEX = threading.Lock()
    for log in list(_LOGS.values()):
        try:
            os.close(log.fd)
        except OSError:
            pass
    _LOGS.clear()


os.register_at_fork(after_in_child=_forget_logs_in_child)


class RecordWriter:
    """Appends measurements to ``path`` as they arrive.

    The tuning loops call :meth:`on_result` for each result the moment the runner hands it
    back (one ``write`` per record: nothing is buffered in the process), then call the
    writer with the whole round, ``writer(inputs, results)``: records not written yet are
    written, and the file is ``fsync`` ed. Used only as a round callback, it writes the
    round at once. Holds the log's lock (see :class:`RecordFileBusy`) until :meth:`close`.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        folder = os.path.dirname(self.path)
        if folder:
            os.makedirs(folder, exist_ok=True)
        self._log: _Log | None = _open_log(self.path)
        self._written: dict = {}  # id(result) -> result: streamed, not yet seen in a round
        self.count = 0

    def on_result(self, inp: MeasureInput, res: MeasureResult) -> None:
        """Append one record now (called from the thread that collects results)."""
        log = self._require()
        line = _encode_or_warn(self.path, inp, res)
        with log.mutex:
            self._written[id(res)] = res
            if line is None:
                return
            self._append(log, line.encode(), 1, sync=False)

    def __call__(self, inputs, results) -> None:
        log = self._require()
        with log.mutex:
            data = []
            for inp, res in zip(inputs, results):
                if self._written.pop(id(res), None) is res:
                    continue
                line = _encode_or_warn(self.path, inp, res)
                if line is not None:
                    data.append(line)
            self._append(log, "".join(data).encode(), len(data), sync=True)

    def _append(self, log: _Log, data: bytes, n: int, sync: bool) -> None:
        """Write ``n`` records (``data``), then ``fsync`` when ``sync``; a failure is a
        :class:`RecordWriteError` saying how many records of this run the log holds."""
        try:
            if data:
                log.write(data)
            if sync:
                os.fsync(log.fd)
        except OSError as e:
            saved = records_written().get(self.path, 0)
            raise RecordWriteError(
                e.errno, f"{e.strerror or e} while appending to the record log; {saved} "
                f"records of this run are saved in it (free space or fix the file, then run "
                "the same command again to resume)", self.path) from e
        self.count += n
        _count(self.path, n)

    def sync(self) -> None:
        """``fsync`` the file."""
        if self._log is not None:
            os.fsync(self._log.fd)

    def _require(self) -> _Log:
        if self._log is None:
            raise ValueError(f"the record writer of {self.path} is closed")
        if not _same_file(self._log.fd, self.path):
            self._reopen()
        return self._log

    def _reopen(self) -> None:
        """The log was replaced (``records distill LOG -o LOG.best && mv LOG.best LOG``) or
        deleted while this writer held it: records written to the old file would be lost
        with it, and the new file would be unlocked, so a second run could take it. Append
        to (and lock) the file the path names now; :class:`RecordFileBusy` if another
        process holds it already."""
        old = self._log
        new = _open_log(self.path)  # raises RecordFileBusy before the old log is let go
        self._log = new
        if old is not None:
            _release_log(old)
        warnings.warn(f"{self.path} was replaced or deleted while records were being written "
                      "to it; writing the next records to the file it names now",
                      RuntimeWarning, stacklevel=4)

    def close(self) -> None:
        """Sync and give up the lock (when no other writer of this process holds it)."""
        log, self._log = self._log, None
        if log is not None:
            try:
                os.fsync(log.fd)
            finally:
                _release_log(log)

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def streaming_hook(callbacks) -> object | None:
    """A function ``(input, result)`` calling ``on_result`` of each of ``callbacks`` that
    has one (None when none has): the tuning loops call it as each result arrives."""
    hooks = [cb.on_result for cb in callbacks if callable(getattr(cb, "on_result", None))]
    if not hooks:
        return None

    def hook(inp, res) -> None:
        for h in hooks:
            h(inp, res)

    return hook


def save_records(path: str | os.PathLike, inputs, results) -> None:
    """Append records to ``path`` and ``fsync`` it (raises :class:`RecordFileBusy` when
    another process is writing it)."""
    with RecordWriter(path) as w:
        w(inputs, results)


# -- reading ----------------------------------------------------------------------------------


def iter_records(path: str | os.PathLike) -> Iterator[tuple[MeasureInput, MeasureResult]]:
    """The records of ``path`` in file order, skipping (with a ``RuntimeWarning`` naming
    the file and the line) any line that is not a well-formed record."""
    for _, inp, res in iter_numbered(path):
        yield inp, res


def iter_numbered(path: str | os.PathLike) -> Iterator[tuple[int, MeasureInput,
                                                             MeasureResult]]:
    """``(line number, input, result)`` of the records of ``path`` (see
    :func:`iter_records`), for readers that check payloads and name the bad line."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        mode = os.fstat(f.fileno()).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
            # a device such as /dev/zero never ends a line and never ends
            raise ValueError(f"{path} is not a record file (not a regular file or a pipe)")
        n = 0
        while True:
            raw = f.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            n += 1
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                while raw and not raw.endswith(b"\n"):  # skip the rest of the line
                    raw = f.readline(MAX_LINE_BYTES)
                skip_line(path, n, "an overlong line", f"over {MAX_LINE_BYTES} bytes")
                continue
            if not raw.strip():
                continue
            try:
                inp, res = decode(raw.decode("utf-8").strip())
            except UnicodeDecodeError as e:
                skip_line(path, n, "a corrupt record", f"not UTF-8: {e}")
                continue
            except (ValueError, KeyError, TypeError) as e:
                what = "a truncated record" if not raw.endswith(b"\n") else "a corrupt record"
                skip_line(path, n, what, f"{type(e).__name__}: {e}")
                continue
            yield n, inp, res


def skip_line(path: str, n: int, what: str, why: str) -> None:
    """Warn that line ``n`` of ``path`` is skipped (``what``: e.g. "a corrupt record")."""
    warnings.warn(f"{path}:{n}: skipping {what} ({why})", RuntimeWarning, stacklevel=4)


def load_records(path: str | os.PathLike) -> list[tuple[MeasureInput, MeasureResult]]:
    """Every readable record of ``path`` (see :func:`iter_records`)."""
    return list(iter_records(path))


def _records(source) -> Iterable:
    if isinstance(source, (str, os.PathLike)):
        return iter_records(source)
    return source


def ranked_records(source, key=None) -> dict:
    """The successful records per workload key (and target), best first by :func:`rank`:
    ``{(key, target): [(input, result), ...]}``. A reader whose best record no longer
    applies takes the next. ``source`` is a path or an iterable of records; ``key``
    optionally maps a record to the grouping key instead."""
    groups: dict = {}
    for inp, res in _records(source):
        if res.error_no != MeasureErrorNo.NO_ERROR:
            continue
        k = key(inp, res) if key else (inp.task.workload_key, inp.task.target)
        groups.setdefault(k, []).append((inp, res))
    for recs in groups.values():
        recs.sort(key=lambda p: rank(p[1]))
    return groups


def best_records(source, key=None) -> dict:
    """The best successful record per workload key (and target): ``{(key, target):
    (input, result)}`` (see :func:`rank` and :func:`ranked_records`)."""
    best: dict = {}
    for inp, res in _records(source):
        if res.error_no != MeasureErrorNo.NO_ERROR:
            continue
        k = key(inp, res) if key else (inp.task.workload_key, inp.task.target)
        if k not in best or rank(res) < rank(best[k][1]):
            best[k] = (inp, res)
    return best


def rank(res: MeasureResult) -> tuple:
    """Sort key of successful results, the one rule for "best" everywhere: a GPU
    measurement beats a simulator estimate, then the lowest mean cost wins, then the
    earliest timestamp (so the order of records in a file does not matter)."""
    return (bool(res.estimated), res.mean, res.timestamp)


def distill(in_path: str | os.PathLike, out_path: str | os.PathLike) -> int:
    """Write the best record per workload of ``in_path`` to ``out_path`` (replacing it);
    return how many were written. Refuses to overwrite ``in_path`` itself."""
    if os.path.exists(out_path) and os.path.samefile(in_path, out_path):
        raise ValueError(f"distill would overwrite its input {os.fspath(in_path)} with only the "
                         "best records; write to another file")
    if os.path.isdir(out_path):
        raise IsADirectoryError(f"{os.fspath(out_path)} is a folder; give distill the name of "
                                "a file to write")
    from ..atomic_file import replace_atomically

    best = best_records(in_path)
    data = "".join(encode(inp, res) + "\n" for inp, res in best.values()).encode()
    # a temporary file of a fresh name: a fixed "<out>.tmp" would follow a symlink put there
    replace_atomically(out_path, lambda f: f.write(data))
    return len(best)
