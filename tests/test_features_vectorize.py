"""The per-language tokenise-and-vectorise loop shared by the tfidf rows and the grouped
corpus' count rows (pipeline/features/vectorize.py), without Spark."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest

from pipeline.features.vectorize import language_vocabularies, vectorize_by_language
from pipeline.features.weighting import count_rows, tfidf_rows
from pipeline.text.tokenizer import Tokenizer


def test_one_loop_for_counts_and_tfidf():
    shared = SimpleNamespace(
        value={
            "en": (pa.array(["cat", "dog"]), np.array([1.0, 2.0])),
            "de": (pa.array(["hund"]), np.array([0.5])),
        }
    )
    batch = pa.RecordBatch.from_pydict(
        {"lang": ["en", "de", "en"], "text": ["Cat dog cat", "Hund Katze", "bird"]}
    )
    counts = list(
        vectorize_by_language(iter([batch]), Tokenizer(), language_vocabularies(shared), count_rows)
    )
    assert [r.lang for r in counts] == ["en", "de"]
    en = counts[0]
    assert en.indices.to_pylist() == [[0, 1], []] and en.values.to_pylist() == [[2.0, 1.0], []]
    assert en.part.num_rows == 2 and en.values.type == pa.list_(pa.float32())
    assert counts[1].indices.to_pylist() == [[0]]
    tfidf = next(
        vectorize_by_language(iter([batch]), Tokenizer(), language_vocabularies(shared), tfidf_rows)
    )
    assert tfidf.indices.to_pylist() == [[0, 1], []]
    np.testing.assert_allclose(np.linalg.norm(tfidf.values.to_pylist()[0]), 1.0, rtol=1e-6)
    # a language without a vocabulary: empty rows for the tfidf stage, KeyError otherwise
    fr = pa.RecordBatch.from_pydict({"lang": ["fr"], "text": ["chat"]})
    lenient = language_vocabularies(shared, missing_is_empty=True)
    (rows,) = vectorize_by_language(iter([fr]), Tokenizer(), lenient, tfidf_rows)
    assert rows.indices.to_pylist() == [[]]
    with pytest.raises(KeyError):
        next(
            vectorize_by_language(
                iter([fr]), Tokenizer(), language_vocabularies(shared), count_rows
            )
        )
