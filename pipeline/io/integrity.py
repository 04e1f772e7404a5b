"""Per-file sizes and checksums of published datasets, recorded by writers, checked by readers.

A dataset's manifest lists every file its writer published: ``files`` (relative path ->
bytes) and ``checksums`` (relative path -> ``"sha256:<hex>"``, or the store's own checksum
such as HDFS's ``"MD5-of-0MD5-of-512CRC32C:<hex>"``), and carries ``manifest_checksum``, the
SHA-256 of the manifest's own other entries. The writer computes the checksums right after
its files are written, while they are still in the page cache, with several files hashed at
once (:func:`file_checksums`).

A reader checks (:func:`verify_dataset`), before it reads anything:

- the manifest parses and its ``manifest_checksum`` matches;
- every listed data file exists with its listed size, and no unlisted data file has
  appeared (one directory listing: always); hidden files (Hadoop's ``.crc`` sidecars,
  ``_SUCCESS``) are checked when present but may be missing, as after a copy that drops them;
- every file's checksum, when the dataset's files total at most ``paths.checksum_max_bytes``
  (``configure``; 1 GiB by default) or when asked (``python -m pipeline verify``).

A dataset that fails is *damaged*: :class:`~pipeline.errors.DamagedDatasetError`, one
paragraph naming the dataset, the file, what is wrong with it, the stage that writes it and
the command that rebuilds it (exit 2). A check that passed is remembered for the process
(keyed by the files' sizes and modification times), so a chain of stages reading the same
dataset hashes it once.

Datasets written before manifests had checksums are checked for sizes only; Delta tables
carry their own file list in the Delta log and are not checked here.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pipeline.errors import DamagedDatasetError
from pipeline.failures import rebuild_command

__all__ = [
    "MANIFEST_CHECKSUM",
    "checksum_max_bytes",
    "configure",
    "damaged_message",
    "file_checksums",
    "find_damage",
    "seal",
    "sha256_file",
    "verify_dataset",
    "verify_manifest_seal",
]

#: Manifest key holding the SHA-256 of the manifest's other entries.
MANIFEST_CHECKSUM = "manifest_checksum"
_HASH_THREADS = 4
_CHUNK = 1 << 20

_policy: dict[str, int] = {}
_verified: dict[str, tuple] = {}
_lock = threading.Lock()


def configure(*, checksum_max_bytes: int) -> None:
    """Set ``paths.checksum_max_bytes`` for this process (the runner calls it per run)."""
    _policy["checksum_max_bytes"] = int(checksum_max_bytes)


def checksum_max_bytes() -> int:
    """The configured limit, else the default of ``paths.checksum_max_bytes``."""
    if "checksum_max_bytes" not in _policy:
        from pipeline.config import PathsConfig

        return int(PathsConfig.checksum_max_bytes)
    return _policy["checksum_max_bytes"]


# --------------------------------------------------------------------------- writing


def sha256_file(path: str | os.PathLike) -> str:
    """Hex SHA-256 of the local file at ``path``."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def file_checksums(
    directory: str,
    files: Iterable[str],
    *,
    store_checksum: Callable[[str], str | None] | None = None,
) -> dict[str, str]:
    """``{relative path: "algorithm:hex"}`` of ``files`` under ``directory``.

    Local files are hashed with SHA-256, several at once (hashlib releases the GIL). On
    another store pass ``store_checksum`` (path -> ``"algorithm:hex"`` or None, e.g.
    :meth:`pipeline.io.hadoop.HadoopFS.file_checksum`): a store without checksums gives
    none, and its files are checked by size only.
    """
    names = sorted(files)
    if store_checksum is not None:
        out = {}
        for rel in names:
            value = store_checksum(f"{directory}/{rel}")
            if value:
                out[rel] = value
        return out
    with ThreadPoolExecutor(min(_HASH_THREADS, max(1, len(names)))) as pool:
        digests = pool.map(lambda rel: sha256_file(os.path.join(directory, rel)), names)
        return {rel: f"sha256:{d}" for rel, d in zip(names, digests, strict=True)}


def _canonical(manifest: Mapping[str, Any]) -> bytes:
    """The manifest's entries but its checksum, as JSON with sorted keys, after one JSON
    round trip (so non-string keys and non-JSON values hash as the reader will see them)."""
    body = {k: v for k, v in manifest.items() if k != MANIFEST_CHECKSUM}
    plain = json.loads(json.dumps(body, default=str))
    return json.dumps(plain, sort_keys=True).encode("utf-8")


