"""Word vectors in fastText's and MUSE's ``.vec`` text format, imported into the project's
word-vector store (:mod:`pipeline.wordmap.store`), so that the ``translate_words`` stage and
the mapping baselines run on published vectors (fastText's Wikipedia or Common Crawl ones,
MUSE's aligned ones) as well as on the ``word_vectors`` stage's word2vec.

Format (UTF-8, optionally gzip-compressed: a name ending in ``.gz``)::

    <number of words> <dimension>          line 1, the header
    <word> <v1> <v2> ... <v_dimension>     one line per word, most frequent first

The word is everything before the line's first ASCII space (as MUSE's reader splits it, so a
word holding another whitespace character, e.g. a no-break space, stays one word), the rest
must be exactly ``dimension`` finite numbers (trailing spaces, which fastText writes, are
ignored). Reading follows MUSE's ``read_txt_embeddings``: the first vector of a word that
occurs twice is kept and the duplicates are counted and logged, and ``max_vocab`` stops the
reading once that many distinct words are kept (MUSE's default, 200,000). Unlike MUSE, a
malformed line is an error, never skipped: :class:`~pipeline.errors.InputDataError` names the
file, the line number and the fix; so is a file with fewer (or more) vector lines than its
header announces (a truncated download), unless ``max_vocab`` stopped the reading first. A
file without the header (GloVe's text format) is recognised and the error says how to add it.

The numbers are parsed by :func:`numpy.loadtxt` (its C parser) a block of lines at a time;
Python touches each line once (to split the word off and check it), never each value.

The store's ``count`` column gets 0 for every word: a ``.vec`` file carries no frequencies.
The rows keep the file's order, which is by frequency in fastText's and MUSE's files, as the
consumers (``words.max_candidates``, ``words.refine_vocabulary``) assume.
"""

from __future__ import annotations

import gzip
import logging
import os
import time
import zlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import islice
from typing import Any, BinaryIO

import numpy as np

from pipeline.errors import InputDataError
from pipeline.io.storage import is_local, local_path
from pipeline.text.languages import canonical_lang, is_lang_code
from pipeline.wordmap.store import WordVectors, write_word_vectors

__all__ = ["MUSE_MAX_VOCAB", "VecFile", "import_vec", "read_vec"]

logger = logging.getLogger(__name__)

#: MUSE's default ``--max_vocab``.
MUSE_MAX_VOCAB = 200_000
#: Lines parsed per :func:`numpy.loadtxt` call (bounds the parser's working memory).
CHUNK_LINES = 20_000
_BOM = b"\xef\xbb\xbf"
_FORMAT = "'<word> <v1> ... <v_dim>' with the header's dim numbers"


@dataclass(frozen=True)
class VecFile:
    """One parsed ``.vec`` file.

    Attributes
    ----------
    vectors : WordVectors
        The kept words (file order), counts 0, float32 vectors.
    path : str
        The file, as given.
    header_words, dim : int
        The header's two numbers.
    lines_read : int
        Vector lines read (duplicates included; fewer than ``header_words`` when
        ``max_vocab`` stopped the reading).
    duplicates : int
        Lines skipped because their word came earlier (its first vector is kept).
    duplicate_examples : tuple of str
        Up to five of them, as ``'word' (line n)``.
    stopped_at_max_vocab : bool
        Whether ``max_vocab`` words were kept before the end of the file.
    """

    vectors: WordVectors
    path: str
    header_words: int
    dim: int
    lines_read: int
    duplicates: int
    duplicate_examples: tuple[str, ...]
    stopped_at_max_vocab: bool


def _error(name: str, number: int, what: str, fix: str) -> InputDataError:
    return InputDataError(f"{name}, line {number}: {what}. Fix: {fix}.")


def _show(raw: bytes, limit: int) -> str:
    """``raw``'s first ``limit`` bytes as a quoted string for a message."""
    return repr(raw[:limit].decode("utf-8", errors="replace"))


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _header(raw: bytes, name: str) -> tuple[int, int]:
    """``(number of words, dimension)`` from line 1, or an error saying what line 1 is."""
    if not raw:
        raise InputDataError(
            f"{name} is empty. Fix: give a .vec file (line 1 '<number of words> <dim>', then "
            "one '<word> <v1> ... <v_dim>' line per word)."
        )
    text = raw.removeprefix(_BOM).decode("utf-8", errors="replace").strip()
    parts = text.split()
    if len(parts) == 2 and all(p.isdigit() for p in parts):
        n_words, dim = int(parts[0]), int(parts[1])
        if n_words >= 1 and dim >= 1:
            return n_words, dim
        raise _error(
            name,
            1,
            f"the header {text!r} announces {n_words} words of dimension {dim}",
            "both must be at least 1; the header is '<number of words> <dim>'",
        )
    if len(parts) > 2 and all(_is_number(p) for p in parts[1:]):
        raise _error(
            name,
            1,
            f"{text[:60]!r}... is a vector line, not the header '<number of words> <dim>' "
            "(a headerless file, such as GloVe's text format)",
            f"prepend the header line, here '<number of lines> {len(parts) - 1}', e.g. "
            f'sed -i "1i $(wc -l < FILE) {len(parts) - 1}" FILE',
        )
    raise _error(
        name,
        1,
        f"{text[:80]!r} is not a .vec header",
        "line 1 of a fastText/MUSE .vec file is '<number of words> <dim>', e.g. '200000 300'",
    )


