"""The model directory: portable, pickle-free, verified on load.

Layout::

    model/
      model.json                       schema version, languages, r, λ, preprocessing,
                                       solver history, provenance, file sizes and SHA-256
      languages/<lang>/phi.npy         Φ_lᵀ, float32, shape (p_l, r)   (phi_format "dense";
                                       the topic-word matrix for "topic_word")
      languages/<lang>/phi_index.npy   int64, shape (p_l,)               (phi_format "selection")
      languages/<lang>/mean.npy        μ_l, float32, shape (p_l,) (global mean, block l)
      languages/<lang>/offset.npy      float32, shape (r,), subtracted from the language's
                                       embeddings (optional; XCNN's mean training embedding)
      languages/<lang>/vocabulary.parquet   term, term_index, df, idf (term_index order)
      shared/<name>.npy                model-wide arrays, float64 (optional, listed in
                                       ``shared_arrays`` of model.json); Cr5 models keep
                                       shared/gram_eigenvalues.npy  Λ, shape (r,), descending
                                       shared/gram_eigenvectors.npy Q, shape (r, r)
                                       of Φ*Φ*ᵀ = QΛQᵀ (Eq. 15), so Φ_l*ᵀ = Φ_lᵀ Λ^{1/2} Qᵀ

``phi_format`` in ``model.json`` says which: ``"dense"`` (Cr5, CL-LSI, CCA, OPCA, S2Net),
``"selection"`` (the untranslated baseline, whose map is a one-hot re-indexing of the
language's terms into the union vocabulary: row i of Φ_lᵀ has a single 1 in column
``phi_index[i]``, and r is the size of the union vocabulary; such a model embeds into
sparse vectors, see :meth:`pipeline.model.Cr5Model.embed_with_counts`) or ``"topic_word"``
(JPLSA, CPLSA: ``phi.npy`` is the language's topic-word matrix, p_l x T, nonnegative, each
column summing to 1, and a document is embedded from its term counts by folding-in with the
settings of ``model.json``'s ``folding_in`` section, ``steps`` >= 1 and ``topic_prior`` >= 1;
:func:`pipeline.baselines.topics.fold_in`). A model without the key is dense.

``schema_version`` is the lowest version that describes the model: 1 for dense and
selection maps, 2 for topic-word maps (which a reader of version 1 would embed wrongly as a
linear map, so it must refuse them). This library reads both.

Shared arrays are optional within schema version 1: a model without them (a method that has
none, or a model saved without them) has no ``shared_arrays`` key, loads all the same, and
:func:`load_shared_arrays` returns ``{}`` for it.

Arrays are ``.npy`` loaded with ``allow_pickle=False``; the vocabulary is Parquet.
Every file's size and SHA-256 are recorded in ``model.json`` and checked on load, so a
truncated or corrupted model fails with a message naming the file. The directory is
written to a temporary sibling and renamed into place, like every dataset.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import scipy.sparse as sp

from pipeline import __version__
from pipeline.errors import DamagedModelError, ModelError
from pipeline.io.integrity import damaged_message
from pipeline.io.storage import local_directory, staged_directory

#: The newest schema version this library writes and reads (module docstring).
MODEL_SCHEMA_VERSION = 2
#: Every schema version this library reads.
SUPPORTED_SCHEMA_VERSIONS = (1, 2)
#: The map kinds of ``phi_format`` and the schema version each needs.
PHI_FORMATS = {"dense": 1, "selection": 1, "topic_word": 2, "encoder": 2}
#: How far (float32) a topic-word column may sum from 1.
TOPIC_SUM_TOL = 1e-3
MODEL_JSON = "model.json"
SHARED_DIR = "shared"
#: Names of Cr5's shared arrays: Λ (r,) and Q (r, r) of Φ*Φ*ᵀ = QΛQᵀ.
GRAM_EIGENVALUES = "gram_eigenvalues"
GRAM_EIGENVECTORS = "gram_eigenvectors"


@dataclass
class LanguageMap:
    """One language's part of a model.

    Attributes
    ----------
    terms : pyarrow string array of shape (p_l,), in term_index order
    idf : ndarray of float32, shape (p_l,)
    df : ndarray of int64, shape (p_l,) (document frequencies; -1 when unknown)
    phi : ndarray of float32, shape (p_l, r): Φ_lᵀ (embed a TF-IDF row x as ``x @ phi``);
        or a scipy.sparse csr_matrix of float32, shape (p_l, r), with exactly one 1 per row
        (a selection map, ``phi_format`` "selection")
    mean : ndarray of float32, shape (p_l,) or None
    offset : ndarray of float32, shape (r,) or None
        Subtracted from every embedding of the language that has a known term (``x @ phi -
        offset``): the language's mean training embedding for a method whose embeddings
        share a language-specific common vector (XCNN), which cosine would otherwise rank on.
    """

    terms: pa.Array
    idf: np.ndarray
    df: np.ndarray
    phi: np.ndarray | sp.csr_matrix
    mean: np.ndarray | None = None
    offset: np.ndarray | None = None

    @property
    def is_selection(self) -> bool:
        return sp.issparse(self.phi)

    def validate(self, lang: str, r: int | None = None) -> None:
        p = len(self.terms)
        problems = []
        if self.idf.shape != (p,):
            problems.append(f"idf has shape {self.idf.shape}, expected ({p},)")
        if self.df.shape != (p,):
            problems.append(f"df has shape {self.df.shape}, expected ({p},)")
        if self.is_selection:
            phi = self.phi
            if phi.nnz != p or not np.array_equal(np.diff(phi.indptr), np.ones(p)):
                problems.append("a selection phi must have exactly one entry per row")
            elif not np.all(phi.data == 1):
                problems.append("a selection phi must hold ones only")
        if self.phi.ndim != 2 or self.phi.shape[0] != p:
            problems.append(f"phi has shape {self.phi.shape}, expected ({p}, r)")
        elif r is not None and self.phi.shape[1] != r:
            problems.append(f"phi has {self.phi.shape[1]} columns, the model says r={r}")
        if self.mean is not None and self.mean.shape != (p,):
            problems.append(f"mean has shape {self.mean.shape}, expected ({p},)")
        if self.offset is not None and (
            self.is_selection or self.offset.shape != (self.phi.shape[1],)
        ):
            problems.append(
                f"offset has shape {self.offset.shape}, expected ({self.phi.shape[1]},) and a "
                "dense map"
            )
        if self.phi.dtype != np.float32:
            problems.append(f"phi has dtype {self.phi.dtype}, expected float32")
        if problems:
            raise ModelError(f"language {lang!r}: " + "; ".join(problems))

    def validate_topic_words(self, lang: str) -> None:
        """Check a ``topic_word`` map: finite, nonnegative, each column summing to 1."""
        phi = np.asarray(self.phi)
        if not np.all(np.isfinite(phi)) or (phi.size and phi.min() < 0):
            raise ModelError(
                f"language {lang!r}: a topic-word map must hold finite nonnegative "
                "probabilities; the model is corrupted"
            )
        sums = phi.sum(axis=0, dtype=np.float64)
        if sums.size and np.max(np.abs(sums - 1.0)) > TOPIC_SUM_TOL:
            bad = int(np.argmax(np.abs(sums - 1.0)))
            raise ModelError(
                f"language {lang!r}: topic {bad} of the topic-word map sums to {sums[bad]:.6g}, "
                "not 1; the model is corrupted"
            )


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _check_shared(shared: dict[str, np.ndarray], r: int) -> dict[str, np.ndarray]:
    out = {}
    for name, arr in shared.items():
        if not (isinstance(name, str) and name.isidentifier()):
            raise ModelError(f"shared array name {name!r} must be an identifier like 'abc_1'")
        a = np.asarray(arr)
        if a.dtype.kind not in "fiu" or not np.all(np.isfinite(a)):
            raise ModelError(f"shared array {name!r} must be finite numbers; got dtype {a.dtype}")
        out[name] = np.ascontiguousarray(a, dtype=np.float64)
    lam, q = out.get(GRAM_EIGENVALUES), out.get(GRAM_EIGENVECTORS)
    if (lam is None) != (q is None):
        raise ModelError(f"{GRAM_EIGENVALUES} and {GRAM_EIGENVECTORS} go together; pass both")
    if lam is not None and q is not None:
        if lam.shape != (r,) or q.shape != (r, r):
            raise ModelError(
                f"{GRAM_EIGENVALUES} has shape {lam.shape} and {GRAM_EIGENVECTORS} {q.shape}; "
                f"expected ({r},) and ({r}, {r}) for r={r}"
            )
        if r and not np.all(lam > 0):
            raise ModelError(f"{GRAM_EIGENVALUES} must be > 0 (Φ*Φ*ᵀ is positive definite)")
    return out


def save_model(
    path: str | os.PathLike,
    languages: dict[str, LanguageMap],
    meta: dict,
    *,
    shared: dict[str, np.ndarray] | None = None,
) -> dict:
    """Write a model directory atomically; returns the ``model.json`` content.

    ``meta`` must hold at least ``r``; it is completed with the schema version, languages,
    vocabulary sizes, library version, creation time and the file checksums. ``shared``:
    model-wide arrays saved as ``shared/<name>.npy`` (float64), e.g. Cr5's
    :data:`GRAM_EIGENVALUES` (r,) and :data:`GRAM_EIGENVECTORS` (r, r).
    """
    path = os.fspath(path)
    if not languages:
        raise ModelError("a model needs at least one language")
    r = int(meta["r"])
    for lang, lm in languages.items():
        lm.validate(lang, r)
    shared_arrays = _check_shared(shared or {}, r)
    kinds = {lm.is_selection for lm in languages.values()}
    if len(kinds) > 1:
        raise ModelError("a model's languages must all be dense or all be selection maps")
    phi_format = "selection" if kinds == {True} else "dense"
    if meta.get("folding_in") is not None:
        if phi_format == "selection":
            raise ModelError("a selection map cannot be a topic-word map (folding_in given)")
        phi_format = "topic_word"
        check_folding_in(meta["folding_in"], "meta")
        for lang, lm in languages.items():
            lm.validate_topic_words(lang)
    with staged_directory(path) as tmp:
        files: dict[str, dict[str, Any]] = {}
        for lang, lm in languages.items():
            d = tmp / "languages" / lang
            d.mkdir(parents=True)
            if lm.is_selection:
                np.save(d / "phi_index.npy", np.asarray(lm.phi.indices, dtype=np.int64))
            else:
                np.save(d / "phi.npy", np.ascontiguousarray(lm.phi, dtype=np.float32))
            if lm.mean is not None:
                np.save(d / "mean.npy", np.asarray(lm.mean, dtype=np.float32))
            if lm.offset is not None:
                np.save(d / "offset.npy", np.asarray(lm.offset, dtype=np.float32))
            table = pa.table(
                {
                    "term": lm.terms,
                    "term_index": pa.array(np.arange(len(lm.terms), dtype=np.int32)),
                    "df": pa.array(np.asarray(lm.df, dtype=np.int64)),
                    "idf": pa.array(np.asarray(lm.idf, dtype=np.float32)),
                }
            )
            pq.write_table(table, d / "vocabulary.parquet", compression="zstd")
        if shared_arrays:
            (tmp / SHARED_DIR).mkdir(parents=True)
            for name, arr in shared_arrays.items():
                np.save(tmp / SHARED_DIR / f"{name}.npy", arr)
        for f in sorted(tmp.rglob("*")):
            if f.is_file():
                files[f.relative_to(tmp).as_posix()] = {
                    "bytes": f.stat().st_size,
                    "sha256": _sha256(f),
                }
        full = {
            "schema_version": PHI_FORMATS[phi_format],
            "library_version": __version__,
            "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            **meta,
            "phi_format": phi_format,
            "languages": list(languages),
            "vocabulary_sizes": {lang: len(lm.terms) for lang, lm in languages.items()},
            "files": files,
        }
        if shared_arrays:
            full["shared_arrays"] = sorted(shared_arrays)
        (tmp / MODEL_JSON).write_text(json.dumps(full, indent=2, sort_keys=True, default=str))
    return full


#: ``model.json`` keys :func:`save_model` writes itself (from the arrays and the library).
_WRITTEN_BY_SAVE = (
    "schema_version",
    "library_version",
    "phi_format",
    "languages",
    "vocabulary_sizes",
    "files",
    "shared_arrays",
)


def republish_model(source: str | os.PathLike, path: str | os.PathLike, extra: dict) -> dict:
    """Write the dense or topic-word model at ``source`` again at ``path`` with ``extra``
    added to its ``model.json`` (e.g. the train stage's ``tuning`` record for the candidate
    it chose); the new ``model.json``. The arrays and vocabularies are written from what was
    read, so their files, checksums and :func:`model_fingerprint` are the source's."""
    meta, maps = load_model_files(source)
    shared = load_shared_arrays(source, meta)
    kept = {k: v for k, v in meta.items() if k not in _WRITTEN_BY_SAVE}
    return save_model(path, maps, {**kept, **extra}, shared=shared)


