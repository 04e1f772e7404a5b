#!/usr/bin/env python3
"""Build the classification labels of the DDTP corpus: each description's Debian section.

Source: the archive's package index ``dists/<suite>/<component>/binary-<arch>/Packages``
that ``apt-get update`` downloads into ``/var/lib/apt/lists`` (the same fetch as the
Translation files the corpus is built from; scripts/build_ddtp_sample.py). Each deb822
paragraph has ``Package``, ``Section`` (``games``, or ``contrib/net`` outside main) and
``Description-md5``, the md5 of the English description, which is the corpus's
``concept_id``. The label of a concept is the section of its packages, with the archive-area
prefix dropped (``contrib/net`` -> ``net``); when packages sharing one description disagree,
the most frequent section wins, ties to the alphabetically first (and the conflict is
counted in the printed statistics).

Writes one Parquet file with columns ``concept_id``, ``label``, ``package`` (the smallest
package name with that description), sorted by concept_id; with ``--corpus``, only the
concepts of that corpus are kept and the coverage is printed. Point
``evaluate.classify_labels`` at it::

    python scripts/build_ddtp_labels.py --corpus data/sample/ddtp_en_de_fr_es.parquet \\
        --out data/sample/ddtp_sections.parquet
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

DEFAULT_LISTS_DIR = Path("/var/lib/apt/lists")
SUFFIXES = ("", ".lz4", ".gz", ".xz", ".zst")


def find_packages_file(lists_dir: Path, suite: str, component: str, arch: str) -> Path:
    """``*_dists_<suite>_<component>_binary-<arch>_Packages[.lz4|...]`` in ``lists_dir``."""
    for suffix in SUFFIXES:
        found = sorted(
            lists_dir.glob(f"*_dists_{suite}_{component}_binary-{arch}_Packages{suffix}")
        )
        if found:
            return found[0]
    raise FileNotFoundError(
        f"no Packages file for {suite}/{component}/binary-{arch} in {lists_dir}; run "
        "apt-get update (with a sources.list entry for that suite), or pass --lists-dir"
    )


def read_text(path: Path) -> str:
    """The decompressed text of an apt list file (apt-helper knows every format apt uses)."""
    if path.suffix == "":
        return path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".gz":
        import gzip

        return gzip.decompress(path.read_bytes()).decode("utf-8", errors="replace")
    if path.suffix == ".xz":
        import lzma

        return lzma.decompress(path.read_bytes()).decode("utf-8", errors="replace")
    helper = shutil.which("apt-helper") or "/usr/lib/apt/apt-helper"
    cmd = [helper, "cat-file", str(path)]
    if not Path(helper).exists() and path.suffix == ".lz4" and shutil.which("lz4cat"):
        cmd = ["lz4cat", str(path)]
    return subprocess.run(cmd, check=True, capture_output=True).stdout.decode(
        "utf-8", errors="replace"
    )


def parse_sections(text: str) -> tuple[dict[str, Counter[str]], dict[str, set[str]]]:
    """Per Description-md5: how many packages have each section (area prefix dropped), and
    the packages' names."""
    out: dict[str, Counter[str]] = defaultdict(Counter)
    packages: dict[str, set[str]] = defaultdict(set)
    for para in text.split("\n\n"):
        fields = {}
        for line in para.split("\n"):
            if not line or line[0] in " \t":
                continue
            name, sep, value = line.partition(":")
            if sep:
                fields[name.strip()] = value.strip()
        md5, section = fields.get("Description-md5"), fields.get("Section")
        if md5 and section:
            out[md5][section.rsplit("/", 1)[-1]] += 1
            packages[md5].add(fields.get("Package", ""))
    return out, packages


def choose_label(counts: Counter[str]) -> str:
    """The most frequent section; ties to the alphabetically first."""
    return min(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lists-dir", type=Path, default=DEFAULT_LISTS_DIR)
    ap.add_argument("--suite", default="bookworm")
    ap.add_argument("--component", default="main")
    ap.add_argument("--arch", default="amd64")
    ap.add_argument("--corpus", type=Path, help="keep only this corpus's concept_id values")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    path = find_packages_file(args.lists_dir, args.suite, args.component, args.arch)
    sections, packages = parse_sections(read_text(path))
    concepts = sorted(sections)
    if args.corpus:
        wanted = set(pq.read_table(args.corpus, columns=["concept_id"]).column(0).to_pylist())
        concepts = [c for c in concepts if c in wanted]
        stats_cov = {"corpus_concepts": len(wanted), "labelled": len(concepts)}
    else:
        stats_cov = {"labelled": len(concepts)}
    labels = [choose_label(sections[c]) for c in concepts]
    table = pa.table(
        {
            "concept_id": pa.array(concepts, pa.string()),
            "label": pa.array(labels, pa.string()),
            "package": pa.array([min(packages[c]) for c in concepts], pa.string()),
        }
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name("." + args.out.name + ".tmp")
    pq.write_table(table, tmp, compression="zstd")
    tmp.replace(args.out)
    stats = {
        "source": str(path),
        **stats_cov,
        "conflicting_sections": sum(1 for c in concepts if len(sections[c]) > 1),
        "classes": len(set(labels)),
        "top_classes": Counter(labels).most_common(10),
    }
    json.dump(stats, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
