"""Writer ownership, the per-dataset write lock, recovery and the final rename.

This is the commit protocol behind :func:`pipeline.io.datasets.write_dataset`. It
needs only a handful of file operations (:class:`FileOps`): :class:`LocalFS`
implements them with ``os`` calls (atomic exclusive create by ``link(2)``, atomic
``rename(2)``) for local disks, :class:`~pipeline.io.hadoop.HadoopFS` through
Hadoop's FileSystem for HDFS and other stores. It imports no Spark, so tests drive it
from small processes.

For a dataset ``<parent>/<name>``, a writer with the random token ``T``:

1. **owns** ``.<name>.owner-T``: a JSON owner record (token, host, pid, the process's
   start time as the kernel reports it, UTC start), created atomically before anything
   else and touched every few seconds while the writer lives (a heartbeat);
2. **locks** the dataset: ``.<name>.lock``, created atomically (exclusive create) with
   the same record. A second writer finds it and waits up to ``wait_seconds``
   (``paths.write_lock_wait_seconds``) for it to go, then fails with
   :class:`~pipeline.errors.ConcurrentWriteError` naming the holder. A lock whose holder
   is gone (same host and its pid dead or reused) or whose heartbeat is older than
   ``stale_seconds`` (``paths.stale_write_seconds``) is broken, with a warning;
3. **recovers** leftovers of earlier writers (:func:`recover`): a temporary
   ``.<name>.tmp-U`` or a previous version ``.<name>.old-U`` is touched only when its
   owner ``U`` is gone by the same rule, never a live writer's;
4. writes into ``.<name>.tmp-T`` (the caller's ``write``), which ends with the
   manifest: ``rows`` counted from the written files, and ``files``, their names and
   sizes;
5. **checks, then renames**: the lock must still be its own, the temporary's files
   must be exactly those the manifest lists and its manifest must carry
   ``write_token`` T; then ``<name>`` -> ``.<name>.old-T``, ``.<name>.tmp-T`` ->
   ``<name>`` (refusing to move into an existing directory), the old version deleted.

Any failure deletes the temporary and puts a moved-away previous version back; the
owner record and the lock are removed last. A process killed outright leaves its
owner record; the next writer or reader sees that its pid is dead and cleans up.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from pipeline.errors import ConcurrentWriteError

log = logging.getLogger(__name__)

MANIFEST = "_manifest.json"
_POLL_SECONDS = 0.2


class FileOps(Protocol):
    """The file operations the commit protocol needs (paths are strings)."""

    def exists(self, p: str) -> bool: ...
    def rename(self, src: str, dst: str) -> None: ...
    def delete(self, p: str) -> None: ...
    def mkdirs(self, p: str) -> None: ...
    def list_names(self, p: str) -> list[str]: ...
    def write_text(self, p: str, text: str) -> None: ...
    def read_text(self, p: str) -> str: ...
    def create_new(self, p: str, text: str) -> bool: ...
    def touch(self, p: str) -> None: ...
    def mtime(self, p: str) -> float | None: ...
    def list_files(self, p: str) -> dict[str, int]: ...


class LocalFS:
    """:class:`FileOps` (and :class:`pipeline.io.storage.Storage`) on a local disk, with
    POSIX atomicity."""

    #: ``rename(2)`` of a directory is atomic (see :mod:`pipeline.io.storage`).
    atomic_rename = True

    def exists(self, p: str) -> bool:
        return os.path.lexists(p)

    def rename(self, src: str, dst: str) -> None:
        """Atomic rename that never replaces or moves into an existing ``dst``."""
        if os.path.lexists(dst):
            raise FileExistsError(f"could not rename {src} to {dst}: the target exists")
        os.rename(src, dst)

    def delete(self, p: str) -> None:
        import shutil

        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p)

    def mkdirs(self, p: str) -> None:
        os.makedirs(p, exist_ok=True)

    def list_names(self, p: str) -> list[str]:
        try:
            return os.listdir(p)
        except (FileNotFoundError, NotADirectoryError):
            return []

    def write_text(self, p: str, text: str) -> None:
        with open(p, "w", encoding="utf-8") as f:
            f.write(text)

    def read_text(self, p: str) -> str:
        with open(p, encoding="utf-8") as f:
            return f.read()

    def create_new(self, p: str, text: str) -> bool:
        """Create ``p`` holding ``text`` unless it exists; atomic, content included."""
        staged = f"{p}.new-{uuid.uuid4().hex[:8]}"
        with open(staged, "w", encoding="utf-8") as f:
            f.write(text)
        try:
            os.link(staged, p)  # fails if p exists; p appears with its content
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(staged)

    def touch(self, p: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.utime(p)

    def mtime(self, p: str) -> float | None:
        try:
            return os.stat(p).st_mtime
        except FileNotFoundError:
            return None

    def list_files(self, p: str) -> dict[str, int]:
        out = {}
        for root, _, files in os.walk(p):
            for name in files:
                full = os.path.join(root, name)
                out[os.path.relpath(full, p)] = os.stat(full).st_size
        return out

    # -- the rest of pipeline.io.storage.Storage
    def read_bytes(self, p: str) -> bytes:
        with open(p, "rb") as f:
            return f.read()

    def replace_bytes(self, p: str, data: bytes) -> None:
        """Write ``p`` so that a reader sees the previous content or ``data`` (rename)."""
        os.makedirs(os.path.dirname(os.path.abspath(p)), exist_ok=True)
        staged = f"{p}.new-{uuid.uuid4().hex[:8]}"
        try:
            with open(staged, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(staged, p)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(staged)
            raise

    def put(self, local: str, p: str) -> None:
        """Copy the local file or directory ``local`` to ``p`` (which must not exist)."""
        import shutil

        if self.exists(p):
            raise FileExistsError(f"could not copy {local} to {p}: the target exists")
        os.makedirs(os.path.dirname(os.path.abspath(p)), exist_ok=True)
        if os.path.isdir(local):
            shutil.copytree(local, p)
        else:
            shutil.copyfile(local, p)

    def get(self, p: str, local: str) -> None:
        """Copy the file ``p`` to the local path ``local``."""
        import shutil

        shutil.copyfile(p, local)

    def describe(self, p: str) -> str:
        return p


def lock_defaults() -> tuple[float, float]:
    """``paths.write_lock_wait_seconds`` and ``paths.stale_write_seconds`` defaults (for
    writers that are handed no configuration)."""
    from pipeline.config import PathsConfig

    return PathsConfig.write_lock_wait_seconds, PathsConfig.stale_write_seconds


# --------------------------------------------------------------------------- owners


def _proc_start(pid: int) -> str | None:
    """The kernel's start time of process ``pid`` (clock ticks since boot), if known."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
        return stat.rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


