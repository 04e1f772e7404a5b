"""Import the original Cr5 release (per-language ``.txt.gz`` word vectors) as a model.

The original format is one word per line followed by its r values, space-separated,
no header. It lacks what our embedding path needs besides Φ:

- IDF: not in the files. By default every word gets idf 1 (documents are embedded
  from L2-normalised term counts). Pass ``idf_from`` (a ``vocabulary`` dataset or any
  Parquet with ``lang, term, idf``) to use a corpus' IDF; words it does not know get the
  largest IDF of that language (they are rarer than anything it saw).
- Tokenisation: words are mapped through our tokeniser (NFKC, lower-case); a word that
  does not come out as exactly one token can never be matched and is dropped; two words
  that normalise to the same token keep the first. Both are counted in the report.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from pipeline.errors import InputDataError
from pipeline.model.format import LanguageMap, save_model
from pipeline.text.tokenizer import Tokenizer

log = logging.getLogger(__name__)


def _open(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")


def read_word_vectors(path: str | os.PathLike) -> tuple[pa.Array, np.ndarray]:
    """Parse one original-format file: (words (p,), vectors float32 (p, r))."""
    path = Path(path)
    try:
        with _open(path) as f:
            first = f.readline().decode("utf-8").rstrip("\n")
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise InputDataError(f"{path}: cannot read the first line ({exc})") from exc
    fields = first.split(" ")
    trailing = fields and fields[-1] == ""
    if trailing:
        fields = fields[:-1]
    r = len(fields) - 1
    if r < 1:
        raise InputDataError(
            f"{path}: line 1 has no vector values; expected '<word> <v1> ... <vr>' per line"
        )
    names = ["word"] + [f"v{i}" for i in range(r)] + (["_empty"] if trailing else [])
    types = {"word": pa.string(), **{f"v{i}": pa.float32() for i in range(r)}}
    try:
        with _open(path) as f:
            table = pacsv.read_csv(
                f,
                read_options=pacsv.ReadOptions(column_names=names, block_size=1 << 24),
                parse_options=pacsv.ParseOptions(delimiter=" ", quote_char=False),
                convert_options=pacsv.ConvertOptions(column_types=types),
            )
    except (pa.ArrowInvalid, OSError, EOFError) as exc:
        raise InputDataError(
            f"{path}: not in the original Cr5 format (every line '<word>' + {r} values, as on "
            f"line 1): {exc}"
        ) from exc
    vectors = np.column_stack([table.column(f"v{i}").to_numpy() for i in range(r)])
    if not np.isfinite(vectors).all():
        bad = int(np.flatnonzero(~np.isfinite(vectors).all(axis=1))[0])
        raise InputDataError(f"{path}: line {bad + 1} has a value that is not a finite number")
    return table.column("word").combine_chunks(), vectors.astype(np.float32, copy=False)


def _idf_table(idf_from: str | None) -> pa.Table | None:
    if not idf_from:
        return None
    table = pq.read_table(idf_from, columns=["lang", "term", "idf"])
    return table


def import_pretrained(
    files: dict[str, str | os.PathLike],
    out: str | os.PathLike,
    *,
    idf_from: str | None = None,
    tokenizer: Tokenizer | None = None,
) -> dict[str, Any]:
    """Convert original Cr5 word-vector files into a model directory at ``out``.

    Parameters
    ----------
    files : mapping lang -> path of ``<lang>.txt.gz`` (or uncompressed)
    out : model directory to write (atomically)
    idf_from : optional Parquet path with ``lang, term, idf`` (e.g. a vocabulary dataset)
    """
    tokenizer = tokenizer or Tokenizer()
    idf_table = _idf_table(idf_from)
    maps: dict[str, LanguageMap] = {}
    report: dict[str, Any] = {}
    r_seen: dict[str, int] = {}
    for lang, path in files.items():
        words, vectors = read_word_vectors(path)
        r_seen[lang] = vectors.shape[1]
        tokens = tokenizer.tokenize_arrow(words)
        single = pc.equal(pc.list_value_length(tokens), 1).to_numpy(zero_copy_only=False)
        normalised = pc.list_flatten(tokens.filter(pa.array(single)))
        keep_rows = np.flatnonzero(single)
        ids = pc.index_in(normalised, value_set=pc.unique(normalised)).to_numpy()
        first = np.sort(np.unique(ids, return_index=True)[1])
        terms = normalised.take(pa.array(first))
        phi = np.ascontiguousarray(vectors[keep_rows[first]])
        idf = np.ones(len(terms), dtype=np.float32)
        idf_note = "1 for every word (the original format has no IDF)"
        if idf_table is not None:
            sub = idf_table.filter(pc.equal(idf_table.column("lang"), lang))
            if sub.num_rows:
                pos = pc.index_in(terms, value_set=sub.column("term")).fill_null(-1).to_numpy()
                known = pos >= 0
                values = sub.column("idf").to_numpy().astype(np.float32)
                idf[:] = values.max()
                idf[known] = values[pos[known]]
                idf_note = f"from {idf_from}; {int((~known).sum())} words absent there get the max"
        h = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        report[lang] = {
            "file": str(path),
            "sha256": h,
            "words_in_file": len(words),
            "dropped_not_one_token": int((~single).sum()),
            "dropped_duplicate_after_normalisation": int(len(normalised) - len(first)),
            "terms": len(terms),
            "idf": idf_note,
        }
        maps[lang] = LanguageMap(
            terms=terms, idf=idf, df=np.full(len(terms), -1, np.int64), phi=phi, mean=None
        )
        log.info(
            "imported %s: %d words -> %d terms, r=%d",
            lang,
            len(words),
            len(terms),
            vectors.shape[1],
        )
    dims = set(r_seen.values())
    if len(dims) != 1:
        raise InputDataError(f"the files have different dimensions {r_seen}; one model needs one r")
    meta = {
        "method": "cr5-pretrained-import",
        "r": dims.pop(),
        "lam": None,
        "preprocessing": {
            "text": {
                "normalization": tokenizer.normalization,
                "lowercase": tokenizer.lowercase,
                "split_cjk": tokenizer.split_cjk,
                "min_token_length": tokenizer.min_token_length,
            },
            "idf": "see training.import",
            "row_norm": "l2",
            "center_at_inference": False,
        },
        "training": {"import": report},
    }
    save_model(out, maps, meta)
    return report
