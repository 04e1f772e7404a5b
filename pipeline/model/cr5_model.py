"""A trained Cr5 model: load it, embed texts, inspect word vectors. No Spark needed.

The embedding path is the one used everywhere (evaluation, the Spark embedding job):
tokenise with the model's tokeniser settings, count in-vocabulary terms, weight by the
model's IDF, L2-normalise, multiply by Φ_lᵀ. A text with no in-vocabulary word embeds
as the zero vector; :meth:`Cr5Model.embed_with_counts` also returns how many known
terms each text had, so callers can flag those rows.

A model with ``phi_format == "selection"`` (the untranslated baseline) maps into the union
vocabulary of its languages (r = |U|, often 10⁵–10⁶) and embeds into sparse rows: its
``embed``/``embed_with_counts`` return a scipy.sparse csr_matrix instead of an ndarray
(:attr:`Cr5Model.is_sparse`).

A model with ``phi_format == "topic_word"`` (JPLSA, CPLSA) embeds a text into its topic
distribution: the in-vocabulary term counts (no IDF, no normalisation) folded in with the
language's topic-word matrix (:func:`pipeline.baselines.topics.fold_in`, the settings of
``model.json``'s ``folding_in``), a nonnegative vector summing to 1 (zero for a text with
no known word); :attr:`Cr5Model.similarity` is then ``"l1"``, the distance such vectors are
compared by.

Word vectors (:meth:`Cr5Model.word_vectors`) come in two variants: ``"phi"``, the rows of
the orthonormalised map Φ_lᵀ (what documents are embedded with), and ``"phi_star"``, the rows
of the map before Eq. 15's orthonormalisation, Φ_l*ᵀ = Â⁻¹ C P restricted to language l,
rebuilt exactly as Φ_lᵀ Λ^{1/2} Qᵀ from the Λ and Q of Φ*Φ*ᵀ = QΛQᵀ that training saves
(a model saved without them has only the ``"phi"`` variant).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import scipy.sparse as sp

from pipeline.baselines.topics import fold_in
from pipeline.errors import ModelError
from pipeline.features.weighting import LanguageVocabulary, count_matrix, tfidf_matrix
from pipeline.methods.registry import find_method
from pipeline.model.encode import EncodeMixin
from pipeline.model.format import (
    GRAM_EIGENVALUES,
    GRAM_EIGENVECTORS,
    LanguageMap,
    load_model_files,
    load_shared_arrays,
    model_directory,
    read_model_json,
)
from pipeline.text.languages import canonical_lang
from pipeline.text.tokenizer import Tokenizer


class Cr5Model(EncodeMixin):
    """Per-language linear maps into one crosslingual space.

    Use :meth:`load`; :meth:`embed` returns the model's own rows (sparse for selection
    models), :meth:`~pipeline.model.encode.EncodeMixin.encode` dense float32 vectors in
    sentence-transformers' convention. Languages are read from disk on first use, so an
    executor that embeds only German documents loads only German's Φ.
    """

    def __init__(
        self,
        meta: dict,
        maps: dict[str, LanguageMap],
        *,
        path: Path | None = None,
        verify: bool = True,
    ) -> None:
        self.meta = meta
        self.path = path
        self._verify = verify
        self._maps = dict(maps)
        self._vocab: dict[str, LanguageVocabulary] = {}
        self._lock = threading.Lock()
        self._phi_star_t: np.ndarray | None = None  # Λ^{1/2} Qᵀ, read on first use
        text = meta.get("preprocessing", {}).get("text", {})
        self.tokenizer = Tokenizer.from_settings(text)

    @classmethod
    def load(cls, path: str | os.PathLike, *, verify: bool = True, lazy: bool = False) -> Cr5Model:
        """Load a model directory (see :mod:`pipeline.model.format`).

        ``verify`` checks every file's SHA-256; ``lazy`` defers reading each language's
        arrays to its first use (``model.json`` is always read and checked at once). A
        model on another store is read from its verified local copy
        (:func:`~pipeline.model.format.model_directory`).
        """
        path = model_directory(path)
        if lazy:
            return cls(read_model_json(path), {}, path=path, verify=verify)
        meta, maps = load_model_files(path, verify=verify)
        return cls(meta, maps, path=path, verify=verify)

    @property
    def languages(self) -> list[str]:
        return list(self.meta["languages"])

    @property
    def is_sparse(self) -> bool:
        """True for selection models (untranslated): ``embed`` returns a csr_matrix."""
        return self.meta.get("phi_format", "dense") == "selection"

    @property
    def is_topic_model(self) -> bool:
        """True for topic-word models (JPLSA, CPLSA): texts embed by folding-in."""
        return self.meta.get("phi_format", "dense") == "topic_word"

    @property
    def similarity(self) -> str:
        """The similarity the model's method defines for its vectors: ``"l1"`` (topic
        distributions, compared by minus their L1 distance) or ``"cosine"``."""
        return str(self.meta.get("similarity", "cosine"))

    @property
    def dim(self) -> int:
        """r, the embedding dimension."""
        return int(self.meta["r"])

    def _map(self, lang: str) -> LanguageMap:
        lang = canonical_lang(lang)
        if lang not in self.meta["languages"]:
            raise ModelError(
                f"language {lang!r} is not in this model; its languages are: "
                f"{', '.join(self.languages)}"
            )
        with self._lock:
            if lang not in self._maps:
                if self.path is None:
                    raise ModelError(f"language {lang!r} was not loaded and the model has no path")
                self._maps.update(
                    load_model_files(self.path, verify=self._verify, languages=[lang])[1]
                )
            if lang not in self._vocab:
                lm = self._maps[lang]
                self._vocab[lang] = LanguageVocabulary(lm.terms, lm.idf)
        return self._maps[lang]

    def tfidf(self, texts: Sequence[str | None], lang: str) -> sp.csr_matrix:
        """TF-IDF rows of ``texts``: csr_matrix of shape (n_texts, p_l), float32."""
        lang = canonical_lang(lang)
        self._map(lang)  # loads the language and its vocabulary
        arr = texts if isinstance(texts, pa.Array) else pa.array(list(texts), type=pa.string())
        return tfidf_matrix(arr, self.tokenizer, self._vocab[lang])

    def counts(self, texts: Sequence[str | None], lang: str) -> sp.csr_matrix:
        """In-vocabulary term counts of ``texts``: csr_matrix of shape (n_texts, p_l), float32."""
        lang = canonical_lang(lang)
        self._map(lang)
        arr = texts if isinstance(texts, pa.Array) else pa.array(list(texts), type=pa.string())
        return count_matrix(arr, self.tokenizer, self._vocab[lang])

    def embed_with_counts(
        self, texts: Sequence[str | None], lang: str
    ) -> tuple[np.ndarray, np.ndarray]:
        """Embed texts; also return the number of distinct known terms of each.

        Returns
        -------
        vectors : ndarray of float32, shape (n_texts, r); zero rows where counts == 0
            (a csr_matrix of float32 of the same shape for sparse models)
        counts : ndarray of int64, shape (n_texts,)
        """
        if isinstance(texts, str):
            raise TypeError("embed takes a sequence of texts; wrap a single text in a list")
        if self.is_topic_model:
            x = self.counts(texts, lang)
            settings = self.meta["folding_in"]
            theta = fold_in(
                x,
                self._map(lang).phi,
                steps=int(settings["steps"]),
                topic_prior=float(settings["topic_prior"]),
            )
            return theta.astype(np.float32), np.diff(x.indptr).astype(np.int64)
        x = self.tfidf(texts, lang)
        lm = self._map(lang)
        counts = np.diff(x.indptr).astype(np.int64)
        if sp.issparse(lm.phi):
            return sp.csr_matrix(x @ lm.phi, dtype=np.float32), counts
        vectors = np.asarray(x @ lm.phi, dtype=np.float32)
        if lm.offset is not None:  # a text with no known term stays the zero vector
            vectors[counts > 0] -= lm.offset
        return vectors, counts

    def embed(self, texts: Sequence[str | None], lang: str) -> np.ndarray:
        """Embed texts in language ``lang``: ndarray of float32, shape (n_texts, r).

        (csr_matrix for sparse models, see :attr:`is_sparse`.)
        """
        return self.embed_with_counts(texts, lang)[0]

    def phi_star_transform(self) -> np.ndarray:
        """``Λ^{1/2} Qᵀ``: ndarray of shape (r, r), float64, with ``Φ_l*ᵀ = Φ_lᵀ Λ^{1/2} Qᵀ``.

        Raises ModelError for a model that is not a Cr5 model or that was saved without
        Λ and Q (retrain it to get them).
        """
        method = self.meta.get("method", "cr5")
        spec = find_method(method)
        if spec is None or not spec.phi_star or self.is_sparse:
            raise ModelError(
                f"the Φ* word vectors exist only for Cr5 models; the model at {self.path} is "
                f"a {method!r} model"
            )
        with self._lock:
            if self._phi_star_t is None:
                if self.path is None:
                    raise ModelError("the model has no path to read Λ and Q of Φ*Φ*ᵀ from")
                shared = load_shared_arrays(self.path, self.meta, verify=self._verify)
                if GRAM_EIGENVALUES not in shared:
                    raise ModelError(
                        f"the model at {self.path} was saved without Λ and Q of Φ*Φ*ᵀ = QΛQᵀ "
                        f"(shared/{GRAM_EIGENVALUES}.npy, shared/{GRAM_EIGENVECTORS}.npy), "
                        "so its Φ* word vectors cannot be rebuilt. Fix: retrain it with this "
                        "version (python jobs/train.py ...), or use the Φ rows (drop "
                        "cr5_phi_star from words.methods)"
                    )
                lam, q = shared[GRAM_EIGENVALUES], shared[GRAM_EIGENVECTORS]
                self._phi_star_t = np.sqrt(lam)[:, None] * q.T
        return self._phi_star_t

    def word_vectors(self, lang: str, variant: str = "phi") -> tuple[list[str], np.ndarray]:
        """The words of ``lang`` and their vectors: (p_l,), (p_l, r).

        ``variant``: ``"phi"`` (rows of Φ_lᵀ, float32 as stored; sparse for selection
        models) or ``"phi_star"`` (rows of Φ_l*ᵀ = Φ_lᵀ Λ^{1/2} Qᵀ, float32; Cr5 models
        saved with Λ and Q only, see :meth:`phi_star_transform`).
        """
        if variant not in ("phi", "phi_star"):
            raise ModelError(f"word vector variant must be 'phi' or 'phi_star'; got {variant!r}")
        transform = self.phi_star_transform() if variant == "phi_star" else None
        lm = self._map(lang)
        if transform is None:
            return lm.terms.to_pylist(), lm.phi
        return lm.terms.to_pylist(), (lm.phi @ transform).astype(np.float32)
