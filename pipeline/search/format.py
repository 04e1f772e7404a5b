"""The search index directory: layout, manifest, and the checks a reader makes. No Spark.

Layout (written by the ``index`` stage, :mod:`pipeline.search.build`)::

    index/
      _manifest.json                      what was built from what (below), and the size of
                                          every file
      <lang>/shard-00000.faiss            a faiss index over L2-normalised vectors (inner
                                          product = cosine): IndexFlatIP or IndexHNSWFlat
      <lang>/shard-00000.docs.parquet     doc_id, concept_id, title, snippet; row i describes
                                          vector i of the shard
      <lang>/shard-00000.csls.npy         float32 (rows, n_sources): column j is r_S of each
                                          document over source language ``csls.sources[lang][j]``
                                          (with ``search.csls``)

The manifest records the identity of the model (:func:`pipeline.model.format.model_fingerprint`
and its path) and of the ``embeddings`` dataset it was built from (write token, creation time,
rows), the build parameters, and per language its shards and their rows. It is written last
into a hidden temporary directory that replaces the index in one rename
(:mod:`pipeline.io.publish`), so a reader sees a whole index or the previous one.

A reader (:func:`read_index_manifest`) refuses a directory without a manifest, of another
format version, or whose files' sizes differ from the manifest; :func:`resolve_model`
finds the model an index was built with and refuses any other (:class:`StaleIndexError`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pipeline.errors import DatasetIntegrityError, DatasetNotFoundError, ModelError
from pipeline.io.locations import ROOT, from_manifest
from pipeline.io.publish import MANIFEST, LocalFS, recover
from pipeline.io.storage import is_local, local_directory, local_path

__all__ = [
    "INDEX_FORMAT_VERSION",
    "StaleIndexError",
    "csls_file",
    "docs_file",
    "index_root",
    "read_index_manifest",
    "resolve_model",
    "shard_file",
    "shard_name",
]

INDEX_FORMAT_VERSION = 1

#: Seconds after which a dead writer's leftovers may be cleared by a reader (as datasets).
_STALE_SECONDS = 300.0


class StaleIndexError(ModelError):
    """The index was built with another model than the one it would embed queries with."""


def shard_name(i: int) -> str:
    """``shard-00000``: the stem of shard ``i``'s files."""
    return f"shard-{i:05d}"


def shard_file(lang: str, i: int) -> str:
    """The faiss file of shard ``i`` of ``lang``, relative to the index directory."""
    return f"{lang}/{shard_name(i)}.faiss"


def docs_file(lang: str, i: int) -> str:
    """The Parquet file describing the rows of shard ``i`` of ``lang``."""
    return f"{lang}/{shard_name(i)}.docs.parquet"


def csls_file(lang: str, i: int) -> str:
    """The ``.npy`` file of shard ``i``'s CSLS terms."""
    return f"{lang}/{shard_name(i)}.csls.npy"


def index_directory(path: str | os.PathLike) -> Path:
    """The local directory holding the index at ``path``: ``path`` itself on a local disk,
    else a copy in the local cache checked against the manifest's file sizes
    (:func:`pipeline.io.storage.local_directory`; inside a Spark job any store the cluster's
    Hadoop configuration resolves)."""
    try:
        return local_directory(path, MANIFEST)
    except FileNotFoundError:
        raise DatasetNotFoundError(
            f"search index {os.fspath(path)} does not exist (no {MANIFEST}). Fix: build it "
            "with the index stage (python jobs/index.py --conf conf/<profile>.yaml, after "
            "embed), or point at an index directory (paths.index)."
        ) from None
    except OSError as exc:
        raise DatasetIntegrityError(
            f"search index {os.fspath(path)} could not be copied whole from its store "
            f"({exc}); rebuild it (jobs/index.py) if this persists"
        ) from exc


