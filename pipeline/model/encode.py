"""``model.encode``: the sentence-transformers calling convention over a model's ``embed``.

:class:`EncodeMixin` gives every model class (:class:`~pipeline.model.Cr5Model` for Cr5, the
baselines and XCNN; :class:`~pipeline.model.encoder_model.EncoderModel` for T-LASER and
cT-LASER) one ``encode(sentences, lang, batch_size, normalize_embeddings, show_progress_bar,
convert_to)``, shaped like ``SentenceTransformer.encode``:

- one string in gives one vector (shape (dim,)), a sequence of strings a matrix (n, dim);
  an empty sequence gives shape (0, dim);
- the vectors are always dense float32, whatever the model's ``embed`` returns: a selection
  model's (untranslated) sparse rows are densified, so their (n, |U|) output can be large; a
  topic model's (JPLSA, CPLSA) rows are its topic distributions as they are (summing to 1,
  compared by L1: :attr:`~pipeline.model.Cr5Model.similarity`);
- the texts go to ``embed`` ``batch_size`` at a time, which bounds the memory of each call's
  intermediates (the TF-IDF rows, a sparse model's rows before densifying);
- ``normalize_embeddings`` scales each row to unit L2 norm; a zero row (a text with no known
  word or subword) stays zero.

``embed`` and ``embed_with_counts`` are unchanged: ``encode`` returns exactly ``embed``'s rows
(densified), only batched, reshaped and optionally normalised.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal, TextIO

import numpy as np
import pyarrow as pa
import scipy.sparse as sp

from pipeline.linalg.progress import format_seconds

if TYPE_CHECKING:
    import torch

__all__ = [
    "CONVERT_TO",
    "DEFAULT_BATCH_SIZE",
    "PROGRESS_MIN_BATCHES",
    "EncodeMixin",
    "EncodeProgress",
    "normalize_rows",
]

#: Texts per ``embed`` call when ``encode`` is given no ``batch_size``. It bounds the memory of
#: one call's intermediates (a Cr5 model's TF-IDF rows, a selection model's densified block of
#: 256 × |U| float32) and is the progress reporter's step; the rows do not depend on it.
DEFAULT_BATCH_SIZE = 256

#: ``show_progress_bar=None`` shows progress when the input spans more than this many batches
#: and standard error is a terminal (a short call, or one in a log, stays quiet).
PROGRESS_MIN_BATCHES = 4

#: Without a terminal (``show_progress_bar=True`` into a log), one progress line at most this
#: often, in seconds, and the last.
PROGRESS_LINE_SECONDS = 10.0

#: The output types of ``encode``: ndarray, a CPU ``torch.Tensor`` sharing its memory (needs
#: PyTorch, the ``neural`` extra), or nested Python lists of floats (JSON-ready).
CONVERT_TO = ("numpy", "torch", "list")

ConvertTo = Literal["numpy", "torch", "list"]


def normalize_rows(vectors: np.ndarray) -> np.ndarray:
    """Scale each row of ``vectors`` (ndarray, shape (n, dim)) to unit L2 norm, in place.

    Zero rows (no known word) stay zero rather than becoming NaN. Returns ``vectors``.
    """
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    np.divide(vectors, norms, out=vectors, where=norms > 0)
    return vectors


class EncodeProgress:
    """Texts encoded so far, on ``stream``: a bar redrawn in place when the stream is a
    terminal, otherwise one line at most every :data:`PROGRESS_LINE_SECONDS` and the last.

    A small reporter of its own: the package does not depend on tqdm, and
    :mod:`pipeline.progress` follows Spark jobs, not a loop in the caller's process.
    ``clock`` (monotonic seconds) is for tests.
    """

    def __init__(
        self,
        total: int,
        stream: TextIO,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = total
        self.stream = stream
        self.clock = clock
        self.start = clock()
        self.last_line = -math.inf
        isatty = getattr(stream, "isatty", None)
        self.terminal = bool(isatty and isatty())

    def text(self, done: int) -> str:
        """``"encode: 2,560/10,000 texts (26%), 1,234 texts/s, ETA 6.2s"``."""
        elapsed = self.clock() - self.start
        rate = done / elapsed if elapsed > 0 and done else None
        eta = (self.total - done) / rate if rate else None
        pct = 100 * done // self.total if self.total else 100
        speed = f"{rate:,.0f} texts/s" if rate else "rate unknown"
        return (
            f"encode: {done:,}/{self.total:,} texts ({pct}%), {speed}, "
            f"ETA {format_seconds(eta)}, elapsed {format_seconds(elapsed)}"
        )

    def update(self, done: int) -> None:
        """Report ``done`` texts encoded (the last call, ``done == total``, ends the bar)."""
        final = done >= self.total
        if self.terminal:
            self.stream.write("\r" + self.text(done) + ("\n" if final else ""))
        elif final or self.clock() - self.last_line >= PROGRESS_LINE_SECONDS:
            self.stream.write(self.text(done) + "\n")
            self.last_line = self.clock()
        self.stream.flush()


def _to_torch(vectors: np.ndarray) -> torch.Tensor:
    try:
        import torch
    except ImportError:
        raise ImportError(
            "encode(..., convert_to='torch') needs PyTorch, which is not installed. Fix: pip "
            "install 'cr5-on-spark[neural]' (CPU-only build: pip install torch --index-url "
            "https://download.pytorch.org/whl/cpu), or use convert_to='numpy'"
        ) from None
    return torch.from_numpy(vectors)


class EncodeMixin:
    """Adds :meth:`encode` to a model class that has ``dim`` and ``embed(texts, lang)``
    (an ndarray or a scipy.sparse matrix of shape (n_texts, dim))."""

    if TYPE_CHECKING:

        @property
        def dim(self) -> int: ...

        def embed(self, texts: Sequence[str | None], lang: str) -> np.ndarray | sp.spmatrix: ...

    def encode(
        self,
        sentences: str | Sequence[str | None] | pa.Array,
        lang: str,
        batch_size: int = DEFAULT_BATCH_SIZE,
        normalize_embeddings: bool = False,
        show_progress_bar: bool | None = None,
        convert_to: ConvertTo = "numpy",
    ) -> np.ndarray | torch.Tensor | list[float] | list[list[float]]:
        """Embed ``sentences`` in language ``lang``, as ``SentenceTransformer.encode`` does.

        Parameters
        ----------
        sentences : str, or a sequence (list, tuple, pyarrow string array, ...) of str or None
            One text, or texts. None or a text with no known word embeds as the zero vector.
        lang : str
            The texts' language, one of the model's ``languages`` (trimmed, lower-cased).
        batch_size : int >= 1
            Texts per ``embed`` call (:data:`DEFAULT_BATCH_SIZE`): bounds the memory of each
            call's intermediates; the vectors do not depend on it.
        normalize_embeddings : bool
            Scale each vector to unit L2 norm; zero vectors stay zero. For a topic model this
            turns its distributions (rows summing to 1, compared by L1) into unit-L2 rows.
        show_progress_bar : bool or None
            Report progress on standard error; None: when there are more than
            :data:`PROGRESS_MIN_BATCHES` batches and standard error is a terminal.
        convert_to : {"numpy", "torch", "list"}
            ndarray; a CPU ``torch.Tensor`` sharing the array's memory (ImportError without
            PyTorch); or nested Python lists of floats.

        Returns
        -------
        float32 vectors, dense for every model: shape (dim,) for one str, (n, dim) for a
        sequence of n texts ((0, dim) when empty). These are ``embed``'s rows: a selection
        model's (untranslated) sparse rows densified, a topic model's (JPLSA, CPLSA) topic
        distributions as they are.
        """
        if convert_to not in CONVERT_TO:
            raise ValueError(
                f"convert_to must be one of {', '.join(map(repr, CONVERT_TO))}; got {convert_to!r}"
            )
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1; got {batch_size!r}")
        single = isinstance(sentences, str)
        texts: Sequence[str | None] | pa.Array
        if single:
            texts = [sentences]
        elif isinstance(sentences, pa.Array):
            texts = sentences
        else:
            texts = list(sentences)
        n = len(texts)
        out = np.empty((n, self.dim), dtype=np.float32)
        batches = math.ceil(n / batch_size)
        if show_progress_bar is None:
            show_progress_bar = batches > PROGRESS_MIN_BATCHES and sys.stderr.isatty()
        progress = EncodeProgress(n, sys.stderr) if show_progress_bar and n else None
        if n == 0:
            self.embed(texts, lang)  # checks the language as a non-empty call would
        for start in range(0, n, batch_size):
            stop = min(start + batch_size, n)
            rows = self.embed(texts[start:stop], lang)
            out[start:stop] = rows.toarray() if sp.issparse(rows) else rows
            if progress is not None:
                progress.update(stop)
        if normalize_embeddings:
            normalize_rows(out)
        vectors = out[0] if single else out
        if convert_to == "torch":
            return _to_torch(vectors)
        if convert_to == "list":
            return vectors.tolist()
        return vectors