def model_fingerprint(meta: dict) -> str:
    """A short identity of a model: the SHA-256 of its files' checksums (from ``model.json``).

    Two model directories have the same fingerprint exactly when their arrays and
    vocabularies are byte for byte the same (a retrained model with different numbers gets a
    new one; a copied or moved model keeps it). Datasets and indexes derived from a model
    record it, so a reader can tell whether they were made by the model it holds.
    """
    files = {rel: info.get("sha256") for rel, info in sorted(meta.get("files", {}).items())}
    blob = json.dumps({"r": meta.get("r"), "files": files}, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def model_directory(path: str | os.PathLike) -> Path:
    """The local directory holding the model at ``path``: ``path`` itself on a local disk,
    else a verified copy in the local cache (:func:`pipeline.io.storage.local_directory`;
    inside a Spark job any store the cluster's Hadoop configuration resolves)."""
    try:
        return local_directory(path, MODEL_JSON)
    except FileNotFoundError:  # a remote path only: a local one is returned as it is
        raise ModelError(
            f"model {os.fspath(path)} does not exist or has no {MODEL_JSON}. Fix: train one "
            "(python jobs/train.py ...) or point at a model directory."
        ) from None
    except OSError as exc:
        raise DamagedModelError(
            f"model {os.fspath(path)} could not be copied whole from its store ({exc})"
        ) from exc


def read_model_json(path: str | os.PathLike) -> dict:
    """Read and check ``model.json`` (existence, JSON, schema version)."""
    path = model_directory(path)
    meta_path = path / MODEL_JSON
    if not meta_path.is_file():
        what = "does not exist" if not path.exists() else f"has no {MODEL_JSON}"
        raise ModelError(
            f"model {path} {what}. Fix: train one (python jobs/train.py ...) "
            "or point at a model directory."
        )
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise _damaged(path, MODEL_JSON, f"is not valid JSON ({exc})") from exc
    version = meta.get("schema_version")
    if version not in SUPPORTED_SCHEMA_VERSIONS:
        raise ModelError(
            f"{meta_path}: schema_version {version!r} is not supported (this library reads "
            f"{', '.join(map(str, SUPPORTED_SCHEMA_VERSIONS))}); re-export the model with this "
            "version"
        )
    for key in ("languages", "r", "files"):
        if key not in meta:
            raise ModelError(f"{meta_path} lacks {key!r}; the model is corrupted")
    phi_format = meta.get("phi_format", "dense")
    if phi_format not in PHI_FORMATS:
        raise ModelError(
            f"{meta_path}: phi_format {phi_format!r} is not one of {sorted(PHI_FORMATS)}; the "
            "model was written by a newer library or is corrupted"
        )
    if PHI_FORMATS[phi_format] > version:
        raise ModelError(
            f"{meta_path}: phi_format {phi_format!r} needs schema_version "
            f"{PHI_FORMATS[phi_format]}, the file says {version}; the model is corrupted"
        )
    if phi_format == "topic_word":
        check_folding_in(meta.get("folding_in"), str(meta_path))
    return meta


def check_folding_in(settings: Any, where: str) -> dict:
    """The ``folding_in`` section of a topic-word model: ``steps`` (int >= 1) and
    ``topic_prior`` (number >= 1); ModelError naming ``where`` otherwise."""
    ok = isinstance(settings, dict)
    steps = settings.get("steps") if ok else None
    prior = settings.get("topic_prior") if ok else None
    ok = ok and isinstance(steps, int) and not isinstance(steps, bool) and steps >= 1
    ok = ok and isinstance(prior, int | float) and not isinstance(prior, bool) and prior >= 1
    if not ok:
        raise ModelError(
            f"{where}: a topic-word model needs folding_in = {{steps: int >= 1, topic_prior: "
            f"number >= 1}}; got {settings!r}. The model is corrupted"
        )
    return settings


def load_model_files(
    path: str | os.PathLike, *, verify: bool = True, languages: list[str] | None = None
) -> tuple[dict, dict]:
    """Load a model directory: returns (``model.json`` dict, ``{lang: LanguageMap}``).

    With ``verify`` every file's size and SHA-256 are checked against ``model.json``
    (sizes are always checked). ``languages`` loads only those languages.
    """
    path = model_directory(path)
    meta = read_model_json(path)
    if languages is None:
        languages = list(meta["languages"])
    unknown = [lang for lang in languages if lang not in meta["languages"]]
    if unknown:
        raise ModelError(
            f"language(s) {unknown} are not in the model at {path}; its languages are: "
            f"{', '.join(meta['languages'])}"
        )
    verify_files(path, meta, languages, checksums=verify)
    out: dict[str, LanguageMap] = {}
    for lang in languages:
        d = path / "languages" / lang
        try:
            if meta.get("phi_format", "dense") == "selection":
                phi = _selection_map(np.load(d / "phi_index.npy", allow_pickle=False), meta)
            else:
                phi = np.load(d / "phi.npy", allow_pickle=False)
            mean = (
                np.load(d / "mean.npy", allow_pickle=False) if (d / "mean.npy").exists() else None
            )
            offset = (
                np.load(d / "offset.npy", allow_pickle=False)
                if (d / "offset.npy").exists()
                else None
            )
            vocab = pq.read_table(d / "vocabulary.parquet")
        except (OSError, ValueError) as exc:
            raise _damaged(
                path, f"languages/{lang}/", f"cannot be read ({type(exc).__name__}: {exc})"
            ) from exc
        if vocab.column("term_index").to_pylist() != list(range(vocab.num_rows)):
            raise ModelError(f"{d / 'vocabulary.parquet'}: term_index is not 0..p-1 in order")
        lm = LanguageMap(
            terms=vocab.column("term").combine_chunks(),
            idf=vocab.column("idf").to_numpy().astype(np.float32),
            df=vocab.column("df").to_numpy().astype(np.int64),
            phi=phi,
            mean=mean,
            offset=offset,
        )
        lm.validate(lang, int(meta["r"]))
        if meta.get("phi_format") == "topic_word":
            lm.validate_topic_words(lang)
        out[lang] = lm
    return meta, out


def _selection_map(index: np.ndarray, meta: dict) -> sp.csr_matrix:
    """The one-hot Φ_lᵀ (CSR, float32, shape (p_l, r)) from its column indices."""
    r = int(meta["r"])
    if index.ndim != 1 or index.dtype.kind not in "iu":
        raise ModelError(
            f"phi_index has shape {index.shape} and dtype {index.dtype}; expected integers (p,)"
        )
    if index.size and (index.min() < 0 or index.max() >= r):
        raise ModelError(f"phi_index has columns outside 0..r-1 (r={r}); the model is corrupted")
    p = index.shape[0]
    return sp.csr_matrix(
        (np.ones(p, dtype=np.float32), index.astype(np.int64), np.arange(p + 1)), shape=(p, r)
    )


def load_shared_arrays(
    path: str | os.PathLike, meta: dict | None = None, *, verify: bool = True
) -> dict[str, np.ndarray]:
    """The model-wide arrays of the model at ``path`` (``{}`` for a model without any).

    Each file is checked against ``model.json`` (size; with ``verify`` the SHA-256) and
    loaded without pickle; Cr5's Λ and Q are checked for shape (r,) and (r, r).
    """
    path = model_directory(path)
    if meta is None:
        meta = read_model_json(path)
    out: dict[str, np.ndarray] = {}
    for name in meta.get("shared_arrays", []):
        rel = f"{SHARED_DIR}/{name}.npy"
        info = meta["files"].get(rel)
        if info is None:
            raise ModelError(
                f"{path / MODEL_JSON} lists shared array {name!r} but no file {rel}; "
                "the model is corrupted"
            )
        _check_file(path, rel, info, checksums=verify)
        try:
            out[name] = np.load(path / rel, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise _damaged(path, rel, f"cannot be read ({type(exc).__name__}: {exc})") from exc
    try:
        return _check_shared(out, int(meta["r"]))
    except ModelError as exc:
        raise ModelError(f"model {path}: {exc}; the model is corrupted") from exc


def _producer(path: Path) -> str:
    """The stage that writes the model at ``path`` (named in a damaged model's message)."""
    parent = path.parent.name
    if parent in ("lambda_models", "baseline_models"):
        return "evaluate"
    if parent == "wordmap_models":
        return "translate_words"
    return "train"


def _damaged(path: Path, rel: str, what: str, *, reading: bool = True) -> DamagedModelError:
    """A damaged model file: one paragraph naming the model, the file and the fix."""
    text = damaged_message(
        dataset="model",
        path=str(path),
        producer=_producer(path),
        file=rel,
        what=what,
        reading=reading,
    )
    return DamagedModelError(text.replace("dataset 'model'", "model", 1))


def _check_file(
    root: Path, rel: str, info: dict[str, Any], *, checksums: bool, reading: bool = True
) -> None:
    f = root / rel
    if not f.is_file():
        raise _damaged(root, rel, "is missing: the model is incomplete", reading=reading)
    size = f.stat().st_size
    if size != info["bytes"]:
        raise _damaged(
            root,
            rel,
            f"has {size} bytes where model.json recorded {info['bytes']} (it was truncated or "
            "replaced after it was written)",
            reading=reading,
        )
    if checksums and _sha256(f) != info["sha256"]:
        raise _damaged(
            root,
            rel,
            "fails its SHA-256 check: its bytes changed after it was written (a disk, memory "
            "or copy error)",
            reading=reading,
        )


def verify_files(
    path: str | os.PathLike,
    meta: dict,
    languages: list[str],
    *,
    checksums: bool = True,
    reading: bool = True,
) -> None:
    """Check the files of ``languages`` (and shared files) against ``model.json``.

    Sizes are always compared; with ``checksums`` the SHA-256 too. Raises
    :class:`~pipeline.errors.DamagedModelError`, whose message says the stage stops when
    ``reading`` (a stage or an API call is about to read the model).
    """
    path = model_directory(path)
    prefixes = tuple(f"languages/{lang}/" for lang in languages)
    for rel, info in meta["files"].items():
        if rel.startswith("languages/") and not rel.startswith(prefixes):
            continue
        _check_file(path, rel, info, checksums=checksums, reading=reading)


#: The directory of an encoder model's (T-LASER, cT-LASER) weights and tokenizer.
ENCODER_DIR = "encoder"


def save_encoder_model(
    path: str | os.PathLike,
    meta: dict,
    arrays: dict[str, np.ndarray],
    blobs: dict[str, bytes],
) -> dict:
    """Write an encoder model directory atomically; returns the ``model.json`` content.

    ``arrays``: the network's weights (``encoder/<name>.npy``, float32, loaded without
    pickle); ``blobs``: opaque files such as the sentencepiece model
    (``encoder/<name>``). ``meta`` must hold ``r``, ``languages`` and ``method``; it is
    completed like :func:`save_model`'s (schema version, creation time, checksums).
    """
    path = os.fspath(path)
    if not meta.get("languages"):
        raise ModelError("a model needs at least one language")
    with staged_directory(path) as tmp:
        d = tmp / ENCODER_DIR
        d.mkdir(parents=True)
        for name, arr in arrays.items():
            np.save(d / f"{name}.npy", np.ascontiguousarray(arr, dtype=np.float32))
        for name, data in blobs.items():
            (d / name).write_bytes(data)
        files = {
            f.relative_to(tmp).as_posix(): {"bytes": f.stat().st_size, "sha256": _sha256(f)}
            for f in sorted(tmp.rglob("*"))
            if f.is_file()
        }
        full = {
            "schema_version": PHI_FORMATS["encoder"],
            "library_version": __version__,
            "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            **meta,
            "phi_format": "encoder",
            "encoder_arrays": sorted(arrays),
            "encoder_blobs": sorted(blobs),
            "files": files,
        }
        (tmp / MODEL_JSON).write_text(json.dumps(full, indent=2, sort_keys=True, default=str))
    return full


def load_encoder_files(
    path: str | os.PathLike, *, verify: bool = True
) -> tuple[dict, dict[str, np.ndarray], dict[str, bytes]]:
    """Read an encoder model directory: (``model.json``, weights, blobs), every file checked
    against ``model.json`` (sizes always, SHA-256 with ``verify``)."""
    path = model_directory(path)
    meta = read_model_json(path)
    if meta.get("phi_format") != "encoder":
        raise ModelError(f"the model at {path} is not an encoder model (phi_format)")
    for rel, info in meta["files"].items():
        _check_file(path, rel, info, checksums=verify)
    d = path / ENCODER_DIR
    try:
        arrays = {n: np.load(d / f"{n}.npy", allow_pickle=False) for n in meta["encoder_arrays"]}
        blobs = {n: (d / n).read_bytes() for n in meta["encoder_blobs"]}
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read the encoder files in {d}: {exc}") from exc
    return meta, arrays, blobs