@dataclasses.dataclass(frozen=True)
class Owner:
    """Who writes: the owner record of a temporary directory and of the lock."""

    token: str
    host: str
    pid: int
    pid_start: str | None
    started_utc: str

    @classmethod
    def current(cls) -> Owner:
        pid = os.getpid()
        return cls(
            token=uuid.uuid4().hex[:12],
            host=socket.gethostname(),
            pid=pid,
            pid_start=_proc_start(pid),
            started_utc=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        )

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Owner | None:
        try:
            d = json.loads(text)
            return cls(
                token=str(d["token"]),
                host=str(d["host"]),
                pid=int(d["pid"]),
                pid_start=d.get("pid_start"),
                started_utc=str(d.get("started_utc", "?")),
            )
        except (ValueError, KeyError, TypeError):
            return None

    def describe(self) -> str:
        return f"pid {self.pid} on host {self.host}, started {self.started_utc}"

    def alive_here(self) -> bool | None:
        """True/False when this host can tell (same host), None otherwise."""
        if self.host != socket.gethostname():
            return None
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass  # exists, another user's
        if self.pid_start is not None:
            now = _proc_start(self.pid)
            if now is not None and now != self.pid_start:
                return False  # the pid was reused by another process
        return True


def _names(name: str) -> dict[str, str]:
    return {
        "tmp": f".{name}.tmp-",
        "old": f".{name}.old-",
        "owner": f".{name}.owner-",
        "lock": f".{name}.lock",
    }


