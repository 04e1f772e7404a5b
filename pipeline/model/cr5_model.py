"""A trained Cr5 model: load it, embed texts, inspect word vectors. No Spark needed.

The embedding path is the one used everywhere (evaluation, the Spark embedding job):
tokenise with the model's tokeniser settings, count in-vocabulary terms, weight by the
model's IDF, L2-normalise, multiply by Φ_lᵀ. A text with no in-vocabulary word embeds
as the zero vector; :meth:`Cr5Model.embed_with_counts` also returns how many known
terms each text had, so callers can flag those rows.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import scipy.sparse as sp

from pipeline.errors import ModelError
from pipeline.features.weighting import LanguageVocabulary, tfidf_rows
from pipeline.model.format import LanguageMap, load_model_files
from pipeline.text.tokenizer import Tokenizer


class Cr5Model:
    """Per-language linear maps into one crosslingual space.

    Use :meth:`load`; the constructor takes already-loaded parts.
    """

    def __init__(self, meta: dict, maps: dict[str, LanguageMap]) -> None:
        self.meta = meta
        self._maps = maps
        text = meta.get("preprocessing", {}).get("text", {})
        self.tokenizer = Tokenizer(
            normalization=text.get("normalization", "NFKC"),
            lowercase=text.get("lowercase", True),
            split_cjk=text.get("split_cjk", True),
            min_token_length=text.get("min_token_length", 1),
        )
        self._vocab = {lang: LanguageVocabulary(m.terms, m.idf) for lang, m in maps.items()}

    @classmethod
    def load(cls, path: str | os.PathLike, *, verify: bool = True) -> Cr5Model:
        """Load and verify a model directory (see :mod:`pipeline.model.format`)."""
        meta, maps = load_model_files(path, verify=verify)
        return cls(meta, maps)

    @property
    def languages(self) -> list[str]:
        return list(self._maps)

    @property
    def dim(self) -> int:
        """r, the embedding dimension."""
        return int(self.meta["r"])

    def _map(self, lang: str) -> LanguageMap:
        if lang not in self._maps:
            raise ModelError(
                f"language {lang!r} is not in this model; its languages are: "
                f"{', '.join(self.languages)}"
            )
        return self._maps[lang]

    def tfidf(self, texts: Sequence[str | None], lang: str) -> sp.csr_matrix:
        """TF-IDF rows of ``texts``: csr_matrix of shape (n_texts, p_l), float32."""
        lm = self._map(lang)
        arr = pa.array(list(texts), type=pa.string())
        tokens, doc_of = self.tokenizer.flat_tokens(arr)
        indptr, indices, values = tfidf_rows(tokens, doc_of, len(arr), self._vocab[lang])
        return sp.csr_matrix((values, indices, indptr), shape=(len(arr), len(lm.terms)))

    def embed_with_counts(
        self, texts: Sequence[str | None], lang: str
    ) -> tuple[np.ndarray, np.ndarray]:
        """Embed texts; also return the number of distinct known terms of each.

        Returns
        -------
        vectors : ndarray of float32, shape (n_texts, r); zero rows where counts == 0
        counts : ndarray of int64, shape (n_texts,)
        """
        if isinstance(texts, str):
            raise TypeError("embed takes a sequence of texts; wrap a single text in a list")
        x = self.tfidf(texts, lang)
        vectors = np.asarray(x @ self._map(lang).phi, dtype=np.float32)
        return vectors, np.diff(x.indptr).astype(np.int64)

    def embed(self, texts: Sequence[str | None], lang: str) -> np.ndarray:
        """Embed texts in language ``lang``: ndarray of float32, shape (n_texts, r)."""
        return self.embed_with_counts(texts, lang)[0]

    def word_vectors(self, lang: str) -> tuple[list[str], np.ndarray]:
        """The words of ``lang`` and their vectors (rows of Φ_lᵀ): (p_l,), (p_l, r)."""
        lm = self._map(lang)
        return lm.terms.to_pylist(), lm.phi
