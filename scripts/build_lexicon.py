#!/usr/bin/env python3
"""Build an English/German word lexicon (TSV) from Debian's ``trans-de-en`` package.

The package holds the TU Chemnitz "ding" dictionary (``/usr/share/trans/de-en``), one entry
per line::

    Hund {m} [zool.] | Hunde {pl} :: dog | dogs

German and English sides are separated by ``::``; ``|`` separates aligned sub-entries
(inflections, phrases; the i-th German part translates the i-th English part) and ``;``
synonyms. Annotations in ``{}``, ``[]``, ``()`` and ``<>`` are dropped, an English ``to`` before
a verb too. Only single-word entries are kept: a side is kept when the project's tokeniser
(:mod:`pipeline.text.tokenizer`, default text settings) turns it into exactly one token, and the
word written is that token (so it is lower-cased and normalised exactly as the pipeline does).

Fetch and convert::

    apt-get update && apt-get download trans-de-en && dpkg-deb -x trans-de-en_*.deb pkg
    python scripts/build_lexicon.py pkg/usr/share/trans/de-en --out data/lexicon/en-de.tsv

``--source en`` (default) writes ``english<TAB>german`` lines; ``--source de`` the reverse.
The output is written atomically (temporary file, then rename).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pyarrow as pa

from pipeline.text.tokenizer import Tokenizer

_ANNOTATION = re.compile(r"\{[^}]*\}|\[[^\]]*\]|\([^)]*\)|<[^>]*>")


def _clean(term: str, *, english: bool) -> str:
    term = _ANNOTATION.sub(" ", term).strip()
    if english and term.startswith("to "):
        term = term[3:]
    return term.strip()


def entry_pairs(line: str) -> list[tuple[str, str]]:
    """(german, english) single-word candidate pairs of one ding line, before tokenising."""
    if line.startswith("#") or " :: " not in line:
        return []
    de_side, en_side = line.rstrip("\n").split(" :: ", 1)
    de_parts, en_parts = de_side.split(" | "), en_side.split(" | ")
    if len(de_parts) != len(en_parts):
        return []
    out = []
    for de_part, en_part in zip(de_parts, en_parts, strict=True):
        de_words = _single_words(de_part, english=False)
        en_words = _single_words(en_part, english=True)
        out.extend((d, e) for d in de_words for e in en_words)
    return out


def _single_words(part: str, *, english: bool) -> list[str]:
    words = []
    for syn in part.split(";"):
        term = _clean(syn, english=english)
        if term and len(term.split()) == 1:
            words.append(term)
    return words


def tokenised_words(terms: list[str], tok: Tokenizer) -> dict[str, str]:
    """Term -> its single token, for the terms the tokeniser turns into exactly one token."""
    lists = tok.tokenize_arrow(pa.array(terms, type=pa.string())).to_pylist()
    return {t: toks[0] for t, toks in zip(terms, lists, strict=True) if len(toks) == 1}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dictionary", type=Path, help="the ding file, e.g. pkg/usr/share/trans/de-en")
    ap.add_argument("--out", type=Path, required=True, help="output TSV")
    ap.add_argument("--source", choices=["en", "de"], default="en", help="language of column 1")
    args = ap.parse_args(argv)
    tok = Tokenizer()
    raw: set[tuple[str, str]] = set()
    try:
        with args.dictionary.open(encoding="utf-8") as f:
            for line in f:
                raw.update(entry_pairs(line))
    except OSError as exc:
        print(f"error: cannot read {args.dictionary}: {exc.strerror}", file=sys.stderr)
        return 2
    word = tokenised_words(sorted({w for p in raw for w in p}), tok)
    pairs: set[tuple[str, str]] = set()
    for de, en in raw:
        if de in word and en in word:
            pairs.add((word[en], word[de]) if args.source == "en" else (word[de], word[en]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=args.out.parent, prefix=".lexicon-", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        for s, t in sorted(pairs):
            out.write(f"{s}\t{t}\n")
    os.replace(tmp, args.out)
    n_src = len({s for s, _ in pairs})
    print(f"{len(pairs)} pairs, {n_src} source words -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