def seal(manifest: dict[str, Any]) -> dict[str, Any]:
    """Add ``manifest_checksum`` (SHA-256 of the other entries) to ``manifest``; return it."""
    manifest[MANIFEST_CHECKSUM] = "sha256:" + hashlib.sha256(_canonical(manifest)).hexdigest()
    return manifest


def verify_manifest_seal(manifest: Mapping[str, Any]) -> bool:
    """True unless ``manifest`` carries a ``manifest_checksum`` its other entries fail."""
    expected = manifest.get(MANIFEST_CHECKSUM)
    if expected is None:
        return True
    return expected == "sha256:" + hashlib.sha256(_canonical(manifest)).hexdigest()


# --------------------------------------------------------------------------- reading


def _hidden(rel: str) -> bool:
    """Names Spark and pyarrow skip (``_SUCCESS``, ``.crc`` files, hidden directories)."""
    return any(part.startswith((".", "_")) for part in rel.split("/"))


def find_damage(
    listing: Mapping[str, int],
    manifest: Mapping[str, Any],
    hashes: Callable[[list[str]], Mapping[str, str]] | None = None,
) -> tuple[str, str] | None:
    """The first problem of a dataset's files against its manifest, as (file, what), or None.

    Parameters
    ----------
    listing : mapping of str to int
        ``{relative path: bytes}`` of the files now in the dataset's directory (the
        manifest excluded).
    manifest : mapping
        With ``files`` (path -> bytes) and optionally ``checksums`` (path -> "algo:hex").
    hashes : callable, optional
        Computes ``{path: "algo:hex"}`` for a list of paths; checksums are compared only
        when given.
    """
    listed = manifest.get("files")
    if not isinstance(listed, Mapping):
        return None  # a manifest that never listed its files (not written by write_dataset)
    for rel, size in sorted(listed.items()):
        if rel not in listing:
            if _hidden(rel):
                # Hadoop's .crc sidecars and _SUCCESS: not data, and not copied by every
                # tool (``hdfs dfs -put`` leaves the .crc files behind)
                continue
            return rel, "is missing"
        if listing[rel] != size:
            cause = "truncated" if listing[rel] < size else "extended"
            return rel, (
                f"has {listing[rel]} bytes where its manifest recorded {size} (it was {cause} "
                "or replaced after it was written)"
            )
    extra = sorted(rel for rel in listing if rel not in listed and not _hidden(rel))
    if extra:
        return extra[0], "is not one of the files its manifest lists (it appeared later)"
    sums = manifest.get("checksums")
    if hashes is not None and isinstance(sums, Mapping) and sums:
        now = hashes(sorted(sums))
        for rel in sorted(sums):
            if rel in now and now[rel] != sums[rel]:
                algorithm = str(sums[rel]).split(":", 1)[0]
                return rel, (
                    f"fails its {algorithm} check: its bytes changed after it was written "
                    "(a disk, memory or copy error)"
                )
    return None


def damaged_message(
    *, dataset: str, path: str, producer: str, file: str, what: str, reading: bool = True
) -> str:
    """The one paragraph of a damaged dataset (or model): what, which file, the fix."""
    rebuild = (
        f"rebuild it with the stage that writes it, {producer}: {rebuild_command(producer)} "
        "(then rerun the stages after it)"
        if producer
        else "restore it from a copy, or rebuild it with the stage that wrote it"
    )
    nothing = (
        " The stage stops before reading it: nothing built from damaged data is published, "
        "and what was published before stays as it is."
        if reading
        else ""
    )
    head = f"dataset {dataset!r} at {path} is damaged: its file {file} {what}."
    return f"{head}{nothing} Fix: {rebuild}."


def _local_listing(root: str) -> tuple[dict[str, int], tuple]:
    """Sizes of the files under ``root`` and a signature (sizes and modification times)."""
    sizes, stamp = {}, []
    for base, _dirs, names in os.walk(root):
        for name in names:
            full = os.path.join(base, name)
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            st = os.stat(full)
            sizes[rel] = st.st_size
            stamp.append((rel, st.st_size, st.st_mtime_ns))
    return sizes, tuple(sorted(stamp))


