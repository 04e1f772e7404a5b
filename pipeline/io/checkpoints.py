"""Solver checkpoints in a directory: the file-backed
:class:`~pipeline.linalg.checkpoint.CheckpointStore`, on the local disk or any store of the
storage layer (:mod:`pipeline.io.storage`).

The solvers (:mod:`pipeline.linalg`, :mod:`pipeline.baselines`) save and load named states
through the protocol their package declares and never touch a file; the caller makes a
:class:`CheckpointDirectory` and passes it in
(:func:`pipeline.methods.checkpoints.checkpoint_store`, the λ path of
:mod:`pipeline.evaluation.lambda_selection`).

Layout of a checkpoint directory::

    manifest.json            fingerprint of the problem (sizes, λ, r, seed, data hash, ...)
    <name>.json              pointer + metadata of the latest state called <name>
    <name>-<seq>/<array>.npy the arrays of that state

A state is written into a temporary directory which is then renamed (``os.replace``) to a fresh
``<name>-<seq>`` directory; only then is ``<name>.json`` replaced atomically (temp file +
``os.replace``), so a crash at any point leaves the previous state readable. On another store
(``files=``: HDFS, an object store) the state is uploaded under its fresh name and the pointer
is then written whole, which is the commit there too. Arrays are stored
with ``allow_pickle=False``; nothing is pickled. An array given as
:class:`~pipeline.linalg.checkpoint.ColumnBlocks` (the eigensolver's tracked images, kept as a
list of p x b blocks) is written as the one array they form side by side, row step by row
step, without forming it in memory.

A store is bound to one problem by its fingerprint, given when it is made or later with
:meth:`CheckpointDirectory.bind` (a solver binds the store its caller made to the problem it
is about to solve). Binding a directory whose manifest describes another problem raises
:class:`~pipeline.linalg.checkpoint.CheckpointMismatchError` naming the differing keys.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.linalg.checkpoint import CheckpointMismatchError, ColumnBlocks, fingerprint_hash

if TYPE_CHECKING:
    from pipeline.io.storage import Storage

__all__ = ["FORMAT_VERSION", "CheckpointDirectory"]

logger = logging.getLogger(__name__)

#: The layout's version, in every manifest.json (resume of older checkpoints depends on it).
FORMAT_VERSION = 1


def _write_json_atomic(path: Path, obj: dict) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


class CheckpointDirectory:
    """A directory of named, atomically written solver states for one problem: the
    :class:`~pipeline.linalg.checkpoint.CheckpointStore` the solvers write to, on the local
    disk or any store of the storage layer.

    Parameters
    ----------
    directory : str or Path
        Created (when the store is bound) if missing.
    fingerprint : dict, optional
        JSON-serialisable description of the problem: binds the store at once
        (:meth:`bind`). Without it the store touches nothing until it is bound.
    files : Storage, optional
        The store ``directory`` lives on when it is not a local path (HDFS, an object
        store): states are written to a local temporary directory and uploaded under their
        fresh ``<name>-<seq>`` name, then the pointer is replaced (one whole-object write),
        so the commit is the pointer on every store. Default: the local disk.

    Raises
    ------
    CheckpointMismatchError
        If the directory holds checkpoints of a different problem.
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        fingerprint: dict | None = None,
        *,
        files: Storage | None = None,
    ) -> None:
        self.files = files
        self.directory: Any = os.fspath(directory).rstrip("/") if files else Path(directory)
        self.fingerprint: dict | None = None
        self.hash: str | None = None
        if fingerprint is not None:
            self.bind(fingerprint)

    # -- the few file operations, local or through ``files``
    def _at(self, name: str) -> Any:
        return f"{self.directory}/{name}" if self.files else self.directory / name

    def _exists(self, name: str) -> bool:
        return self.files.exists(self._at(name)) if self.files else self._at(name).exists()

    def _read_json(self, name: str) -> dict:
        text = self.files.read_text(self._at(name)) if self.files else self._at(name).read_text()
        return json.loads(text)

    def _write_json(self, name: str, obj: dict) -> None:
        if self.files:
            data = json.dumps(obj, indent=1, sort_keys=True).encode()
            self.files.replace_bytes(self._at(name), data)
        else:
            _write_json_atomic(self._at(name), obj)

    def bind(self, fingerprint: dict) -> CheckpointDirectory:
        """Bind the store to the problem ``fingerprint``; return it.

        Creates the directory and its manifest, or checks that an existing manifest names the
        same problem (an identical fingerprint).

        Raises
        ------
        CheckpointMismatchError
            If the directory holds checkpoints of a different problem (the store stays
            unbound).
        """
        canonical = json.loads(json.dumps(fingerprint, sort_keys=True, default=str))
        problem = fingerprint_hash(canonical)
        if self.files:
            self.files.mkdirs(self.directory)
        else:
            self.directory.mkdir(parents=True, exist_ok=True)
        if self._exists("manifest.json"):
            self._check_manifest(self._at("manifest.json"), canonical, problem)
        else:
            self._write_json(
                "manifest.json",
                {"version": FORMAT_VERSION, "hash": problem, "fingerprint": canonical},
            )
        self.fingerprint, self.hash = canonical, problem
        return self

    def _check_manifest(self, manifest: Any, fingerprint: dict, problem: str) -> None:
        try:
            stored = self._read_json("manifest.json")
        except (OSError, json.JSONDecodeError) as exc:
            raise CheckpointMismatchError(
                f"checkpoint manifest {manifest} is unreadable ({exc}); remove the directory"
            ) from exc
        if stored.get("hash") != problem:
            old = stored.get("fingerprint", {})
            keys = sorted(
                k for k in set(old) | set(fingerprint) if old.get(k) != fingerprint.get(k)
            )
            diffs = ", ".join(f"{k}: {old.get(k)!r} -> {fingerprint.get(k)!r}" for k in keys[:8])
            raise CheckpointMismatchError(
                f"checkpoint directory {self.directory} belongs to a different problem "
                f"(differs in {diffs}); use another checkpoint directory or delete it"
            )

    def _bound(self) -> str:
        if self.hash is None:
            raise RuntimeError(f"checkpoint store {self.directory} is not bound to a problem")
        return self.hash

    def save(self, name: str, arrays: dict[str, np.ndarray | ColumnBlocks], meta: dict) -> None:
        """Atomically replace state ``name`` by ``arrays`` (.npy each) and ``meta`` (JSON)."""
        problem = self._bound()
        seq = 0
        if self._exists(f"{name}.json"):
            seq = int(self._read_json(f"{name}.json").get("seq", 0)) + 1
        final = f"{name}-{seq:06d}"
        if self._exists(final):  # left over from a crash between rename and pointer update
            if self.files:
                self.files.delete(self._at(final))
            else:
                shutil.rmtree(self._at(final))
        where = None if self.files else self.directory
        tmp = Path(tempfile.mkdtemp(dir=where, prefix=f".{name}-", suffix=".tmp"))
        try:
            for key, value in arrays.items():
                with open(tmp / f"{key}.npy", "wb") as f:
                    if isinstance(value, ColumnBlocks):
                        value.write_npy(f)
                    else:
                        np.save(f, np.asarray(value), allow_pickle=False)
                    f.flush()
                    os.fsync(f.fileno())
            if self.files:  # a fresh name nobody reads until the pointer names it
                self.files.put(str(tmp), self._at(final))
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                os.replace(tmp, self._at(final))
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self._write_json(
            f"{name}.json",
            {"seq": seq, "dir": final, "arrays": sorted(arrays), "meta": meta, "hash": problem},
        )
        olds = (
            [n for n in self.files.list_names(self.directory) if n.startswith(f"{name}-")]
            if self.files
            else [p.name for p in self.directory.glob(f"{name}-*") if p.is_dir()]
        )
        for old in olds:
            if old != final and re.fullmatch(rf"{re.escape(name)}-\d{{6}}", old):
                if self.files:
                    self.files.delete(self._at(old))
                else:
                    shutil.rmtree(self._at(old), ignore_errors=True)
        logger.debug("checkpoint %s saved to %s", name, self._at(final))

    def load(self, name: str) -> tuple[dict[str, np.ndarray], dict] | None:
        """The latest state ``name`` as ``(arrays, meta)``, or None if there is none."""
        problem = self._bound()
        if not self._exists(f"{name}.json"):
            return None
        info = self._read_json(f"{name}.json")
        if info.get("hash") != problem:
            raise CheckpointMismatchError(
                f"{self._at(name + '.json')} was written for a different problem"
            )
        try:
            if self.files:
                with tempfile.TemporaryDirectory(prefix="cr5-checkpoint-") as tmp:
                    arrays = {}
                    for k in info["arrays"]:
                        local = os.path.join(tmp, f"{k}.npy")
                        self.files.get(f"{self._at(info['dir'])}/{k}.npy", local)
                        arrays[k] = np.load(local, allow_pickle=False)
            else:
                folder = self._at(info["dir"])
                arrays = {
                    k: np.load(folder / f"{k}.npy", allow_pickle=False) for k in info["arrays"]
                }
        except (OSError, ValueError) as exc:
            raise CheckpointMismatchError(
                f"checkpoint {name} in {self.directory} is incomplete or corrupt ({exc})"
            ) from exc
        return arrays, info["meta"]

    def names(self) -> list[str]:
        """The names of the states saved (those :meth:`load` finds), sorted."""
        if self.files:
            listed = self.files.list_names(self.directory) if self._exists("") else []
        else:
            listed = (
                [p.name for p in self.directory.glob("*.json")] if self.directory.exists() else []
            )
        return sorted(
            n[: -len(".json")] for n in listed if n.endswith(".json") and n != "manifest.json"
        )

    def delete(self, name: str) -> None:
        """Remove state ``name`` (its pointer first, so a reader never meets half of it)."""
        if self._exists(f"{name}.json"):
            if self.files:
                self.files.delete(self._at(f"{name}.json"))
            else:
                self._at(f"{name}.json").unlink()
        olds = (
            self.files.list_names(self.directory)
            if self.files
            else [p.name for p in self.directory.glob(f"{name}-*")]
        )
        for old in olds:
            if re.fullmatch(rf"{re.escape(name)}-\d{{6}}", old):
                if self.files:
                    self.files.delete(self._at(old))
                else:
                    shutil.rmtree(self._at(old), ignore_errors=True)

    def __repr__(self) -> str:
        return f"CheckpointDirectory({str(self.directory)!r})"
