"""The one tokeniser, used by every stage and by the embedding API.

Tokens are maximal runs of letters, digits and combining marks (Unicode classes
L, N, M) after Unicode normalisation (NFKC by default) and lower-casing; every
other character separates tokens. Han ideographs and kana are emitted one
character per token, because Chinese and Japanese are written without spaces
and a run of them is a phrase, not a word. Apostrophes separate (``don't`` gives
``don`` and ``t``), as in most bag-of-words IR tokenisers.

The work is done by Arrow compute kernels (C++, RE2) on whole columns, so a batch
of documents is tokenised without a Python loop over documents; a single text goes
through exactly the same kernels, which is what makes inference identical to
training.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.config import TEXT_DEFAULTS as _T
from pipeline.config import TextConfig

_CJK = r"[\p{Han}\p{Hiragana}\p{Katakana}]"
_SEPARATOR = r"[^\p{L}\p{N}\p{M}]+"


@dataclass(frozen=True)
class Tokenizer:
    """Unicode-aware word tokeniser (see module docstring).

    Parameters mirror :class:`pipeline.config.TextConfig`. Instances are small and
    picklable, so they ship to Spark executors as they are.
    """

    normalization: str = _T.normalization
    lowercase: bool = _T.lowercase
    split_cjk: bool = _T.split_cjk
    min_token_length: int = _T.min_token_length

    @classmethod
    def from_config(cls, cfg: TextConfig) -> Tokenizer:
        return cls(cfg.normalization, cfg.lowercase, cfg.split_cjk, cfg.min_token_length)

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> Tokenizer:
        """From a model's recorded ``text`` settings; a missing key takes today's default."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in settings.items() if k in names})

    def flat_tokens(self, texts: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, np.ndarray]:
        """Tokenise a column of texts into one flat token array.

        Parameters
        ----------
        texts : pyarrow string array of length n_docs (nulls count as empty)

        Returns
        -------
        tokens : pyarrow string array of shape (n_tokens,)
        doc_of_token : ndarray of int64, shape (n_tokens,)
            Position in ``texts`` of the document each token came from (non-decreasing).
        """
        if isinstance(texts, pa.ChunkedArray):
            texts = texts.combine_chunks()
        if not (pa.types.is_string(texts.type) or pa.types.is_large_string(texts.type)):
            texts = texts.cast(pa.string())
        t = texts.fill_null("")
        if self.normalization != "none":
            t = pc.utf8_normalize(t, form=self.normalization)
        if self.lowercase:
            t = pc.utf8_lower(t)
            # Greek final sigma folds to sigma, as str.casefold does: "ΣΟΦΟΣ" and
            # "σοφος" must be one word.
            t = pc.replace_substring(t, pattern="ς", replacement="σ")
        if self.split_cjk:
            t = pc.replace_substring_regex(t, pattern=_CJK, replacement=" \\0 ")
        lists = pc.split_pattern_regex(t, pattern=_SEPARATOR)
        flat = pc.list_flatten(lists)
        parents = pc.list_parent_indices(lists).to_numpy(zero_copy_only=False)
        keep = pc.greater_equal(pc.utf8_length(flat), self.min_token_length)
        flat = pc.filter(flat, keep)
        parents = parents[keep.to_numpy(zero_copy_only=False)]
        return flat, parents.astype(np.int64, copy=False)

    def tokenize_arrow(self, texts: pa.Array | pa.ChunkedArray) -> pa.ListArray:
        """Tokenise a column of texts; returns a list<string> array of length n_docs."""
        flat, parents = self.flat_tokens(texts)
        n = len(texts)
        offsets = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(np.bincount(parents, minlength=n), out=offsets[1:])
        return pa.ListArray.from_arrays(pa.array(offsets), flat)

    def tokenize(self, text: str) -> list[str]:
        """Tokenise one text (same kernels as :meth:`tokenize_arrow`)."""
        return self.tokenize_arrow(pa.array([text], type=pa.string()))[0].as_py()


def distinct_tokens_per_doc(
    tokens: pa.Array, doc_of_token: np.ndarray, n_docs: int
) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """Deduplicate tokens within each document, vectorised.

    Returns
    -------
    distinct : pyarrow string array, the distinct tokens of every document, grouped by doc
    doc_of_distinct : ndarray of int64, the document of each distinct token (sorted)
    n_unique : ndarray of int64, shape (n_docs,), number of distinct tokens per document
    """
    if len(tokens) == 0:
        return tokens, doc_of_token, np.zeros(n_docs, dtype=np.int64)
    encoded = (
        pc.dictionary_encode(tokens).combine_chunks()
        if isinstance(tokens, pa.ChunkedArray)
        else pc.dictionary_encode(tokens)
    )
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    n_codes = len(encoded.dictionary)
    keys = np.unique(doc_of_token * n_codes + codes)
    docs = keys // n_codes
    distinct = encoded.dictionary.take(pa.array(keys % n_codes))
    return distinct, docs, np.bincount(docs, minlength=n_docs).astype(np.int64)
