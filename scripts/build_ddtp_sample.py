#!/usr/bin/env python3
"""Build the bundled multilingual sample corpus from Debian's translated package descriptions.

Source: the Debian Description Translation Project (DDTP) ``Translation-xx`` index files that
``apt-get update -o Acquire::Languages="en,de,fr,es"`` downloads into ``/var/lib/apt/lists``.
Each file is a sequence of deb822 paragraphs::

    Package: 0ad
    Description-md5: d943033bedada21853d2ae54a2578a7b
    Description-es: short description
     long description line
     .
     next paragraph of the long description

``Description-md5`` is the md5 of the original English description, so it identifies the same
*concept* across languages (a package can appear with several md5s, and several packages can
share one md5 when their descriptions are identical). Every (language, md5) becomes at most one
document: ``doc_id = f"{lang}:{md5}"``, ``concept_id = md5``, ``lang``, ``title`` (the package
name; the lexicographically smallest one when several packages share the description) and
``text`` (short description, newline, long description with ``" ."`` lines turned into blank
lines).

Sampling is deterministic given ``--seed``: concepts are grouped by the set of languages they
appear in, every group is sorted, and

1. all concepts that contain the rarest language (``es`` for en/de/fr/es) or all requested
   languages are kept (so every language pair has the largest possible intersection), then
2. the remaining budget is spread evenly over the "number of languages" tiers below that
   (3 languages, 2 languages, ...) and, within a tier, evenly over its language sets, with
   unused quota redistributed (water-filling). Concepts present in a single language are
   never sampled.

``--n-concepts 0`` takes every concept present in at least two languages (the full corpus; no
random draw, so ``--seed`` does not matter). Only one suite is read: the descriptions of
another suite (e.g. trixie next to bookworm) are mostly revisions of the same packages under a
new md5, i.e. near-duplicate concepts that would leak between training and held-out sets.

The result is written as ONE zstd-compressed Parquet file, and statistics (documents per
language, concepts per number of languages, pairwise intersections, word and unique-word
counts) are printed to stdout and optionally written as JSON (``--stats-json``).

Rebuild the bundled sample with::

    python scripts/build_ddtp_sample.py --out data/sample/ddtp_en_de_fr_es.parquet

and the full corpus (kept outside the repository; see ``bench/build_ddtp_full.sh``) with::

    python scripts/build_ddtp_sample.py --n-concepts 0 --out /path/outside/repo/ddtp_full.parquet
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import re
import shutil
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

DEFAULT_LISTS_DIR = Path("/var/lib/apt/lists")
DEFAULT_LANGUAGES = "en,de,fr,es"
DEFAULT_SUITE = "bookworm"
DEFAULT_COMPONENT = "main"
DEFAULT_N_CONCEPTS = 4000
DEFAULT_SEED = 20261122
DEFAULT_OUT = Path("data/sample/ddtp_en_de_fr_es.parquet")
COMPRESSED_SUFFIXES = ("", ".lz4", ".gz", ".xz", ".bz2", ".zst")
WORD_RE = re.compile(r"\w+")
K = TypeVar("K")

SCHEMA = pa.schema(
    [
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("concept_id", pa.string(), nullable=False),
        pa.field("lang", pa.string(), nullable=False),
        pa.field("title", pa.string(), nullable=False),
        pa.field("text", pa.string(), nullable=False),
    ]
)


@dataclass(frozen=True)
class Document:
    """One translated description: a (language, concept) pair."""

    doc_id: str
    concept_id: str
    lang: str
    title: str
    text: str


@dataclass
class ParseStats:
    """Counters of what happened while parsing one Translation file."""

    paragraphs: int = 0
    documents: int = 0
    problems: Counter[str] = field(default_factory=Counter)


# --------------------------------------------------------------------------- input


def find_translation_file(lists_dir: Path, suite: str, component: str, lang: str) -> Path:
    """Locate ``*_dists_<suite>_<component>_i18n_Translation-<lang>[.lz4|.gz|...]``."""
    candidates: list[Path] = []
    for suffix in COMPRESSED_SUFFIXES:
        pattern = f"*_dists_{suite}_{component}_i18n_Translation-{lang}{suffix}"
        candidates.extend(sorted(lists_dir.glob(pattern)))
    if not candidates:
        raise FileNotFoundError(
            f"no Translation-{lang} file for {suite}/{component} in {lists_dir}; run e.g. "
            f'apt-get update -o Acquire::Languages="{lang}"'
        )
    if len(candidates) > 1:
        print(f"warning: several Translation-{lang} files, using {candidates[0]}", file=sys.stderr)
    return candidates[0]


def read_text(path: Path) -> str:
    """Return the decompressed contents of an apt list file as text."""
    if path.suffix == "":
        data = path.read_bytes()
    elif path.suffix == ".gz":
        import gzip

        data = gzip.decompress(path.read_bytes())
    elif path.suffix == ".xz":
        import lzma

        data = lzma.decompress(path.read_bytes())
    elif path.suffix == ".bz2":
        import bz2

        data = bz2.decompress(path.read_bytes())
    else:
        # .lz4 / .zst: apt-helper decompresses every format apt itself supports.
        helper = shutil.which("apt-helper") or "/usr/lib/apt/apt-helper"
        cmd = [helper, "cat-file", str(path)]
        if not Path(helper).exists() and path.suffix == ".lz4" and shutil.which("lz4cat"):
            cmd = ["lz4cat", str(path)]
        data = subprocess.run(cmd, check=True, capture_output=True).stdout
    return data.decode("utf-8", errors="replace")


def iter_paragraphs(text: str) -> Iterator[list[str]]:
    """Yield deb822 paragraphs (lists of lines) separated by blank lines.

    Only lines made of nothing but ASCII spaces/tabs separate paragraphs (Debian Policy 5.1);
    a continuation line holding e.g. a lone U+00A0 stays part of its description, and only
    ``\n`` ends a line (``str.splitlines`` would also split on U+2028, U+0085, ...).
    """
    para: list[str] = []
    for line in text.split("\n"):
        line = line.removesuffix("\r")
        if line.strip(" \t") == "":
            if para:
                yield para
                para = []
        else:
            para.append(line)
    if para:
        yield para


def parse_paragraph(lines: Sequence[str], problems: Counter[str]) -> dict[str, list[str]]:
    """Split a paragraph into fields: ``{name: [first line, continuation lines...]}``.

    Malformed lines are counted in ``problems`` and skipped; a repeated field keeps its first
    occurrence.
    """
    fields: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in lines:
        if line[0] in " \t":
            if current is None:
                problems["continuation line before any field"] += 1
                continue
            current.append(line)
            continue
        name, sep, value = line.partition(":")
        if not sep or not name.strip():
            problems["line without 'Field:'"] += 1
            current = None
            continue
        name = name.strip()
        if name in fields:
            problems[f"repeated field {name}"] += 1
            current = None
            continue
        current = [value.strip()]
        fields[name] = current
    return fields


def description_text(value: Sequence[str]) -> str:
    """Render a Description field: short description, newline, long description.

    Continuation lines lose their single leading space (verbatim lines keep any further
    indentation), ``" ."`` becomes an empty line (paragraph break) and surrounding blank lines
    are trimmed.
    """
    short = value[0].strip()
    long_lines: list[str] = []
    for raw in value[1:]:
        line = raw[1:].rstrip()
        long_lines.append("" if line == "." else line)
    while long_lines and not long_lines[0]:
        long_lines.pop(0)
    while long_lines and not long_lines[-1]:
        long_lines.pop()
    long = "\n".join(long_lines)
    if short and long:
        return f"{short}\n{long}"
    return short or long


def parse_translation(text: str, lang: str) -> tuple[dict[str, Document], ParseStats]:
    """Parse one Translation-xx file into ``{md5: Document}`` (one document per concept)."""
    stats = ParseStats()
    docs: dict[str, Document] = {}
    desc_field = f"Description-{lang}"
    for para in iter_paragraphs(text):
        stats.paragraphs += 1
        try:
            fields = parse_paragraph(para, stats.problems)
            missing = [f for f in ("Package", "Description-md5", desc_field) if f not in fields]
            if missing:
                stats.problems["missing " + "+".join(missing)] += 1
                continue
            package = fields["Package"][0]
            md5 = fields["Description-md5"][0].lower()
            if not package:
                stats.problems["empty Package"] += 1
                continue
            if not re.fullmatch(r"[0-9a-f]{32}", md5):
                stats.problems["malformed Description-md5"] += 1
                continue
            body = description_text(fields[desc_field])
            if not body.strip():
                stats.problems["empty description"] += 1
                continue
        except Exception as exc:  # one bad record must never abort the build
            stats.problems[f"unexpected error: {type(exc).__name__}"] += 1
            continue
        doc = Document(f"{lang}:{md5}", md5, lang, package, body)
        previous = docs.get(md5)
        if previous is not None:
            stats.problems["md5 shared by several packages (kept smallest name)"] += 1
            if previous.text != body:
                stats.problems["md5 shared by several packages with different text"] += 1
            if previous.title <= package:
                continue
        docs[md5] = doc
    stats.documents = len(docs)
    return docs, stats


# --------------------------------------------------------------------------- sampling


def water_fill(sizes: dict[K, int], budget: int) -> dict[K, int]:
    """Split ``budget`` evenly over groups, capped at each group's size, redistributing slack.

    Deterministic: groups are visited smallest first (ties keep the dict's insertion order) and
    the remainder of an uneven split goes to the first groups visited.
    """
    quota = dict.fromkeys(sizes, 0)
    open_groups = sorted(sizes, key=lambda k: sizes[k])
    while budget > 0 and open_groups:
        share, extra = divmod(budget, len(open_groups))
        still_open = []
        given = 0
        for i, key in enumerate(open_groups):
            want = share + (1 if i < extra else 0)
            take = min(want, sizes[key] - quota[key])
            quota[key] += take
            given += take
            if quota[key] < sizes[key]:
                still_open.append(key)
        budget -= given
        if given == 0:
            break
        open_groups = still_open
    return quota


def sample_concepts(
    lang_sets: dict[str, frozenset[str]], languages: Sequence[str], n_concepts: int, seed: int
) -> tuple[list[str], dict[frozenset[str], tuple[int, int]]]:
    """Pick ``n_concepts`` concept ids; return them sorted plus ``{lang set: (taken, total)}``.

    ``n_concepts == 0`` picks every concept present in at least two languages.
    """
    if n_concepts < 0:
        raise ValueError(f"n_concepts must be >= 0 (0 = all), got {n_concepts}")
    groups: dict[frozenset[str], list[str]] = defaultdict(list)
    for cid, langs in lang_sets.items():
        if len(langs) >= 2:
            groups[langs].append(cid)
    for ids in groups.values():
        ids.sort()
    if n_concepts == 0:
        n_concepts = sum(len(ids) for ids in groups.values())
    lang_counts = Counter(lang for langs in lang_sets.values() for lang in langs)
    rarest = min(languages, key=lambda lang: (lang_counts[lang], lang))
    everything = frozenset(languages)

    priority = sorted(
        (k for k in groups if rarest in k or k == everything), key=lambda k: (-len(k), sorted(k))
    )
    quota: dict[frozenset[str], int] = dict.fromkeys(groups, 0)
    budget = n_concepts
    for key in priority:
        quota[key] = min(len(groups[key]), budget)
        budget -= quota[key]

    ordered = sorted(groups, key=lambda k: (-len(k), sorted(k)))
    rest = {k: len(groups[k]) for k in ordered if k not in priority}
    tiers = sorted({len(k) for k in rest}, reverse=True)
    tier_sizes = {t: sum(v for k, v in rest.items() if len(k) == t) for t in tiers}
    tier_quota = water_fill(tier_sizes, budget)
    for t in tiers:
        in_tier = {k: v for k, v in rest.items() if len(k) == t}
        quota.update(water_fill(in_tier, tier_quota[t]))

    rng = random.Random(seed)
    chosen: list[str] = []
    report: dict[frozenset[str], tuple[int, int]] = {}
    for key in ordered:
        ids = groups[key]
        take = quota[key]
        chosen.extend(ids if take >= len(ids) else rng.sample(ids, take))
        report[key] = (take, len(ids))
    single = Counter(next(iter(v)) for v in lang_sets.values() if len(v) == 1)
    for lang, count in sorted(single.items()):
        report[frozenset({lang})] = (0, count)
    return sorted(chosen), report


# --------------------------------------------------------------------------- statistics


def summarize(values: Sequence[int]) -> dict[str, float]:
    """min / median / p90 / max (numpy linear interpolation) and mean of a sequence of ints."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        return {"n": 0}
    return {
        "n": int(arr.size),
        "min": int(arr.min()),
        "median": float(np.median(arr)),
        "p90": round(float(np.percentile(arr, 90)), 1),
        "max": int(arr.max()),
        "mean": round(float(arr.mean()), 1),
    }


def compute_stats(docs: Sequence[Document], languages: Sequence[str]) -> dict[str, object]:
    """Documents per language, concepts per number of languages, pair intersections, lengths."""
    by_concept: dict[str, set[str]] = defaultdict(set)
    words: dict[str, list[int]] = defaultdict(list)
    unique: dict[str, list[int]] = defaultdict(list)
    for doc in docs:
        by_concept[doc.concept_id].add(doc.lang)
        tokens = WORD_RE.findall(doc.text.lower())
        words[doc.lang].append(len(tokens))
        unique[doc.lang].append(len(set(tokens)))
    n_langs = Counter(len(v) for v in by_concept.values())
    lang_sets = Counter("+".join(sorted(v, key=languages.index)) for v in by_concept.values())
    pairs = {
        f"{a}-{b}": sum(1 for v in by_concept.values() if a in v and b in v)
        for a, b in itertools.combinations(languages, 2)
    }
    all_unique = [u for lang in languages for u in unique[lang]]
    return {
        "documents": len(docs),
        "concepts": len(by_concept),
        "documents_per_language": {lang: len(words[lang]) for lang in languages},
        "concepts_per_n_languages": {str(k): n_langs[k] for k in sorted(n_langs)},
        "concepts_per_language_set": dict(sorted(lang_sets.items(), key=lambda kv: -kv[1])),
        "pairwise_intersections": pairs,
        "words_per_document": {lang: summarize(words[lang]) for lang in languages},
        "unique_lowercased_words_per_document": {
            **{lang: summarize(unique[lang]) for lang in languages},
            "all": summarize(all_unique),
        },
        "share_with_at_least_50_unique_words": {
            lang: round(sum(u >= 50 for u in unique[lang]) / max(len(unique[lang]), 1), 4)
            for lang in languages
        },
    }


def print_stats(title: str, stats: dict[str, object]) -> None:
    """Pretty-print a ``compute_stats`` result."""
    print(f"\n== {title}: {stats['documents']} documents, {stats['concepts']} concepts")
    print("documents per language:", stats["documents_per_language"])
    print("concepts per number of languages:", stats["concepts_per_n_languages"])
    print("concepts per language set:", stats["concepts_per_language_set"])
    print("pairwise intersections (concepts):", stats["pairwise_intersections"])
    for key in ("words_per_document", "unique_lowercased_words_per_document"):
        print(f"{key} (regex \\w+):")
        table = stats[key]
        assert isinstance(table, dict)
        for lang, summary in table.items():
            print(f"  {lang:>3}: {summary}")
    print(
        "share of documents with >= 50 unique words:", stats["share_with_at_least_50_unique_words"]
    )


# --------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line interface."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lists-dir", type=Path, default=DEFAULT_LISTS_DIR)
    parser.add_argument("--languages", default=DEFAULT_LANGUAGES, help="comma-separated codes")
    parser.add_argument("--suite", default=DEFAULT_SUITE)
    parser.add_argument("--component", default=DEFAULT_COMPONENT)
    parser.add_argument(
        "--n-concepts",
        type=int,
        default=DEFAULT_N_CONCEPTS,
        help="concepts to sample; 0 = every concept present in >= 2 languages (full corpus)",
    )
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--stats-json", type=Path, default=None, help="also write stats here")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the Translation files, sample concepts, write Parquet and print statistics."""
    args = parse_args(argv)
    if args.n_concepts < 0:
        raise SystemExit("--n-concepts must be >= 0 (0 = every concept in >= 2 languages)")
    languages = [lang.strip() for lang in args.languages.split(",") if lang.strip()]
    if len(set(languages)) < 2:
        raise SystemExit("need at least two distinct languages")

    all_docs: dict[str, dict[str, Document]] = {}
    parse_report: dict[str, dict[str, object]] = {}
    for lang in languages:
        path = find_translation_file(args.lists_dir, args.suite, args.component, lang)
        docs, pstats = parse_translation(read_text(path), lang)
        all_docs[lang] = docs
        parse_report[lang] = {
            "file": path.name,
            "paragraphs": pstats.paragraphs,
            "documents": pstats.documents,
            "problems": dict(sorted(pstats.problems.items())),
        }
        print(
            f"{lang}: {path.name}: {pstats.paragraphs} records -> {pstats.documents} documents"
            f" (unique md5); issues: {dict(sorted(pstats.problems.items())) or 'none'}"
        )

    concept_langs: dict[str, set[str]] = defaultdict(set)
    for lang, docs in all_docs.items():
        for md5 in docs:
            concept_langs[md5].add(lang)
    lang_sets = {md5: frozenset(v) for md5, v in concept_langs.items()}

    full = [doc for lang in languages for doc in all_docs[lang].values()]
    full_stats = compute_stats(full, languages)
    print_stats("full corpus", full_stats)

    chosen, group_report = sample_concepts(lang_sets, languages, args.n_concepts, args.seed)
    print("\nsampled / available concepts per language set:")
    for key, (taken, total) in group_report.items():
        print(f"  {'+'.join(sorted(key, key=languages.index)):<12} {taken:>6} / {total}")

    rank = {lang: i for i, lang in enumerate(languages)}
    sample = [
        all_docs[lang][cid] for cid in chosen for lang in sorted(lang_sets[cid], key=rank.get)
    ]
    sample_stats = compute_stats(sample, languages)
    print_stats("sample", sample_stats)

    table = pa.Table.from_pylist([doc.__dict__ for doc in sample], schema=SCHEMA)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    partial = args.out.with_name(f".{args.out.name}.partial")
    pq.write_table(table, partial, compression="zstd", compression_level=19)
    os.replace(partial, args.out)  # atomic: a reader never sees a half-written file
    size = args.out.stat().st_size
    print(f"\nwrote {len(sample)} documents ({len(chosen)} concepts) to {args.out} ({size} bytes)")

    if args.stats_json is not None:
        report = {
            "parse": parse_report,
            "seed": args.seed,
            "n_concepts": args.n_concepts,
            "full_corpus": full_stats,
            "sample": sample_stats,
            "sampled_per_language_set": {
                "+".join(sorted(k, key=rank.get)): {"sampled": t, "available": n}
                for k, (t, n) in group_report.items()
            },
            "parquet_bytes": size,
        }
        args.stats_json.parent.mkdir(parents=True, exist_ok=True)
        args.stats_json.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
