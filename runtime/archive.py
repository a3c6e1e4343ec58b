"""The file of an exported module: one zip archive of JSON, text and ``.npy`` members.

``manifest.json`` names the format and its version and describes the module; every other
member is data it refers to by name (device IR and PTX as text, cubins as bytes, weights as
``.npy`` read with ``allow_pickle=False``). Nothing in the file is pickled or executed. The
manifest keeps the SHA-256 of every member, so a changed, damaged or missing member is an
error naming it, as is a manifest of another format version.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import struct
import zipfile
import zlib

import numpy as np

from ..atomic_file import replace_atomically
from ..ir import dtype as dt

FORMAT = "ptxforge-module"
VERSION = 2
"""The format version written and read. 2: GPU code for several architectures per kernel
(``builds``), member digests, weights with their dtype."""

MANIFEST = "manifest.json"


class ModuleFormatError(ValueError):
    """An exported module that cannot be read: not one, another version, or damaged."""


def array_member(files: dict, name: str, value) -> dict:
    """Add ``value`` to ``files`` as ``.npy`` member ``name``; returns its manifest entry.

    Host dtypes ``.npy`` cannot describe (``ml_dtypes.bfloat16`` saves as raw ``V2``) are
    stored as unsigned integers of their width; the entry's dtype says how to read them.
    """
    # np.require keeps a 0-d value 0-d (np.ascontiguousarray would make it shape [1])
    arr = np.require(value.numpy() if hasattr(value, "numpy") else np.asarray(value),
                     requirements="C")
    stored = arr if arr.dtype.kind in "biufc" else arr.view(f"u{arr.dtype.itemsize}")
    buf = io.BytesIO()
    np.save(buf, stored, allow_pickle=False)
    files[name] = buf.getvalue()
    return {"member": name, "dtype": dt.from_numpy(arr.dtype), "shape": list(arr.shape)}


def write_archive(path, manifest: dict, files: dict) -> str:
    """Write ``manifest`` (with the digest of every member added) and ``files`` to ``path``
    in one step: a partial file never replaces an existing one."""
    manifest = {**manifest, "sha256": {n: hashlib.sha256(d).hexdigest()
                                       for n, d in files.items()}}
    def write(f) -> None:
        with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            zf.writestr(MANIFEST, json.dumps(manifest, indent=1))
            for name, data in files.items():
                zf.writestr(name, data, compress_type=_compression(data))

    path = replace_atomically(path, write)
    return path


MAX_MANIFEST_BYTES = 64 << 20
"""The largest manifest read (a network of thousands of functions takes a few megabytes)."""

MAX_CODE_BYTES = 256 << 20
"""The largest text or cubin member read (device IR, PTX, a cubin)."""

MAX_RATIO = 100
"""How many times its compressed size a member larger than :data:`RATIO_FROM` may inflate
to. Weights and code compress a few times at most; a member that inflates a thousand times
(deflate's limit) is a zip bomb, refused before it is read."""

RATIO_FROM = 1 << 20

MAX_NPY_HEADER = 1 << 16
"""The longest ``.npy`` header read (numpy writes a few hundred bytes)."""

_CHUNK = 16 << 20


def _compression(data: bytes) -> int:
    """How to store a member: deflated, unless it would deflate more than the loader
    accepts (:data:`MAX_RATIO`; an all-zero weight deflates a thousand times), then as it
    is, so that every file written loads."""
    if len(data) > RATIO_FROM and len(zlib.compress(data, 1)) * MAX_RATIO < len(data):
        return zipfile.ZIP_STORED
    return zipfile.ZIP_DEFLATED


def _short(value) -> str:
    """``repr(value)`` cut to a length an error message can show."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _damaged(e: BaseException) -> bool:
    """Whether ``e`` is what reading a damaged zip member raises (a corrupt deflate stream,
    a bad CRC, an unsupported feature)."""
    return isinstance(e, (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError,
                          NotImplementedError, RuntimeError, struct.error))


class Archive:
    """An exported module file opened for reading: the checked manifest and its members.

    Nothing is read before its declared size is checked: the manifest and code members
    have fixed bounds (:data:`MAX_MANIFEST_BYTES`, :data:`MAX_CODE_BYTES`), a weight the
    size its ``.npy`` header and the manifest agree on, and no member may inflate more than
    :data:`MAX_RATIO` times. Every fault is a :class:`ModuleFormatError` naming the member.
    """

    def __init__(self, path):
        self.path = os.fspath(path)
        try:
            self._zip = zipfile.ZipFile(self.path)
        except FileNotFoundError:
            raise
        except (IsADirectoryError, PermissionError):
            raise
        except Exception as e:  # noqa: BLE001 - zipfile raises many types for a damaged file
            if not _damaged(e):
                raise
            raise ModuleFormatError(f"{self.path} is not an exported ptxforge module ({e}); "
                                    "write one with module.export_library(path)") from None
        try:
            self.manifest = self._read_manifest()
        except BaseException:
            self._zip.close()
            raise

    def _read_manifest(self) -> dict:
        from .manifest import SCHEMAS
        from .schema import SchemaError, validate

        try:
            data = self._read(MANIFEST, MAX_MANIFEST_BYTES)
            manifest = json.loads(data.decode("utf-8"))
        except ModuleFormatError:
            raise
        except RecursionError:
            raise ModuleFormatError(f"{self.path}: {MANIFEST} is nested too deeply to be a "
                                    "manifest; the file is damaged") from None
        except (UnicodeDecodeError, ValueError) as e:
            raise ModuleFormatError(f"{self.path}: no readable {MANIFEST} ({e}); the file is "
                                    "not an exported ptxforge module or is damaged") from None
        fmt = manifest.get("format") if isinstance(manifest, dict) else None
        if fmt != FORMAT:
            raise ModuleFormatError(f"{self.path}: not an exported ptxforge module (format "
                                    f"{_short(fmt)})")
        version = manifest.get("version")
        if version != VERSION or type(version) is not int:
            newer = type(version) is int and version > VERSION
            raise ModuleFormatError(
                f"{self.path}: format version {_short(version)}; this ptxforge reads "
                f"version {VERSION}: " + ("upgrade ptxforge to load it" if newer
                                          else "export it again"))
        if not isinstance(manifest.get("sha256"), dict):
            raise self.malformed("no member digests")
        kind = manifest.get("kind")
        if not isinstance(kind, str) or kind not in SCHEMAS:
            raise ModuleFormatError(f"{self.path}: unknown kind {_short(kind)} (kernel or "
                                    "network)")
        try:
            validate(manifest, SCHEMAS[kind])
        except SchemaError as e:
            raise self.malformed(str(e)) from None
        return manifest

    def malformed(self, what: str) -> ModuleFormatError:
        """The error for a manifest that lacks an entry or has one of the wrong shape."""
        return ModuleFormatError(f"{self.path}: the manifest is malformed ({what}); export the "
                                 "module again")

    def _info(self, name: str, limit: int) -> zipfile.ZipInfo:
        """The zip entry of member ``name``, checked before anything of it is read: stored
        or deflated, not encrypted, at most ``limit`` bytes inflated and not a zip bomb."""
        try:
            info = self._zip.getinfo(name)
        except KeyError:
            raise ModuleFormatError(f"{self.path}: {name} is missing; export the module "
                                    "again") from None
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise ModuleFormatError(f"{self.path}: {name} uses zip compression method "
                                    f"{info.compress_type}; exported modules are stored or "
                                    "deflated only")
        if info.flag_bits & 0x1:
            raise ModuleFormatError(f"{self.path}: {name} is encrypted; exported modules are "
                                    "not")
        if info.file_size > limit:
            raise ModuleFormatError(f"{self.path}: {name} declares {info.file_size} bytes, "
                                    f"more than the {limit} it may hold")
        if (info.file_size > RATIO_FROM
                and info.file_size > MAX_RATIO * max(1, info.compress_size)):
            raise ModuleFormatError(
                f"{self.path}: {name} would inflate from {info.compress_size} to "
                f"{info.file_size} bytes (more than {MAX_RATIO} times): a zip bomb, not an "
                "exported module")
        return info

    def _read(self, name: str, limit: int) -> bytes:
        info = self._info(name, limit)
        try:
            with self._zip.open(info) as f:
                return f.read()
        except Exception as e:  # noqa: BLE001 - see _damaged
            if not _damaged(e):
                raise
            raise ModuleFormatError(f"{self.path}: {name} is damaged ({type(e).__name__}: "
                                    f"{e}); export the module again") from None

    def _digest(self, name: str) -> str:
        digest = self.manifest["sha256"].get(name) if isinstance(name, str) else None
        if digest is None:
            raise self.malformed(f"it refers to {name!r}, which it lists no digest for")
        return digest

    def _mismatch(self, name: str) -> ModuleFormatError:
        return ModuleFormatError(f"{self.path}: {name} does not match its digest in the "
                                 "manifest (the file was changed or damaged)")

    def member(self, name: str, limit: int = MAX_CODE_BYTES) -> bytes:
        """Member ``name`` (at most ``limit`` bytes), checked against its digest in the
        manifest."""
        digest = self._digest(name)
        data = self._read(name, limit)
        if hashlib.sha256(data).hexdigest() != digest:
            raise self._mismatch(name)
        return data

    def text(self, name: str) -> str:
        try:
            return self.member(name).decode("utf-8")
        except UnicodeDecodeError as e:
            raise ModuleFormatError(f"{self.path}: {name} is not UTF-8 text ({e})") from None

    def array(self, entry: dict, what: str) -> np.ndarray:
        """The array of an :func:`array_member` entry (validated by the manifest's schema),
        of the dtype and shape it states. The ``.npy`` header is read and compared with the
        entry first, and the member's size with what they declare, so a header claiming
        more elements than the member holds is refused before any memory is taken; the
        data is then read into the array in chunks as its digest is computed."""
        name, dtype, shape = entry["member"], entry["dtype"], tuple(entry["shape"])
        want = dt.to_numpy(dtype)
        stored = want if want.kind in "biufc" else np.dtype(f"u{want.itemsize}")
        expect = math.prod(shape) * stored.itemsize
        digest = self._digest(name)
        info = self._info(name, expect + MAX_NPY_HEADER)
        sha = hashlib.sha256()
        try:
            with self._zip.open(info) as f:
                head = f.read(min(info.file_size, MAX_NPY_HEADER))
                header_len, arr_shape, fortran, arr_dtype = _npy_header(head)
                if arr_shape != shape:
                    raise ModuleFormatError(f"{self.path}: {what} has shape {list(arr_shape)}, "
                                            f"the manifest says {list(shape)}")
                if arr_dtype != stored:
                    raise ModuleFormatError(f"{self.path}: {what} holds {arr_dtype}, the "
                                            f"manifest says {dtype}")
                if fortran and len(shape) > 1:
                    raise ModuleFormatError(f"{self.path}: {what} is stored in Fortran order; "
                                            "exported weights are C-ordered")
                if info.file_size != header_len + expect:
                    raise ModuleFormatError(
                        f"{self.path}: {what} ({name}) holds {info.file_size - header_len} "
                        f"bytes of data, its header and the manifest say {expect}")
                out = np.empty(shape, stored)
                flat = memoryview(out.reshape(-1).view(np.uint8))
                sha.update(head)
                got = head[header_len:]
                flat[:len(got)] = got
                at = len(got)
                while at < expect:
                    chunk = f.read(min(_CHUNK, expect - at))
                    if not chunk:
                        break
                    flat[at:at + len(chunk)] = chunk
                    sha.update(chunk)
                    at += len(chunk)
                if at != expect or f.read(1):
                    raise ModuleFormatError(f"{self.path}: {what} ({name}) is not the size "
                                            "its zip entry declares; the file is damaged")
        except ModuleFormatError:
            raise
        except Exception as e:  # noqa: BLE001 - see _damaged
            if not _damaged(e):
                raise
            raise ModuleFormatError(f"{self.path}: {what} ({name}) is damaged "
                                    f"({type(e).__name__}: {e}); export the module again"
                                    ) from None
        if sha.hexdigest() != digest:
            raise self._mismatch(name)
        return out if stored == want else out.view(want)

    def close(self) -> None:
        self._zip.close()

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _npy_header(head: bytes) -> tuple[int, tuple, bool, np.dtype]:
    """``(header length, shape, fortran order, dtype)`` of the ``.npy`` data that starts
    with ``head``; ValueError for anything that is not a plain (non-object) ``.npy``."""
    f = io.BytesIO(head)
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(
            f, max_header_size=MAX_NPY_HEADER)
    elif version in ((2, 0), (3, 0)):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(
            f, max_header_size=MAX_NPY_HEADER)
    else:
        raise ValueError(f".npy version {version} is not supported")
    if dtype.hasobject or dtype.kind not in "biufc":
        raise ValueError(f"a .npy of dtype {dtype} is not plain data")
    return f.tell(), tuple(shape), bool(fortran), dtype