def _split_line(raw: bytes, number: int, name: str) -> tuple[str, bytes]:
    """The word (decoded) and the numbers' bytes of one vector line."""
    line = raw.rstrip(b" \t\r\n")
    word, sep, rest = line.partition(b" ")
    fix = f"write {_FORMAT}, or delete the line (and lower the header's word count)"
    if not line:
        raise _error(name, number, "the line is empty", fix)
    if not word:
        raise _error(name, number, "the line starts with a space: it has no word", fix)
    if not sep:
        raise _error(name, number, f"{_show(line, 60)} has a word and no numbers", fix)
    try:
        return word.decode("utf-8"), rest
    except UnicodeDecodeError as exc:
        raise _error(
            name,
            number,
            f"the word {_show(word, 40)} is not valid UTF-8 ({exc.reason} at byte {exc.start})",
            "convert the file to UTF-8, or drop the invalid bytes with "
            "iconv -c -f utf-8 -t utf-8 FILE > FIXED",
        ) from None


def _locate_bad_values(rests: list[bytes], first: int, dim: int, name: str) -> InputDataError:
    """The error for the first line of a block whose numbers do not parse (the slow path,
    taken only once :func:`numpy.loadtxt` has refused the block)."""
    fix = (
        f"write {_FORMAT} (a word never holds an ASCII space), or delete the line (and "
        "lower the header's word count)"
    )
    for offset, rest in enumerate(rests):
        fields = rest.split()
        if len(fields) != dim:
            return _error(
                name,
                first + offset,
                f"{len(fields)} numbers after the word, but the header (line 1) says "
                f"dimension {dim}",
                fix,
            )
        for k, field in enumerate(fields, start=1):
            try:
                float(field)
            except ValueError:
                return _error(
                    name, first + offset, f"value {k} ({_show(field, 30)}) is not a number", fix
                )
    return InputDataError(
        f"{name}, lines {first}-{first + len(rests) - 1}: the numbers do not parse as "
        f"{dim} float32 values per line. Fix: write {_FORMAT}."
    )


def _parse_values(rests: list[bytes], first: int, dim: int, name: str) -> np.ndarray:
    """``(len(rests), dim)`` float32 values of consecutive lines ``first, first + 1, ...``."""
    try:
        values = np.loadtxt(rests, dtype=np.float32, comments=None, ndmin=2)
    except ValueError:
        values = None
    if values is None or values.shape != (len(rests), dim):
        raise _locate_bad_values(rests, first, dim, name)
    finite = np.isfinite(values).all(axis=1)
    if not finite.all():
        offset = int(np.argmin(finite))
        raise _error(
            name,
            first + offset,
            "a value is not finite (nan, inf, or beyond float32's range)",
            "write finite numbers, or delete the line (and lower the header's word count)",
        )
    return values


@contextmanager
def _open(path: str) -> Iterator[BinaryIO]:
    """The file's bytes (decompressed for ``.gz``); read errors become located errors."""
    if not is_local(path):
        raise InputDataError(
            f"{path}: import-vec reads local files only. Fix: copy it here first (hadoop fs "
            "-get, gsutil cp, aws s3 cp); the output (--out) may be a URI."
        )
    local = local_path(path)
    try:
        stream = gzip.open(local, "rb") if local.endswith(".gz") else open(local, "rb")  # noqa: SIM115
    except OSError as exc:
        raise InputDataError(
            f"cannot read {path}: {exc.strerror or exc}. Fix: give an existing fastText/MUSE "
            ".vec file (or .vec.gz)."
        ) from None
    try:
        yield stream
    except (OSError, EOFError, zlib.error) as exc:
        raise InputDataError(
            f"cannot read {path} to its end ({exc}): a damaged or truncated file (an "
            "interrupted download?). Fix: download it again."
        ) from None
    finally:
        stream.close()


