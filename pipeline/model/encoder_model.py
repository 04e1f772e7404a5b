"""A trained T-LASER / cT-LASER encoder: load it, embed texts (needs PyTorch and
sentencepiece, the ``neural`` extra). No Spark.

The embedding path: clean whitespace, encode with the model's shared sentencepiece
vocabulary (at most ``max_tokens`` subwords), prepend the start tag, run the encoder in
batches, take its output at the start tag. A text with no subword (empty or None) embeds as
the zero vector with count 0, as a linear model's text with no known word does. The same
class serves the Python API, the Spark embed stage and the evaluation
(:func:`pipeline.model.loading.load_model`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from pipeline.errors import ModelError
from pipeline.model.encode import EncodeMixin
from pipeline.model.format import load_encoder_files, model_directory, read_model_json
from pipeline.text.languages import canonical_lang

__all__ = ["EncoderModel"]

#: The sentencepiece model's file name in the model directory.
SUBWORDS = "subwords.model"


class EncoderModel(EncodeMixin):
    """A neural encoder with the embedding interface of :class:`~pipeline.model.Cr5Model`
    (``embed``, ``embed_with_counts``, and ``encode`` from
    :class:`~pipeline.model.encode.EncodeMixin`)."""

    is_sparse = False

    def __init__(self, meta: dict, arrays: dict[str, np.ndarray], blobs: dict[str, bytes],
                 path: Path | None = None) -> None:  # fmt: skip
        from pipeline.neural.loop import import_torch
        from pipeline.neural.tlaser import EncoderSizes, SubwordVocabulary, build_module

        torch = import_torch()
        self.meta, self.path = meta, path
        enc = meta["encoder"]
        self.sizes = EncoderSizes(**enc["sizes"])
        self.batch_rows = int(enc.get("batch_rows", 64))
        self.vocabulary = SubwordVocabulary(blobs[SUBWORDS])
        self.module = build_module(self.sizes)
        self.module.load_state_dict({k: torch.from_numpy(v) for k, v in arrays.items()})
        self.module.eval()
        torch.set_num_threads(int(enc.get("threads", 1)))
        self._lock = threading.Lock()

    @classmethod
    def load(cls, path: str | os.PathLike, *, verify: bool = True, lazy: bool = False) -> Any:
        """Load the model directory at ``path`` (``lazy`` is accepted for the loaders'
        common signature; an encoder is loaded whole)."""
        path = model_directory(path)
        meta, arrays, blobs = load_encoder_files(path, verify=verify)
        return cls(meta, arrays, blobs, path)

    @property
    def languages(self) -> list[str]:
        return list(self.meta["languages"])

    @property
    def dim(self) -> int:
        return int(self.meta["r"])

    def embed_with_counts(
        self, texts: Sequence[str | None], lang: str
    ) -> tuple[np.ndarray, np.ndarray]:
        """Embed texts; also return each text's number of subwords.

        Returns
        -------
        vectors : ndarray of float32, shape (n_texts, d); zero rows where counts == 0
        counts : ndarray of int64, shape (n_texts,)
        """
        from pipeline.neural.loop import import_torch
        from pipeline.neural.tlaser import encode_texts

        if isinstance(texts, str):
            raise TypeError("embed takes a sequence of texts; wrap a single text in a list")
        lang = canonical_lang(lang)
        if lang not in self.languages:
            raise ModelError(
                f"language {lang!r} is not in this model; its languages are: "
                f"{', '.join(self.languages)}"
            )
        values = texts.to_pylist() if isinstance(texts, pa.Array) else list(texts)
        ids = self.vocabulary.encode(values, self.sizes.max_tokens)
        counts = np.array([x.size for x in ids], dtype=np.int64)
        with self._lock:
            vectors = encode_texts(import_torch(), self.module, ids, self.batch_rows)
        vectors[counts == 0] = 0.0
        return vectors, counts

    def embed(self, texts: Sequence[str | None], lang: str) -> np.ndarray:
        """Embed texts in language ``lang``: ndarray of float32, shape (n_texts, d)."""
        return self.embed_with_counts(texts, lang)[0]


def is_encoder_model(path: str | os.PathLike) -> bool:
    """Whether the model directory at ``path`` holds an encoder."""
    return read_model_json(path).get("phi_format") == "encoder"
