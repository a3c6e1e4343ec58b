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
import os
import zipfile

import numpy as np

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
    arr = np.ascontiguousarray(value.numpy() if hasattr(value, "numpy") else np.asarray(value))
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
    path = os.fspath(path)
    tmp = path + ".tmp"
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            zf.writestr(MANIFEST, json.dumps(manifest, indent=1))
            for name, data in files.items():
                zf.writestr(name, data)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


class Archive:
    """An exported module file opened for reading: the checked manifest and its members."""

    def __init__(self, path):
        self.path = os.fspath(path)
        try:
            self._zip = zipfile.ZipFile(self.path)
        except FileNotFoundError:
            raise
        except (zipfile.BadZipFile, OSError) as e:
            raise ModuleFormatError(f"{self.path} is not an exported ptxforge module ({e}); "
                                    "write one with module.export_library(path)") from None
        try:
            self.manifest = self._read_manifest()
        except BaseException:
            self._zip.close()
            raise

    def _read_manifest(self) -> dict:
        try:
            manifest = json.loads(self._zip.read(MANIFEST).decode("utf-8"))
        except (KeyError, UnicodeDecodeError, ValueError, zipfile.BadZipFile, OSError,
                EOFError) as e:
            raise ModuleFormatError(f"{self.path}: no readable {MANIFEST} ({e}); the file is "
                                    "not an exported ptxforge module or is damaged") from None
        fmt = manifest.get("format") if isinstance(manifest, dict) else None
        if fmt != FORMAT:
            raise ModuleFormatError(f"{self.path}: not an exported ptxforge module (format "
                                    f"{fmt!r})")
        version = manifest.get("version")
        if version != VERSION:
            newer = isinstance(version, int) and version > VERSION
            raise ModuleFormatError(
                f"{self.path}: format version {version!r}; this ptxforge reads version "
                f"{VERSION}: " + ("upgrade ptxforge to load it" if newer else "export it again"))
        if not isinstance(manifest.get("sha256"), dict):
            raise self.malformed("no member digests")
        return manifest

    def malformed(self, what: str) -> ModuleFormatError:
        """The error for a manifest that lacks an entry or has one of the wrong shape."""
        return ModuleFormatError(f"{self.path}: the manifest is malformed ({what}); export the "
                                 "module again")

    def member(self, name: str) -> bytes:
        """Member ``name``, checked against its digest in the manifest."""
        digest = self.manifest["sha256"].get(name) if isinstance(name, str) else None
        if digest is None:
            raise self.malformed(f"it refers to {name!r}, which it lists no digest for")
        try:
            data = self._zip.read(name)
        except (KeyError, zipfile.BadZipFile, OSError, EOFError) as e:
            raise ModuleFormatError(f"{self.path}: {name} is missing or damaged ({e}); export "
                                    "the module again") from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise ModuleFormatError(f"{self.path}: {name} does not match its digest in the "
                                    "manifest (the file was changed or damaged)")
        return data

    def text(self, name: str) -> str:
        try:
            return self.member(name).decode("utf-8")
        except UnicodeDecodeError as e:
            raise ModuleFormatError(f"{self.path}: {name} is not UTF-8 text ({e})") from None

    def array(self, entry: dict, what: str) -> np.ndarray:
        """The array of an :func:`array_member` entry, of the dtype and shape it states."""
        try:
            name, dtype, shape = entry["member"], entry["dtype"], tuple(entry["shape"])
            want = dt.to_numpy(dtype)
        except (KeyError, TypeError, ValueError) as e:
            raise self.malformed(f"{what}: {type(e).__name__}: {e}") from None
        try:
            arr = np.load(io.BytesIO(self.member(name)), allow_pickle=False)
        except ValueError as e:
            raise ModuleFormatError(f"{self.path}: {what} ({name}) is not a plain .npy array: "
                                    f"{e}") from None
        if arr.dtype != want:
            if want.kind in "biufc" or arr.dtype != np.dtype(f"u{want.itemsize}"):
                raise ModuleFormatError(f"{self.path}: {what} holds {arr.dtype}, the manifest "
                                        f"says {dtype}")
            arr = arr.view(want)
        if arr.shape != shape:
            raise ModuleFormatError(f"{self.path}: {what} has shape {list(arr.shape)}, the "
                                    f"manifest says {list(shape)}")
        return arr

    def close(self) -> None:
        self._zip.close()

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