def _split(path: str) -> tuple[str, str]:
    path = path.rstrip("/")
    parent, _, name = path.rpartition("/")
    return (parent or "."), name


def owner_gone(
    fs: FileOps, record_path: str, *, stale_seconds: float, now: float | None = None
) -> tuple[bool, Owner | None]:
    """Whether the writer of the owner record (or lock) at ``record_path`` is gone.

    Gone: no record; or on this host, its pid is dead or reused; or its heartbeat (the
    record's modification time) is older than ``stale_seconds``. A record that cannot
    be parsed yet (being created on a store without atomic create) counts as alive
    until it is stale.
    """
    mtime = fs.mtime(record_path)
    if mtime is None:
        return True, None
    try:
        owner = Owner.from_json(fs.read_text(record_path))
    except OSError:
        owner = None
    now = time.time() if now is None else now
    if now - mtime > stale_seconds:
        return True, owner
    if owner is None:
        return False, None
    return owner.alive_here() is False, owner


def recover(fs: FileOps, path: str, *, stale_seconds: float) -> None:
    """Restore a version stranded by a dead writer mid-commit; drop dead writers' leftovers.

    Only entries whose owner is gone (:func:`owner_gone`) are touched; entries with no
    owner record at all (left by a writer killed between its last two deletions, or by
    one that kept no owner records) count as ownerless, hence gone.
    """
    parent, name = _split(path)
    pre = _names(name)
    siblings = fs.list_names(parent)

    def gone(token: str) -> bool:
        return owner_gone(fs, f"{parent}/{pre['owner']}{token}", stale_seconds=stale_seconds)[0]

    olds = sorted(
        (s for s in siblings if s.startswith(pre["old"]) and gone(s[len(pre["old"]) :])),
        key=lambda s: fs.mtime(f"{parent}/{s}") or 0.0,
    )
    if olds and not fs.exists(path):
        log.warning("restoring %s from %s left by an interrupted commit", path, olds[-1])
        try:
            fs.rename(f"{parent}/{olds[-1]}", path)
        except OSError:
            log.info("%s reappeared while restoring it; keeping it", path)
        else:
            olds = olds[:-1]
    tmps = [s for s in siblings if s.startswith(pre["tmp"]) and gone(s[len(pre["tmp"]) :])]
    for stale in olds + tmps:
        log.info("removing leftover %s/%s of a writer that is gone", parent, stale)
        fs.delete(f"{parent}/{stale}")
    live = {s[len(pre["tmp"]) :] for s in siblings if s.startswith(pre["tmp"])} - {
        s[len(pre["tmp"]) :] for s in tmps
    }
    live |= {s[len(pre["old"]) :] for s in siblings if s.startswith(pre["old"])} - {
        s[len(pre["old"]) :] for s in olds
    }
    for s in siblings:
        if s.startswith(pre["owner"]):
            token = s[len(pre["owner"]) :]
            if token not in live and gone(token):
                fs.delete(f"{parent}/{s}")


# --------------------------------------------------------------------------- the lock