def verify_dataset(
    root: str,
    manifest: Mapping[str, Any],
    *,
    dataset: str,
    producer: str,
    list_files: Callable[[str], Mapping[str, int]] | None = None,
    store_checksum: Callable[[str], str | None] | None = None,
    checksums: bool | None = None,
    manifest_name: str = "_manifest.json",
    reading: bool = True,
) -> bool:
    """Raise :class:`~pipeline.errors.DamagedDatasetError` unless the dataset at ``root``
    matches ``manifest`` (module docs); return whether checksums were compared.

    Parameters
    ----------
    root : str
        The dataset's directory: a local path, or a path of ``list_files``'s store.
    manifest : mapping
        Its manifest, as read.
    dataset, producer : str
        Its name and the stage that writes it (for the message).
    list_files : callable, optional
        ``{relative path: bytes}`` of a directory on another store (default: the local
        file system).
    store_checksum : callable, optional
        That store's checksum of one file (:func:`file_checksums`).
    checksums : bool, optional
        Compare checksums: True always, False never, None when the files total at most
        :func:`checksum_max_bytes`.
    manifest_name : str
        The manifest's file name (left out of the comparison).
    reading : bool
        A stage is about to read it (the message says the stage stops), rather than a
        check of its own (``python -m pipeline verify``).
    """

    def damaged(file: str, what: str) -> DamagedDatasetError:
        return DamagedDatasetError(
            damaged_message(
                dataset=dataset,
                path=root,
                producer=producer,
                file=file,
                what=what,
                reading=reading,
            )
        )

    if not verify_manifest_seal(manifest):
        raise damaged(
            manifest_name,
            "fails its checksum (manifest_checksum): it changed after it was written",
        )
    if list_files is None:
        listing, stamp = _local_listing(root)
    else:
        listing = dict(list_files(root))
        stamp = tuple(sorted(listing.items()))
    listing.pop(manifest_name, None)
    total = sum(int(v) for v in (manifest.get("files") or {}).values())
    compare = checksums if checksums is not None else total <= checksum_max_bytes()
    key = (manifest.get("write_token"), manifest.get("created_utc"), stamp)
    with _lock:
        if _verified.get(root) in ((key, True), (key, compare)) and not checksums:
            return compare
    if compare and list_files is None:

        def hashes(rels: list[str]) -> Mapping[str, str]:
            present = [r for r in rels if r in listing]
            return file_checksums(root, present)

    elif compare and store_checksum is not None:

        def hashes(rels: list[str]) -> Mapping[str, str]:
            present = [r for r in rels if r in listing]
            return file_checksums(root, present, store_checksum=store_checksum)

    else:
        hashes = None
    problem = find_damage(listing, manifest, hashes)
    if problem is not None:
        with _lock:
            _verified.pop(root, None)
        raise damaged(*problem)
    with _lock:
        _verified[root] = (key, compare)
    return compare


def verify_local(path: str | os.PathLike, *, manifest_name: str = "_manifest.json") -> str:
    """Check every file of the local Parquet dataset at ``path``, checksums included; return
    a one-line summary or raise :class:`~pipeline.errors.DamagedDatasetError` (also for a
    manifest that does not parse)."""
    root = os.path.abspath(os.fspath(path))
    name = os.path.basename(root)
    try:
        with open(os.path.join(root, manifest_name), encoding="utf-8") as f:
            manifest = json.load(f)
        if not isinstance(manifest, dict):
            raise ValueError("not a JSON object")
    except (ValueError, UnicodeDecodeError) as exc:
        raise DamagedDatasetError(
            damaged_message(
                dataset=name,
                path=root,
                producer="",
                file=manifest_name,
                what=f"is not a readable manifest ({exc})",
                reading=False,
            )
        ) from None
    dataset = str(manifest.get("dataset") or name)
    verify_dataset(
        root,
        manifest,
        dataset=dataset,
        producer=str(manifest.get("producer") or ""),
        checksums=True,
        manifest_name=manifest_name,
        reading=False,
    )
    files = manifest.get("files") or {}
    summed = len(manifest.get("checksums") or {})
    what = f"{summed} checksums match" if summed else "sizes match (no checksums recorded)"
    return (
        f"ok: dataset {dataset!r} at {root}: {len(files)} files, "
        f"{sum(files.values())} bytes, {what}"
    )
