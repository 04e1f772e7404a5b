"""Tokenise and vectorise documents language by language, on a Spark worker: the one loop
behind the ``tfidf`` stage's TF-IDF rows (:func:`pipeline.features.tfidf.tfidf_fn`) and the
grouped corpus' term-count rows (:func:`pipeline.training.groups.count_fn`).

A batch of documents is split by ``lang``; each language's texts are tokenised with the
model's tokeniser, and weighed against that language's vocabulary (``weigh``:
:func:`~pipeline.features.weighting.tfidf_rows` or
:func:`~pipeline.features.weighting.count_rows`) into sparse rows as Arrow lists.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.features.weighting import LanguageVocabulary
from pipeline.text.tokenizer import Tokenizer

__all__ = ["LanguageRows", "Weigh", "language_vocabularies", "vectorize_by_language"]

#: ``weigh(tokens, doc_of_token, n_docs, vocabulary) -> (indptr, indices, values)``.
Weigh = Callable[
    [pa.Array, np.ndarray, int, LanguageVocabulary], tuple[np.ndarray, np.ndarray, np.ndarray]
]


@dataclass(frozen=True)
class LanguageRows:
    """One language's documents of a batch, vectorised."""

    lang: str
    #: the batch's rows of ``lang``, in batch order
    part: pa.RecordBatch
    #: their tokens, flat, and the position in ``part`` each came from
    tokens: pa.Array
    doc_of: np.ndarray
    #: one sparse row per document: term indices (int32) and weights (float32)
    indices: pa.ListArray
    values: pa.ListArray


def language_vocabularies(
    vocabularies: Any, *, missing_is_empty: bool = False
) -> Callable[[str], LanguageVocabulary]:
    """``lang -> LanguageVocabulary`` from ``vocabularies``, whose ``.value`` holds
    ``{lang: (terms, idf)}`` (a Spark broadcast, unpacked once per language and Python
    worker). ``missing_is_empty``: a language without a vocabulary has the empty one (no
    term is in it) instead of raising KeyError."""
    cache: dict[str, LanguageVocabulary] = {}

    def vocab_of(lang: str) -> LanguageVocabulary:
        if lang not in cache:
            if missing_is_empty:
                empty = (pa.array([], pa.string()), np.zeros(0))
                cache[lang] = LanguageVocabulary(*vocabularies.value.get(lang, empty))
            else:
                cache[lang] = LanguageVocabulary(*vocabularies.value[lang])
        return cache[lang]

    return vocab_of


def vectorize_by_language(
    batches: Iterator[pa.RecordBatch],
    tokenizer: Tokenizer,
    vocab_of: Callable[[str], LanguageVocabulary],
    weigh: Weigh,
) -> Iterator[LanguageRows]:
    """Each batch's documents (columns ``lang`` and ``text``), one language at a time, in
    the order the languages first occur in the batch: tokenised and weighed by ``weigh``
    against ``vocab_of(lang)``."""
    for batch in batches:
        langs = batch.column("lang")
        for lang in pc.unique(langs).to_pylist():
            part = batch.filter(pc.equal(langs, lang))
            tokens, doc_of = tokenizer.flat_tokens(part.column("text"))
            indptr, indices, values = weigh(tokens, doc_of, part.num_rows, vocab_of(lang))
            offsets = pa.array(indptr)
            yield LanguageRows(
                lang=lang,
                part=part,
                tokens=tokens,
                doc_of=doc_of,
                indices=pa.ListArray.from_arrays(offsets, pa.array(indices, pa.int32())),
                values=pa.ListArray.from_arrays(offsets, pa.array(values, pa.float32())),
            )
