"""Bilingual lexicons: one ``source_word target_word`` pair per line, ours or MUSE's.

Two line formats are read, each line on its own (so a file may mix them):

* **ours** (``scripts/build_lexicon.py``): a line holding a tab is ``source_word<TAB>target_word``,
  exactly two tab-separated fields, each one word (no inner whitespace; spaces around a field
  are ignored);
* **MUSE's** (its ``en-de.txt``-style dictionaries, and ``load_dictionary`` there): a line
  without a tab is two words separated by spaces (any run of whitespace), exactly two.

A source word may have several translations (one line each). Blank lines and lines starting
with ``#`` are skipped (in both formats, so a MUSE entry whose source word starts with ``#``
must be written with a tab, ``#tag<TAB>#tag``). **Multi-word entries are refused**, in both
formats: a word vector is one token, and in a space-separated line nothing tells which words
form the source and which the target; drop such entries, or join their words the way the
vectors' vocabulary does (e.g. ``new_york``). Every other malformed line raises
:class:`~pipeline.errors.InputDataError` naming the file, the line number, the line and the
fix. Words are kept as written (no lower-casing: MUSE's dictionaries and vectors are already
lower-case; the ``cr5`` methods look words up through the model's tokeniser,
:meth:`Lexicon.tokenized`).

The split is by **source word** (all translations of a word go to the same part), seeded,
so train and test never share a query word.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from pipeline.errors import InputDataError
from pipeline.text.tokenizer import Tokenizer

__all__ = ["Lexicon", "LexiconSplit", "parse_lexicon_lines", "read_lexicon", "split_lexicon"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Lexicon:
    """Word pairs, sorted and de-duplicated.

    Attributes
    ----------
    pairs : tuple of (str, str)
        ``(source_word, target_word)``; a source word may occur in several pairs.
    """

    pairs: tuple[tuple[str, str], ...]

    @property
    def source_words(self) -> list[str]:
        """Distinct source words, sorted."""
        return sorted({s for s, _ in self.pairs})

    def translations(self) -> dict[str, list[str]]:
        """Source word -> its target words (sorted)."""
        out: dict[str, list[str]] = {}
        for s, t in self.pairs:
            out.setdefault(s, []).append(t)
        return out

    def restrict(self, source_vocab: Iterable[str], target_vocab: Iterable[str]) -> Lexicon:
        """Only the pairs whose two words are in the given vocabularies."""
        sv, tv = set(source_vocab), set(target_vocab)
        return Lexicon(tuple(p for p in self.pairs if p[0] in sv and p[1] in tv))

    def tokenized(self, tokenizer: Tokenizer) -> Lexicon:
        """Each word looked up through ``tokenizer`` (a model's own); pairs with a word that
        is not exactly one token are dropped."""
        words = sorted({w for p in self.pairs for w in p})
        lists = tokenizer.tokenize_arrow(pa.array(words, type=pa.string())).to_pylist()
        one = {w: t[0] for w, t in zip(words, lists, strict=True) if len(t) == 1}
        return Lexicon(
            tuple(sorted({(one[s], one[t]) for s, t in self.pairs if s in one and t in one}))
        )

    def __len__(self) -> int:
        return len(self.pairs)


@dataclass(frozen=True)
class LexiconSplit:
    """Disjoint-by-source-word parts of a lexicon."""

    train: Lexicon
    validation: Lexicon
    test: Lexicon


#: The fix every malformed-line error ends with.
_LINE_FIX = (
    "write one pair per line, 'source_word<TAB>target_word' (ours) or 'source_word "
    "target_word' (MUSE's), one line per translation; multi-word entries are not supported: "
    "drop them or join their words as the word vectors' vocabulary does (e.g. new_york)"
)


def _line_problem(line: str) -> tuple[tuple[str, str] | None, str | None]:
    """``(pair, None)`` for a well-formed pair line, ``(None, problem)`` otherwise (see the
    module docstring: a line with a tab is ours, one without is MUSE's)."""
    if "\t" in line:
        fields = line.split("\t")
        if len(fields) != 2:
            return None, f"has {len(fields)} tab-separated field(s), expected 2"
        if not fields[0].strip() or not fields[1].strip():
            return None, "has an empty field"
        if any(len(f.split()) != 1 for f in fields):
            return None, "has a field with inner whitespace (single words only)"
        return (fields[0].strip(), fields[1].strip()), None
    words = line.split()
    if len(words) == 1:
        return None, "has 1 word and no tab: a source word without its translation"
    if len(words) != 2:
        return None, (
            f"has {len(words)} space-separated words and no tab, expected 2 (MUSE's "
            "format); a multi-word entry?"
        )
    return (words[0], words[1]), None


def parse_lexicon_lines(lines: Iterable[str], *, name: str = "<lexicon>") -> Lexicon:
    """Parse lexicon lines, ours (tab-separated) or MUSE's (space-separated), see the module
    docstring; ``name`` (the file) is used in error messages."""
    pairs: set[tuple[str, str]] = set()
    for number, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r\n")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        pair, problem = _line_problem(line)
        if pair is None:
            raise InputDataError(f"{name}, line {number}: {line!r} {problem}; {_LINE_FIX}")
        pairs.add(pair)
    if not pairs:
        raise InputDataError(
            f"{name} holds no word pairs; write one 'source_word<TAB>target_word' (or MUSE's "
            "'source_word target_word') per line"
        )
    return Lexicon(tuple(sorted(pairs)))


def read_lexicon(path: str | Path) -> Lexicon:
    """Read a lexicon file (UTF-8; a byte-order mark is ignored), ours or MUSE's."""
    path = Path(path)
    try:
        with path.open(encoding="utf-8-sig") as f:
            return parse_lexicon_lines(f, name=str(path))
    except OSError as exc:
        raise InputDataError(
            f"cannot read lexicon {path}: {exc.strerror}; build one with "
            "scripts/build_lexicon.py or give one of MUSE's dictionaries"
        ) from exc
    except UnicodeDecodeError as exc:
        raise InputDataError(f"lexicon {path} is not UTF-8 ({exc}); re-encode it") from exc


def split_lexicon(lexicon: Lexicon, *, n_test: int, n_validation: int, seed: int) -> LexiconSplit:
    """Seeded split by source word: ``n_test`` and ``n_validation`` source words held out.

    When the lexicon has fewer source words than ``n_test + n_validation + 1``, both shrink
    in proportion (a warning is logged) so that at least half the words train.
    """
    words = lexicon.source_words
    n = len(words)
    held = n_test + n_validation
    if held > n // 2:
        scale = (n // 2) / max(held, 1)
        logger.warning(
            "lexicon has %d source words; shrinking test %d -> %d and validation %d -> %d",
            n,
            n_test,
            int(n_test * scale),
            n_validation,
            int(n_validation * scale),
        )
        n_test, n_validation = int(n_test * scale), int(n_validation * scale)
    order = np.random.default_rng(seed).permutation(n)
    test = {words[i] for i in order[:n_test]}
    val = {words[i] for i in order[n_test : n_test + n_validation]}
    parts: dict[str, list[tuple[str, str]]] = {"train": [], "validation": [], "test": []}
    for p in lexicon.pairs:
        parts["test" if p[0] in test else "validation" if p[0] in val else "train"].append(p)
    return LexiconSplit(*(Lexicon(tuple(parts[k])) for k in ("train", "validation", "test")))