class WriteLock:
    """The exclusive write lock of one dataset, held by one :class:`Owner` (module docs).

    Use as a context manager; ``verify()`` checks it is still held before publishing.
    """

    def __init__(
        self,
        fs: FileOps,
        path: str,
        *,
        wait_seconds: float,
        stale_seconds: float,
        dataset: str = "",
    ) -> None:
        self.fs, self.path = fs, path.rstrip("/")
        self.parent, self.name = _split(self.path)
        pre = _names(self.name)
        self.lock_path = f"{self.parent}/{pre['lock']}"
        self.owner = Owner.current()
        self.owner_path = f"{self.parent}/{pre['owner']}{self.owner.token}"
        self.tmp_path = f"{self.parent}/{pre['tmp']}{self.owner.token}"
        self.old_path = f"{self.parent}/{pre['old']}{self.owner.token}"
        self.wait_seconds, self.stale_seconds = wait_seconds, stale_seconds
        self.dataset = dataset or self.name
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        self.held = False

    # -- acquisition
    def __enter__(self) -> WriteLock:
        self.fs.mkdirs(self.parent)
        if not self.fs.create_new(self.owner_path, self.owner.to_json()):
            raise OSError(f"owner record {self.owner_path} already exists")  # token clash
        try:
            self._acquire()
        except BaseException:
            self.fs.delete(self.owner_path)
            raise
        self._start_heartbeat()
        return self

    def _acquire(self) -> None:
        deadline = time.monotonic() + self.wait_seconds
        announced = False
        while True:
            if self.fs.create_new(self.lock_path, self.owner.to_json()):
                self.held = True
                return
            gone, holder = owner_gone(self.fs, self.lock_path, stale_seconds=self.stale_seconds)
            if gone:
                self._break(holder)
                continue
            if time.monotonic() >= deadline:
                who = holder.describe() if holder else "a writer whose record is unreadable"
                raise ConcurrentWriteError(
                    f"dataset {self.dataset!r} at {self.path} is being written by another run "
                    f"({who}); waited {self.wait_seconds:g} s "
                    "(paths.write_lock_wait_seconds). Fix: let that run finish and run this "
                    "stage again, or raise paths.write_lock_wait_seconds to wait longer. If "
                    f"that run is gone on another machine, its lock {self.lock_path} is "
                    "ignored once its heartbeat is older than paths.stale_write_seconds "
                    f"({self.stale_seconds:g} s), or delete it."
                )
            if not announced:
                log.warning(
                    "dataset %s at %s is being written by %s: waiting up to %g s for it",
                    self.dataset,
                    self.path,
                    holder.describe() if holder else "another writer",
                    self.wait_seconds,
                )
                announced = True
            time.sleep(_POLL_SECONDS)

    def _break(self, holder: Owner | None) -> None:
        """Remove an abandoned lock, without ever removing a live one by mistake."""
        aside = f"{self.lock_path}.broken-{self.owner.token}"
        try:
            self.fs.rename(self.lock_path, aside)
        except OSError:
            return  # someone else broke or released it first
        try:
            moved = Owner.from_json(self.fs.read_text(aside))
        except OSError:
            moved = None
        if holder is not None and moved is not None and moved.token != holder.token:
            # A live writer took the lock between our look and our rename: give it back.
            try:
                self.fs.rename(aside, self.lock_path)
            except OSError:
                log.warning("could not hand back the write lock of %s", moved.describe())
            else:
                return
        log.warning(
            "breaking the write lock of %s at %s: its writer (%s) is gone",
            self.dataset,
            self.path,
            holder.describe() if holder else "unknown",
        )
        self.fs.delete(aside)

    # -- heartbeat
    def _start_heartbeat(self) -> None:
        period = max(0.5, min(30.0, self.stale_seconds / 4))

        def beat() -> None:
            while not self._stop.wait(period):
                try:
                    self.fs.touch(self.lock_path)
                    self.fs.touch(self.owner_path)
                except Exception:  # a failed heartbeat must not kill the write
                    log.debug("heartbeat failed", exc_info=True)

        self._beat = threading.Thread(target=beat, name=f"cr5-lock-{self.name}", daemon=True)
        self._beat.start()

    def verify(self) -> None:
        """Raise :class:`ConcurrentWriteError` unless the lock is still this writer's."""
        try:
            holder = Owner.from_json(self.fs.read_text(self.lock_path))
        except OSError:
            holder = None
        if holder is None or holder.token != self.owner.token:
            raise ConcurrentWriteError(
                f"dataset {self.dataset!r} at {self.path}: this run's write lock was taken "
                f"over ({holder.describe() if holder else 'the lock is gone'}), probably "
                "because its heartbeat was older than paths.stale_write_seconds "
                f"({self.stale_seconds:g} s). Nothing was published by this run. Fix: make "
                "sure only one run writes this dataset, or raise paths.stale_write_seconds."
            )

    # -- release
    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._beat is not None:
            self._beat.join(timeout=5)
        with contextlib.suppress(OSError):
            if self.held:
                holder = Owner.from_json(self.fs.read_text(self.lock_path))
                if holder is not None and holder.token == self.owner.token:
                    self.fs.delete(self.lock_path)
        self.held = False
        self.fs.delete(self.owner_path)