def read_vec(
    path: str | os.PathLike,
    *,
    max_vocab: int | None = MUSE_MAX_VOCAB,
    chunk_lines: int = CHUNK_LINES,
) -> VecFile:
    """Parse a fastText/MUSE ``.vec`` file (module docstring).

    Parameters
    ----------
    path : str or path-like
        A local file; ``.gz`` is decompressed.
    max_vocab : int or None
        Keep at most this many distinct words, the first ones of the file (MUSE's
        ``--max_vocab``); None keeps all.
    chunk_lines : int
        Lines parsed per block.

    Returns
    -------
    VecFile
    """
    name = os.fspath(path)
    if max_vocab is not None and max_vocab < 1:
        raise InputDataError(f"max_vocab must be at least 1 (or None: all words); got {max_vocab}")
    with _open(name) as stream:
        header_words, dim = _header(stream.readline(), name)
        cap = header_words if max_vocab is None else min(header_words, max_vocab)
        out = np.empty((cap, dim), dtype=np.float32)
        index: dict[str, int] = {}
        words: list[str] = []
        examples: list[str] = []
        duplicates = read = 0
        stopped = False
        while read < header_words and not stopped:
            chunk = list(islice(stream, min(chunk_lines, header_words - read)))
            if not chunk:
                break
            first = 2 + read  # line number of chunk[0]
            rests: list[bytes] = []
            keep: list[int] = []
            for offset, raw in enumerate(chunk):
                word, rest = _split_line(raw, first + offset, name)
                rests.append(rest)
                if word in index:
                    duplicates += 1
                    if len(examples) < 5:
                        examples.append(f"{word!r} (line {first + offset})")
                    continue
                index[word] = len(words)
                words.append(word)
                keep.append(offset)
                if len(words) == cap and cap < header_words:
                    stopped = True
                    break
            values = _parse_values(rests, first, dim, name)
            out[len(words) - len(keep) : len(words)] = values[keep]
            read += len(rests)
        last = 1 + read
        if not stopped and read < header_words:
            raise _error(
                name,
                last,
                f"the file ends after {read} vector lines, but its header (line 1) announces "
                f"{header_words} words: a truncated file (an interrupted download?)",
                f"download it again, or set the header's word count to {read}",
            )
        if not stopped:
            for number, raw in enumerate(stream, start=last + 1):
                if raw.strip():
                    raise _error(
                        name,
                        number,
                        f"a vector line beyond the {header_words} words the header (line 1) "
                        "announces",
                        "set the header's word count to the number of vector lines "
                        "(wc -l < FILE, minus 1)",
                    )
    if duplicates:
        logger.warning(
            "%s: %d line(s) repeat an earlier word and were skipped (the first vector of a "
            "word is kept, as MUSE does), e.g. %s",
            name,
            duplicates,
            ", ".join(examples),
        )
    return VecFile(
        vectors=WordVectors(words, np.zeros(len(words), np.int64), out[: len(words)]),
        path=name,
        header_words=header_words,
        dim=dim,
        lines_read=read,
        duplicates=duplicates,
        duplicate_examples=tuple(examples),
        stopped_at_max_vocab=stopped,
    )


def import_vec(
    files: Mapping[str, str], out: str, *, max_vocab: int | None = MUSE_MAX_VOCAB
) -> dict[str, Any]:
    """Import one ``.vec`` file per language into the word-vector store at ``out``.

    Each language becomes ``out/<lang>/`` (:func:`~pipeline.wordmap.store.write_word_vectors`:
    written to a staging directory and committed whole, on a local disk or any store
    :mod:`pipeline.io.storage` reaches), replacing a previous one. Languages are read and
    written one after the other, so memory holds one language's vectors at a time.

    Parameters
    ----------
    files : mapping of str to str
        Language code -> its ``.vec`` (or ``.vec.gz``) file.
    out : str
        The word-vector root, what the ``translate_words`` stage reads as
        ``paths.word_vectors`` (default ``<paths.root>/word_vectors``).
    max_vocab : int or None
        As in :func:`read_vec`.

    Returns
    -------
    dict
        Per language: the path written, words, dimension, lines read, duplicates, seconds.
    """
    for lang in files:
        if not is_lang_code(canonical_lang(lang)) or lang != lang.strip():
            raise InputDataError(
                f"{lang!r} is not a language code (it names the output directory "
                f"{out}/<lang>). Fix: give a code such as en or de (--lang en=wiki.en.vec)."
            )
    report: dict[str, Any] = {"out": out, "max_vocab": max_vocab, "languages": {}}
    for lang, path in files.items():
        t0 = time.perf_counter()
        vec = read_vec(path, max_vocab=max_vocab)
        meta = {
            "method": "imported from a fastText/MUSE .vec text file (python -m pipeline "
            "import-vec)",
            "source_file": os.path.abspath(local_path(path)),
            "settings": {"max_vocab": max_vocab},
            "header": {"words": vec.header_words, "dim": vec.dim},
            "vector_lines_read": vec.lines_read,
            "duplicates_skipped": vec.duplicates,
            "stopped_at_max_vocab": vec.stopped_at_max_vocab,
            "counts": "unknown (a .vec file has none): every count is 0; rows keep the "
            "file's order, most frequent first in fastText's and MUSE's files",
        }
        written = write_word_vectors(out, lang, vec.vectors, meta)
        seconds = round(time.perf_counter() - t0, 2)
        report["languages"][lang] = {
            "path": written,
            "words": len(vec.vectors.words),
            "dim": vec.dim,
            "header_words": vec.header_words,
            "lines_read": vec.lines_read,
            "duplicates_skipped": vec.duplicates,
            "duplicate_examples": list(vec.duplicate_examples),
            "stopped_at_max_vocab": vec.stopped_at_max_vocab,
            "seconds": seconds,
        }
        logger.info(
            "import-vec %s: %d words of dimension %d from %s -> %s in %.1f s",
            lang,
            len(vec.vectors.words),
            vec.dim,
            path,
            written,
            seconds,
        )
    return report
