"""Word vector files: one directory per language, safe formats only (no pickle).

Layout of ``<dir>/<lang>/``: ``vectors.npy`` (float32, shape (n_words, d)), ``vocabulary.parquet``
(``word`` string, ``count`` int64, row i describes row i of the vectors; most frequent first) and
``meta.json`` (settings, sizes, and the size and SHA-256 of the two other files, checked on read
like a dataset's: :mod:`pipeline.io.integrity`). Each language directory is written to a
temporary sibling and renamed into place, so a reader never sees a half-written language.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.errors import DamagedDatasetError, DatasetNotFoundError, ModelError
from pipeline.io.integrity import damaged_message, file_checksums, verify_dataset
from pipeline.io.storage import join, local_directory, local_path, staged_directory

__all__ = ["WordVectors", "local_dir", "read_word_vectors", "write_word_vectors"]


class WordVectors:
    """Words (most frequent first), their counts and vectors of one language."""

    def __init__(self, words: list[str], counts: np.ndarray, vectors: np.ndarray) -> None:
        if vectors.ndim != 2 or vectors.shape[0] != len(words) or counts.shape != (len(words),):
            raise ModelError(
                f"word vectors: {len(words)} words, counts {counts.shape}, vectors {vectors.shape}"
            )
        self.words = words
        self.counts = counts
        self.vectors = vectors


def local_dir(where: str, key: str) -> str:
    """``where`` as the stores take it: a local path without ``file:``, or the URI as given
    (any store the session's Hadoop configuration resolves; ``key`` names the setting)."""
    del key  # every store works now; kept so callers still say which setting this is
    return local_path(where)


def write_word_vectors(root: str, lang: str, wv: WordVectors, meta: dict[str, Any]) -> str:
    """Write ``root/lang`` atomically (any store, :mod:`pipeline.io.storage`); returns its
    path."""
    final = join(root, lang)
    with staged_directory(final) as tmp:
        np.save(tmp / "vectors.npy", np.ascontiguousarray(wv.vectors, dtype=np.float32))
        pq.write_table(
            pa.table(
                {"word": pa.array(wv.words, pa.string()), "count": pa.array(wv.counts, pa.int64())}
            ),
            tmp / "vocabulary.parquet",
        )
        files = {f.name: f.stat().st_size for f in sorted(tmp.iterdir())}
        body = {
            **meta,
            "lang": lang,
            "n_words": len(wv.words),
            "dim": int(wv.vectors.shape[1]),
            "files": files,
            "checksums": file_checksums(str(tmp), files),
        }
        (tmp / "meta.json").write_text(json.dumps(body, indent=2, sort_keys=True, default=str))
    return final


def read_word_vectors(root: str, lang: str) -> WordVectors:
    """Read ``root/lang`` (see module docstring; a remote one through the local cache)."""
    try:
        d = local_directory(join(root, lang), "meta.json")
    except FileNotFoundError:
        d = None
    if d is None or not (d / "meta.json").exists():
        raise DatasetNotFoundError(
            f"no word vectors for {lang!r} under {root}; run the word_vectors stage "
            f"(jobs/word_vectors.py) with words.languages including {lang}, or import "
            f"fastText/MUSE vectors: python -m pipeline import-vec --out {root} "
            f"--lang {lang}=FILE.vec"
        )
    try:
        meta = json.loads((d / "meta.json").read_text(encoding="utf-8"))
    except ValueError as exc:
        raise DamagedDatasetError(
            damaged_message(
                dataset=f"word_vectors/{lang}",
                path=str(d),
                producer="word_vectors",
                file="meta.json",
                what=f"is not valid JSON ({exc})",
            )
        ) from None
    verify_dataset(
        str(d),
        meta,
        dataset=f"word_vectors/{lang}",
        producer="word_vectors",
        manifest_name="meta.json",
    )
    vectors = np.load(d / "vectors.npy", allow_pickle=False)
    table = pq.read_table(d / "vocabulary.parquet")
    return WordVectors(
        table.column("word").to_pylist(),
        table.column("count").to_numpy().astype(np.int64),
        vectors.astype(np.float32, copy=False),
    )
