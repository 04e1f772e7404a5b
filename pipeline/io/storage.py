"""One storage layer for everything the driver reads or writes itself.

Spark's writers put the datasets wherever the cluster's Hadoop configuration points
(``hdfs://``, ``s3a://``, ``gs://``, ``abfs://``, ``viewfs://``, ``file://``). The driver also
writes files of its own: the model, solver checkpoints, λ-path and baseline models, the
search index, word vectors, reports, run logs. They go through this module, so they land
where the datasets do:

- :func:`storage_for` picks the :class:`Storage` of a path: a local path (or ``file:``) gets
  :class:`~pipeline.io.publish.LocalFS` (POSIX calls); any other URI, inside a Spark job, gets
  :class:`~pipeline.io.hadoop.HadoopFS`, the session's own Hadoop FileSystem (whatever store
  the cluster is configured for works, with the same credentials as Spark's writers);
  outside Spark (the model API, the search service) :class:`ArrowFS` (``pyarrow.fs``:
  ``s3://``, ``gs://``, ``hdfs://``).
- Writers keep writing local files with numpy, pyarrow, faiss or matplotlib:
  :func:`staged_directory` hands them a local directory and, when their block ends,
  publishes it to the target in one commit (:func:`publish_directory`).
- Readers call :func:`local_directory`: a local directory is read in place; a remote one is
  copied once into a local cache (``$CR5_CACHE_DIR``, default ``<tmp>/cr5-cache``), keyed by
  the content of its identity file (``model.json``, the index's ``_manifest.json``) and
  checked against the sizes and SHA-256 that file lists, then read from there.

**Commits, per store.** Where a directory rename is atomic (POSIX disks, HDFS, ``viewfs``
onto either: :attr:`Storage.atomic_rename`), a directory is uploaded beside its target as
``.<name>.tmp-<token>`` and renamed into place, the previous version moved aside first and
deleted after; a reader sees the old version or the new one (or, for the instant between
the two renames, none, which it reports as missing and never as damaged). On object stores
a rename is a copy, so a directory is committed with a marker instead: the new version is
uploaded whole to ``<target>/v-<time>-<token>/``, then ``<target>/_COMMITTED.json`` (one
object, written last, atomic on every object store) names it; readers follow the marker
(:func:`resolve_directory`), so they never see a half-written model or index. The
version before is kept (a reader that just resolved it can finish); older ones are removed.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from pipeline.io.publish import (
    FileOps,
    LocalFS,
    WriteLock,
    lock_defaults,
    recover,
    swap_in,
    write_lock,
)

__all__ = [
    "COMMIT_MARKER",
    "ArrowFS",
    "Storage",
    "cache_root",
    "is_local",
    "join",
    "local_directory",
    "local_path",
    "locate",
    "publish_directory",
    "remote_storage",
    "resolve_directory",
    "staged_directory",
    "storage_for",
    "write_file",
]

log = logging.getLogger(__name__)

COMMIT_MARKER = "_COMMITTED.json"
_URI = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


class Storage(FileOps, Protocol):
    """What the driver needs of a store: :class:`~pipeline.io.publish.FileOps` (the commit
    protocol's operations) plus whole-file reads and writes and copies to and from local
    files. Paths are strings in the store's own syntax."""

    atomic_rename: bool

    def read_bytes(self, p: str) -> bytes: ...
    def replace_bytes(self, p: str, data: bytes) -> None: ...
    def put(self, local: str, p: str) -> None: ...
    def get(self, p: str, local: str) -> None: ...
    def describe(self, p: str) -> str: ...


# --------------------------------------------------------------------------- paths


def is_local(path: str | os.PathLike) -> bool:
    """True for a local path (``/x``, ``./x``, ``file:/x``, ``file:///x``)."""
    m = _URI.match(os.fspath(path))
    return m is None or m.group(1).lower() == "file"


def local_path(path: str | os.PathLike) -> str:
    """A local path without its ``file:`` prefix (``file:///x`` -> ``/x``)."""
    text = os.fspath(path)
    return re.sub(r"^file:(//)?", "", text) if text.startswith("file:") else text


def join(base: str, *names: str) -> str:
    """``base/name/...`` for local paths and URIs alike (never ``os.path`` on a URI)."""
    return "/".join([os.fspath(base).rstrip("/"), *names])


def _split(path: str) -> tuple[str, str]:
    parent, _, name = path.rstrip("/").rpartition("/")
    return parent or ".", name


# --------------------------------------------------------------------------- stores


def _active_spark() -> Any | None:
    """The classic SparkSession of this process, if one runs (none on Spark Connect)."""
    try:
        from pyspark import SparkContext
        from pyspark.sql import SparkSession
    except ImportError:  # pragma: no cover - pyspark is a dependency
        return None
    if SparkContext._active_spark_context is None:
        return None
    return SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()


def storage_for(path: str | os.PathLike, spark: Any | None = None) -> Storage:
    """The :class:`Storage` of ``path``: local disk, the Spark session's Hadoop FileSystem
    (``spark`` or the active session), else ``pyarrow.fs``."""
    path = os.fspath(path)
    if is_local(path):
        return LocalFS()
    spark = spark if spark is not None else _active_spark()
    # A Spark Connect session has no JVM here (and no Hadoop FileSystem to call).
    if spark is not None and not type(spark).__module__.startswith("pyspark.sql.connect"):
        from pipeline.io.hadoop import HadoopFS

        return HadoopFS(spark, path)
    return ArrowFS(path)


def locate(path: str | os.PathLike, spark: Any | None = None) -> tuple[Storage, str]:
    """``(storage, path in that storage's syntax)``: a local path loses its ``file:``."""
    text = os.fspath(path)
    storage = storage_for(text, spark)
    return storage, local_path(text) if isinstance(storage, LocalFS) else text


def remote_storage(path: str | os.PathLike, spark: Any | None = None) -> Storage | None:
    """The :class:`Storage` of ``path`` when it is not a local path, else None (for code
    that keeps its fast local file I/O and takes a store only for URIs)."""
    return None if is_local(path) else storage_for(path, spark)


class ArrowFS:
    """:class:`Storage` through ``pyarrow.fs`` (S3, GCS, HDFS over libhdfs), for readers and
    writers outside a Spark job. A URI only Hadoop resolves (``viewfs://``, ``s3a://``,
    ``abfs://``) needs a Spark session: the error says so."""

    def __init__(self, path: str) -> None:
        import pyarrow.fs as pafs

        scheme = _URI.match(path).group(1).lower()  # type: ignore[union-attr]
        try:
            self.fs, _ = pafs.FileSystem.from_uri(path)
        except (OSError, ValueError, NotImplementedError) as exc:
            from pipeline.errors import ConfigError

            raise ConfigError(
                f"cannot open {path} outside Spark: pyarrow does not reach {scheme}:// here "
                f"({exc}). Fix: read it inside a Spark job (a session whose Hadoop "
                "configuration resolves it), or copy it to a local directory first."
            ) from None
        self.atomic_rename = scheme in ("hdfs",)
        self._scheme = scheme

    def _p(self, p: str) -> str:
        return self.fs.normalize_path(re.sub(r"^[A-Za-z][A-Za-z0-9+.-]*://", "", p))

    def _info(self, p: str) -> Any:
        return self.fs.get_file_info(self._p(p))

    def exists(self, p: str) -> bool:
        import pyarrow.fs as pafs

        return self._info(p).type != pafs.FileType.NotFound

    def rename(self, src: str, dst: str) -> None:
        if self.exists(dst):
            raise FileExistsError(f"could not rename {src} to {dst}: the target exists")
        self.fs.move(self._p(src), self._p(dst))

    def delete(self, p: str) -> None:
        import pyarrow.fs as pafs

        info = self._info(p)
        if info.type == pafs.FileType.Directory:
            self.fs.delete_dir(self._p(p))
        elif info.type == pafs.FileType.File:
            self.fs.delete_file(self._p(p))

    def mkdirs(self, p: str) -> None:
        self.fs.create_dir(self._p(p), recursive=True)

    def list_names(self, p: str) -> list[str]:
        import pyarrow.fs as pafs

        if self._info(p).type != pafs.FileType.Directory:
            return []
        return [i.base_name for i in self.fs.get_file_info(pafs.FileSelector(self._p(p)))]

    def read_bytes(self, p: str) -> bytes:
        if not self.exists(p):
            raise FileNotFoundError(p)
        with self.fs.open_input_stream(self._p(p)) as f:
            return f.read()

    def read_text(self, p: str) -> str:
        return self.read_bytes(p).decode("utf-8")

    def write_text(self, p: str, text: str) -> None:
        with self.fs.open_output_stream(self._p(p)) as f:
            f.write(text.encode("utf-8"))

    def replace_bytes(self, p: str, data: bytes) -> None:
        with self.fs.open_output_stream(self._p(p)) as f:  # one object, visible when whole
            f.write(data)

    def create_new(self, p: str, text: str) -> bool:
        if self.exists(p):  # not atomic: object stores have no exclusive create here
            return False
        self.write_text(p, text)
        return True

    def touch(self, p: str) -> None:
        if self.exists(p):
            self.replace_bytes(p, self.read_bytes(p))

    def mtime(self, p: str) -> float | None:
        info = self._info(p)
        return None if info.mtime is None or not self.exists(p) else info.mtime.timestamp()

    def list_files(self, p: str) -> dict[str, int]:
        import pyarrow.fs as pafs

        base = self._p(p).rstrip("/") + "/"
        infos = self.fs.get_file_info(pafs.FileSelector(self._p(p), recursive=True))
        return {
            i.path[len(base) :]: int(i.size)
            for i in infos
            if i.type == pafs.FileType.File and i.path.startswith(base)
        }

    def put(self, local: str, p: str) -> None:
        import pyarrow.fs as pafs

        if self.exists(p):
            raise FileExistsError(f"could not copy {local} to {p}: the target exists")
        target = self._p(p)
        # copy_files creates no directories on every filesystem (the local one): make them
        for root, _, _ in os.walk(local) if os.path.isdir(local) else []:
            rel = os.path.relpath(root, local)
            self.fs.create_dir(target if rel == "." else f"{target}/{rel}", recursive=True)
        if not os.path.isdir(local):
            self.fs.create_dir(target.rpartition("/")[0], recursive=True)
        pafs.copy_files(local, target, destination_filesystem=self.fs)

    def get(self, p: str, local: str) -> None:
        import pyarrow.fs as pafs

        pafs.copy_files(self._p(p), local, source_filesystem=self.fs)

    def describe(self, p: str) -> str:
        return p


# --------------------------------------------------------------------------- writing


def write_file(path: str | os.PathLike, data: bytes | str, *, spark: Any | None = None) -> str:
    """Replace the file ``path`` by ``data`` so a reader sees the old or the new content;
    returns the path as written (qualified for a URI)."""
    storage, where = locate(path, spark)
    parent = _split(where)[0]
    if parent not in ("", "."):
        storage.mkdirs(parent)
    storage.replace_bytes(where, data.encode("utf-8") if isinstance(data, str) else data)
    return storage.describe(where)


def publish_directory(
    storage: Storage,
    local_dir: str | os.PathLike,
    final: str,
    *,
    token: str | None = None,
    in_place: bool = False,
) -> str:
    """Commit the local directory ``local_dir`` as ``final`` on ``storage`` (module docs:
    rename where that is atomic, else a version directory and a marker written last).
    ``in_place``: ``local_dir`` already is ``final``'s sibling ``.<name>.tmp-<token>`` on
    the same local disk (nothing to copy). Returns the directory a reader now resolves
    ``final`` to.

    Hold ``final``'s write lock (:func:`pipeline.io.publish.write_lock`) with ``token`` as
    the owner's, so that a reader or writer that finds a leftover of a killed commit
    (:func:`pipeline.io.publish.recover`) can tell it from a live one.
    """
    token = token or uuid.uuid4().hex[:12]
    local_dir = os.fspath(local_dir)
    if storage.atomic_rename and not storage.exists(join(final, COMMIT_MARKER)):
        parent, name = _split(final)
        tmp, old = f"{parent}/.{name}.tmp-{token}", f"{parent}/.{name}.old-{token}"
        storage.mkdirs(parent)
        upload = None if in_place else (lambda target: storage.put(local_dir, target))
        swap_in(storage, tmp, final, old, prepare=upload)
        return final
    when = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    version = f"v-{when}-{token}"
    previous = _committed_version(storage, final)
    storage.mkdirs(final)
    storage.put(local_dir, join(final, version))
    if in_place:
        shutil.rmtree(local_dir, ignore_errors=True)
    marker = {"version": version, "previous": previous, "committed_utc": when}
    storage.replace_bytes(join(final, COMMIT_MARKER), json.dumps(marker).encode("utf-8"))
    for name in storage.list_names(final):
        if name.startswith("v-") and name not in (version, previous):
            storage.delete(join(final, name))
    return join(final, version)


def _committed_version(storage: Storage, directory: str) -> str | None:
    marker = join(directory, COMMIT_MARKER)
    if not storage.exists(marker):
        return None
    try:
        return str(json.loads(storage.read_text(marker))["version"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise OSError(f"{marker} is unreadable ({exc}): delete it and publish again") from exc


def resolve_directory(storage: Storage, directory: str) -> str:
    """The directory that holds ``directory``'s committed content: itself, or the version
    its commit marker names (object stores)."""
    version = _committed_version(storage, directory)
    return directory if version is None else join(directory, version)


def scratch_root() -> str:
    """Where the driver stages what it publishes to a remote store: ``$CR5_SCRATCH_DIR``,
    else the system's temporary directory (never the working directory)."""
    return os.environ.get("CR5_SCRATCH_DIR") or tempfile.gettempdir()


@contextlib.contextmanager
def staged_directory(
    final: str | os.PathLike, *, spark: Any | None = None, lock: WriteLock | None = None
) -> Iterator[Path]:
    """Yield a new, empty local directory; publish it as ``final`` when the block ends.

    The block runs under ``final``'s write lock (``lock``, or one taken here with the
    ``paths.*`` defaults), so a second writer waits and leftovers of a killed writer are
    recovered first (:func:`pipeline.io.publish.write_lock`). For a local ``final`` the
    directory is the hidden sibling ``.<name>.tmp-<token>``, renamed into place (the previous
    version renamed aside first and removed after): no copy. For a URI it is a scratch
    directory (:func:`scratch_root`), uploaded and committed by :func:`publish_directory`.
    When the block raises, nothing is published and ``final`` is unchanged.
    """
    storage, where = locate(final, spark)
    if lock is None:
        wait, stale = lock_defaults()
        with (
            write_lock(storage, where, wait_seconds=wait, stale_seconds=stale) as held,
            staged_directory(final, spark=spark, lock=held) as tmp,
        ):
            yield tmp
        return
    token = lock.owner.token
    in_place = isinstance(storage, LocalFS) and not storage.exists(join(where, COMMIT_MARKER))
    if in_place:
        tmp = Path(lock.tmp_path)
        tmp.mkdir(parents=True)
        try:
            yield tmp
            lock.verify()
            publish_directory(storage, tmp, where, token=token, in_place=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return
    with _scratch(token) as tmp:
        yield tmp
        lock.verify()
        publish_directory(storage, tmp, where, token=token)


@contextlib.contextmanager
def _scratch(token: str) -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix=f"cr5-stage-{token}-", dir=scratch_root()))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


# --------------------------------------------------------------------------- reading


def cache_root() -> Path:
    """The local cache of remote directories: ``$CR5_CACHE_DIR``, else ``<tmp>/cr5-cache``.
    Entries are named by content; any of them may be deleted when no reader uses it."""
    return Path(os.environ.get("CR5_CACHE_DIR") or Path(tempfile.gettempdir()) / "cr5-cache")


def local_directory(path: str | os.PathLike, identity: str, *, spark: Any | None = None) -> Path:
    """A local directory with the committed content of the directory ``path``.

    A local ``path`` is returned as it is (or the version its commit marker names). A remote
    one is copied once into :func:`cache_root`, in an entry named by the SHA-256 of its
    ``identity`` file (``model.json``, ``_manifest.json``: they list every file, so equal
    identity files mean equal directories). Every file the identity file lists with a size or
    a SHA-256 is checked against it after the copy; an entry is complete only once checked.

    Raises
    ------
    FileNotFoundError
        When ``path`` (or its identity file) does not exist.
    OSError
        When a copied file does not match the identity file (the directory changed while
        it was copied, or the store returned damaged data).
    """
    storage, top = locate(path, spark)
    where = _recovered(storage, top, identity)
    if isinstance(storage, LocalFS):
        return Path(where)
    ident_path = join(where, identity)
    if not storage.exists(ident_path):
        raise FileNotFoundError(f"{storage.describe(where)}: no {identity}")
    ident = storage.read_bytes(ident_path)
    key = hashlib.sha256(storage.describe(where).encode() + b"\0" + ident).hexdigest()[:24]
    entry = cache_root() / key
    if (entry / ".complete").exists():
        return entry
    cache_root().mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}.tmp-", dir=cache_root()))
    try:
        expected = _listed_files(ident)
        names = expected if expected else storage.list_files(where)
        for rel in sorted(set(names) | {identity}):
            target = tmp / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            if rel == identity:
                target.write_bytes(ident)
            else:
                storage.get(join(where, rel), str(target))
        _check_copy(tmp, expected, storage.describe(where))
        (tmp / ".complete").write_text(storage.describe(where), encoding="utf-8")
        try:
            os.rename(tmp, entry)
        except OSError:  # another reader filled the same entry first: use it
            if not (entry / ".complete").exists():
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("copied %s into the local cache %s", storage.describe(where), entry)
    return entry


def _recovered(storage: Storage, directory: str, identity: str) -> str:
    """:func:`resolve_directory`, after putting back a version that a writer killed between
    its two renames left aside (``.<name>.old-<token>``, its owner gone:
    :func:`pipeline.io.publish.recover`)."""
    where = resolve_directory(storage, directory)
    if not storage.exists(join(where, identity)) and not storage.exists(directory):
        recover(storage, directory, stale_seconds=lock_defaults()[1])
        where = resolve_directory(storage, directory)
    return where


def _listed_files(ident: bytes) -> dict[str, dict[str, Any]]:
    """``{relative path: {"bytes": n, "sha256": h}}`` of the files an identity file lists
    (``model.json``'s ``files`` entries, or ``_manifest.json``'s ``{path: size}``)."""
    try:
        files = json.loads(ident).get("files") or {}
    except (ValueError, AttributeError):
        return {}
    out: dict[str, dict[str, Any]] = {}
    for rel, info in files.items():
        out[rel] = dict(info) if isinstance(info, dict) else {"bytes": int(info)}
    return out


def _check_copy(directory: Path, expected: dict[str, dict[str, Any]], source: str) -> None:
    for rel, info in expected.items():
        f = directory / rel
        size = f.stat().st_size
        if "bytes" in info and size != int(info["bytes"]):
            raise OSError(
                f"{source}/{rel}: copied {size} bytes, its identity file lists {info['bytes']}; "
                "the directory changed while it was read or the store returned damaged data. "
                "Retry; if it persists, rebuild it."
            )
        if "sha256" in info:
            h = hashlib.sha256()
            with f.open("rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
            if h.hexdigest() != info["sha256"]:
                raise OSError(
                    f"{source}/{rel}: its SHA-256 differs from the one its identity file "
                    "lists; the store returned damaged data. Retry; if it persists, rebuild it."
                )