@contextlib.contextmanager
def write_lock(
    fs: FileOps, path: str, *, wait_seconds: float, stale_seconds: float, dataset: str = ""
) -> Iterator[WriteLock]:
    """Hold the write lock of ``path`` and clear dead writers' leftovers (steps 1-3)."""
    with WriteLock(
        fs, path, wait_seconds=wait_seconds, stale_seconds=stale_seconds, dataset=dataset
    ) as lock:
        recover(fs, path, stale_seconds=stale_seconds)
        yield lock


# --------------------------------------------------------------------------- publishing


def publish(
    fs: FileOps,
    lock: WriteLock,
    write: Callable[[str], Mapping[str, Any] | None],
    *,
    manifest_name: str = MANIFEST,
) -> None:
    """Steps 4-5: ``write(tmp)`` then the checked rename of ``tmp`` to the dataset.

    ``write`` writes the data and, last, the manifest into ``tmp``, and returns that
    manifest, which must carry ``write_token`` (``lock.owner.token``), ``rows`` and
    ``files`` (:func:`data_files` of ``tmp`` when the rows were counted); ``None`` for a
    directory whose integrity is its own (a Delta table: the log lists the files).
    """
    if not lock.held:
        raise RuntimeError("publish() needs the dataset's write lock")  # programming error

    def write_and_check(tmp: str) -> None:
        manifest = write(tmp)
        lock.verify()
        if manifest is not None:
            check_published(fs, tmp, manifest, lock.owner.token, manifest_name)

    swap_in(fs, lock.tmp_path, lock.path, lock.old_path, prepare=write_and_check)


def swap_in(
    fs: FileOps,
    tmp: str,
    path: str,
    old: str,
    *,
    prepare: Callable[[str], None] | None = None,
) -> None:
    """``prepare(tmp)`` (fill it), then put ``tmp`` in ``path``'s place: ``path`` renamed
    aside to ``old``, ``tmp`` renamed to ``path``, ``old`` deleted. On any failure ``tmp``
    is deleted and a version moved aside is put back, and the failure is raised (a failure
    of that cleanup is not: the first one says what went wrong)."""
    moved = False
    try:
        if prepare is not None:
            prepare(tmp)
        if fs.exists(path):
            fs.rename(path, old)
            moved = True
        fs.rename(tmp, path)
        moved = False
    except BaseException:
        # Leave nothing half-written behind; put the published version back.
        with contextlib.suppress(Exception):
            if fs.exists(tmp):
                fs.delete(tmp)
            if moved and not fs.exists(path):
                fs.rename(old, path)
        raise
    if fs.exists(old):
        fs.delete(old)


def data_files(fs: FileOps, directory: str, manifest_name: str = MANIFEST) -> dict[str, int]:
    """``{relative path: size}`` of every file under ``directory`` but the manifest."""
    return {k: v for k, v in fs.list_files(directory).items() if k != manifest_name}


def check_published(
    fs: FileOps,
    tmp: str,
    manifest: Mapping[str, Any],
    token: str,
    manifest_name: str = MANIFEST,
) -> None:
    """Raise unless ``tmp`` holds this writer's manifest and exactly the files it lists."""
    try:
        on_disk = json.loads(fs.read_text(f"{tmp}/{manifest_name}"))
    except (OSError, ValueError) as exc:
        raise ConcurrentWriteError(f"{tmp}: manifest missing or unreadable ({exc})") from exc
    if on_disk.get("write_token") != token or on_disk.get("rows") != manifest.get("rows"):
        raise ConcurrentWriteError(
            f"{tmp}: the manifest is not this writer's (token {on_disk.get('write_token')!r}, "
            f"rows {on_disk.get('rows')!r}; expected {token!r}, {manifest.get('rows')!r}): "
            "another process wrote into this run's temporary directory. Nothing was published."
        )
    now = data_files(fs, tmp, manifest_name)
    listed = dict(on_disk.get("files") or {})
    if now != listed:
        changed = sorted(set(now.items()) ^ set(listed.items()))[:5]
        raise ConcurrentWriteError(
            f"{tmp}: the files differ from those whose rows the manifest counts ({changed}): "
            "another process touched this run's temporary directory. Nothing was published."
        )