def read_index_manifest(path: str | os.PathLike, *, check_files: bool = True) -> dict[str, Any]:
    """The manifest of the index at ``path``, checked.

    Raises
    ------
    DatasetNotFoundError
        No index there (or an incomplete one): names the stage to run.
    DatasetIntegrityError
        Another format version, or files whose sizes differ from the manifest (with
        ``check_files``).
    """
    path = index_directory(path)
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        recover(LocalFS(), str(path.absolute()), stale_seconds=_STALE_SECONDS)
    if not manifest_path.is_file():
        what = "does not exist" if not path.exists() else f"is incomplete (no {MANIFEST})"
        raise DatasetNotFoundError(
            f"search index {path} {what}. Fix: build it with the index stage "
            "(python jobs/index.py --conf conf/<profile>.yaml, after embed), or point at an "
            "index directory (paths.index)."
        )
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DatasetIntegrityError(
            f"{manifest_path} is not valid JSON ({exc}); rebuild the index (jobs/index.py)"
        ) from exc
    if manifest.get("dataset") != "index":
        raise DatasetNotFoundError(
            f"{path} holds the {manifest.get('dataset')!r} dataset, not a search index. Fix: "
            "point at the directory the index stage wrote (paths.index, default <root>/index)."
        )
    version = manifest.get("format_version")
    if version != INDEX_FORMAT_VERSION:
        raise DatasetIntegrityError(
            f"search index {path} has format version {version!r}; this library reads "
            f"{INDEX_FORMAT_VERSION}. Fix: rebuild it with the index stage (jobs/index.py)."
        )
    if check_files:
        for rel, size in manifest["files"].items():
            f = path / rel
            if not f.is_file():
                raise DatasetIntegrityError(
                    f"search index {path}: file {rel} is missing; rebuild the index"
                )
            if f.stat().st_size != size:
                raise DatasetIntegrityError(
                    f"search index {path}: file {rel} has {f.stat().st_size} bytes, the "
                    f"manifest says {size} (truncated or replaced); rebuild the index"
                )
    return manifest


def index_root(path: str | os.PathLike, manifest: dict[str, Any]) -> str | None:
    """The run root (``paths.root``) the index was built under, found from where the index is
    now: an index stored as ``<paths.root>/index`` and now at ``/x/out/index`` has root
    ``/x/out``. None when the index was stored outside the root or moved apart from it."""
    stored = manifest.get("index_path") or ""
    if not stored.startswith(ROOT + "/"):
        return None
    rel = stored[len(ROOT) + 1 :].strip("/")
    if not is_local(path):  # a URI: the root is the same URI less the index's part
        text = os.fspath(path).rstrip("/")
        return text[: -len(rel) - 1] if text.endswith("/" + rel) else None
    here = Path(local_path(path)).absolute()
    parts = Path(rel).parts
    if tuple(here.parts[-len(parts) :]) != parts:
        return None
    return str(Path(*here.parts[: -len(parts)]))


def resolve_model(
    path: str | os.PathLike, manifest: dict[str, Any], model: str | os.PathLike | None
) -> tuple[str, dict[str, Any]]:
    """The model directory to embed queries with, and its ``model.json``.

    ``model`` (if given) or the model recorded in the manifest (resolved against the run
    root the index lives in). Its fingerprint must be the index's.

    Raises
    ------
    StaleIndexError
        The model is not the one the index was built with (retrained since, or another).
    ModelError
        The model cannot be found or read.
    """
    from pipeline.model.format import model_fingerprint, read_model_json

    recorded = manifest["model"]
    if model is None:
        stored = recorded.get("path")
        root = index_root(path, manifest)
        if stored and stored.startswith(ROOT) and root is None:
            raise ModelError(
                f"search index {path} was moved apart from its run root, so the model it "
                f"was built with ({stored}) cannot be found. Fix: pass the model directory "
                "(--model, or SearchIndex.open(..., model=...))."
            )
        model = from_manifest(stored, root or "")
    meta = read_model_json(model)
    found = model_fingerprint(meta)
    if found != recorded["fingerprint"]:
        raise StaleIndexError(
            f"search index {path} was built with model {recorded['fingerprint']} (created "
            f"{recorded.get('created_utc')}), but the model at {model} is {found} (created "
            f"{meta.get('created_utc')}): its query vectors would not match the indexed ones. "
            "Fix: rebuild the index with this model (python jobs/embed.py, then "
            "python jobs/index.py), or query with the model the index was built with."
        )
    return str(model), meta
