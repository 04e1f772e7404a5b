#!/usr/bin/env python3
"""Where an encoder trained on parallel segments aligns its languages: on its training
pairs, on held-out pairs of the same corpus, or on the evaluation's documents.

For each trained encoder model directory (T-LASER, cT-LASER; ``load_model``) and one
language pair, three sets of ``--n`` translation pairs are embedded:

- ``train segments``: concepts of the parallel corpus that trained the model (the seeded
  sample of ``parallel_max_concepts`` that :func:`pipeline.neural.parallel.parallel_documents`
  draws over the training languages, redrawn here by the same rule);
- ``held-out segments``: concepts of the same corpus outside that sample;
- ``DDTP test documents``: the evaluation's test concepts of the pair (the chain's
  ``splits`` and ``documents`` datasets under ``--root``).

and each set is scored on its own, the same way: P@1 (cosine) of the source side against
the set's target side (``--n`` candidates), the mean translation distance ‖ea − eb‖ / m and
the mean distance to a random other target ‖ea − eb'‖ / m (m: the set's mean vector norm,
cT-LASER's normaliser), and the offset ratio ‖mean e‖ / mean ‖e‖. A constraint that aligns
its training pairs but not held-out ones memorises; one that aligns held-out segments but
not documents learns the segments' domain; one that aligns neither fails to optimise.

    OPENBLAS_NUM_THREADS=1 python bench/neural_transfer.py --root /tmp/neural-full-par \\
        --parallel data/parallel/debian_l10n_en_de_fr_es.parquet --max-concepts 20000 \\
        --models /tmp/neural-full-par/baseline_models/tlaser \\
                 /tmp/neural-full-par/baseline_models/ctlaser \\
        --out bench/results/neural_transfer_debian.json

``--documents CORPUS`` scores models that bench/bench_ctlaser.py trained on a document
corpus (``--save``): pairs of its training concepts and of its held-out concepts.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.machine import machine_info  # noqa: E402
from pipeline.model.loading import load_model  # noqa: E402


def segment_pairs(
    path: Path, src: str, tgt: str, langs: list[str], max_concepts: int, seed: int, n: int
) -> dict[str, tuple[list[str], list[str]]]:
    """``n`` (source, target) text pairs of the concepts the models trained on (the train
    stage's seeded sample over ``langs``) and ``n`` of the corpus's other concepts."""
    table = pq.read_table(path, columns=["concept_id", "lang", "doc_id", "text"])
    sample = _sample_ids(table, langs, max_concepts, seed)
    df = table.filter(pc.is_in(table.column("lang"), value_set=pa.array([src, tgt])))
    by, both = _by_concept(df.to_pandas(), src, tgt)
    inside = np.isin(both, sample)
    rng = np.random.default_rng(seed + 1)
    print(f"{path.name}: {sample.size} trained concepts, {inside.sum()} of them in {src} and "
          f"{tgt}; {(~inside).sum()} other concepts in both")  # fmt: skip
    return {
        "train segments": _drawn(by, src, tgt, both[inside], n, rng),
        "held-out segments": _drawn(by, src, tgt, both[~inside], n, rng),
    }


def _by_concept(df: Any, src: str, tgt: str) -> tuple[dict[str, Any], np.ndarray]:
    """Each language's first document per concept (by doc_id, as training takes them): the
    texts by concept id, and the sorted concepts that have both languages."""
    df = df.sort_values(["concept_id", "lang", "doc_id"]).drop_duplicates(["concept_id", "lang"])
    by = {lang: df[df.lang == lang].set_index("concept_id").text for lang in (src, tgt)}
    return by, np.array(sorted(set(by[src].index) & set(by[tgt].index)))


def _drawn(
    by: dict[str, Any], src: str, tgt: str, concepts: np.ndarray, n: int, rng: Any
) -> tuple[list[str], list[str]]:
    """The (source, target) texts of a seeded draw of up to ``n`` of ``concepts``."""
    chosen = np.sort(rng.choice(concepts, min(n, concepts.size), replace=False))
    return [by[src][c] for c in chosen], [by[tgt][c] for c in chosen]


def _sample_ids(table: pa.Table, langs: list[str], max_concepts: int, seed: int) -> np.ndarray:
    """The sorted concept ids ``parallel_documents`` keeps (the same rule: two or more of
    ``langs``, then the seeded sample)."""
    t = table.filter(pc.is_in(table.column("lang"), value_set=pa.array(langs)))
    t = t.group_by(["concept_id"]).aggregate([("lang", "count_distinct")])
    ids = np.sort(
        t.filter(pc.greater_equal(t.column("lang_count_distinct"), 2))
        .column("concept_id")
        .to_numpy(zero_copy_only=False)
    )
    if 0 < max_concepts < ids.size:
        ids = np.sort(np.random.default_rng(seed).choice(ids, max_concepts, replace=False))
    return ids


def document_pairs(
    path: Path, src: str, tgt: str, heldout: int, seed: int, n: int
) -> dict[str, tuple[list[str], list[str]]]:
    """``n`` (source, target) document pairs of a corpus's training concepts and up to
    ``n`` of its held-out ones, held out as bench/bench_ctlaser.py holds them out (a seeded
    choice of ``heldout`` concepts, seed 0)."""
    t = pq.read_table(path, columns=["concept_id", "lang", "doc_id", "text"]).to_pandas()
    concepts = np.array(sorted(t.concept_id.unique()))
    held = set(np.random.default_rng(0).choice(concepts, heldout, replace=False))
    by, both = _by_concept(t, src, tgt)
    inside = ~np.isin(both, list(held))
    rng = np.random.default_rng(seed + 1)
    return {
        "train documents": _drawn(by, src, tgt, both[inside], n, rng),
        "held-out documents": _drawn(by, src, tgt, both[~inside], n, rng),
    }


def ddtp_pairs(root: Path, src: str, tgt: str, n: int) -> tuple[list[str], list[str]]:
    """The evaluation's test concepts of the pair ``src-tgt``: their two documents."""
    pair = "-".join(sorted([src, tgt]))
    splits = ds.dataset(root / "splits", format="parquet").to_table().to_pandas()
    test = set(splits[(splits.pair == pair) & (splits.role == "test")].concept_id)
    docs = ds.dataset(root / "documents", format="parquet", partitioning="hive")
    docs = docs.to_table(columns=["concept_id", "lang", "doc_id", "text"]).to_pandas()
    by, both = _by_concept(docs[docs.concept_id.isin(test)], src, tgt)
    return [by[src][c] for c in both[:n]], [by[tgt][c] for c in both[:n]]


def score(ea: np.ndarray, eb: np.ndarray, seed: int) -> dict[str, float]:
    """P@1 (cosine) of ea's rows against eb's, the normalised translation and random-pair
    distances, and the offset ratio."""
    e = np.vstack([ea, eb]).astype(np.float64)
    m = float(np.linalg.norm(e, axis=1).mean())
    other = np.random.default_rng(seed).permutation(len(eb))
    na = ea / np.linalg.norm(ea, axis=1, keepdims=True)
    nb = eb / np.linalg.norm(eb, axis=1, keepdims=True)
    p1 = float(np.mean(np.argmax(na @ nb.T, axis=1) == np.arange(len(ea))))
    return {
        "p_at_1": round(p1, 4),
        "translation_distance_over_m": round(float(np.linalg.norm(ea - eb, axis=1).mean()) / m, 4),
        "random_pair_distance_over_m": round(
            float(np.linalg.norm(ea - eb[other], axis=1).mean()) / m, 4
        ),
        "offset_ratio": round(float(np.linalg.norm(e.mean(axis=0))) / m, 4),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", type=Path, help="the chain's paths.root (its DDTP test pairs)")
    ap.add_argument("--parallel", type=Path, help="the parallel corpus the models trained on")
    ap.add_argument("--max-concepts", type=int, default=0, help="its parallel_max_concepts")
    ap.add_argument(
        "--documents",
        type=Path,
        help="a document corpus the models trained on, with bench_ctlaser.py's hold-out",
    )
    ap.add_argument("--heldout", type=int, default=300, help="bench_ctlaser.py's held-out count")
    ap.add_argument("--seed", type=int, default=0, help="train.seed of the models' run")
    ap.add_argument("--pair", default="en-de", help="source-target languages")
    ap.add_argument("--langs", default="de,en,es,fr", help="the models' training languages")
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--models", type=Path, nargs="+", required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    src, tgt = args.pair.split("-")
    langs = args.langs.split(",")
    sets: dict[str, tuple[list[str], list[str]]] = {}
    if args.parallel:
        sets |= segment_pairs(args.parallel, src, tgt, langs, args.max_concepts, args.seed, args.n)
    if args.documents:
        sets |= document_pairs(args.documents, src, tgt, args.heldout, args.seed, args.n)
    if args.root:
        sets["DDTP test documents"] = ddtp_pairs(args.root, src, tgt, args.n)
    if not sets:
        ap.error("name the pairs to score: --parallel, --documents and/or --root")
    result: dict = {"machine": machine_info(), "args": {k: str(v) for k, v in vars(args).items()}}
    head = ("model", "pairs", "P@1", "d(a,b)/m", "d(a,b')/m", "offset")
    lines = ["{:<10}{:<22}{:>7}{:>10}{:>11}{:>8}".format(*head)]
    for path in args.models:
        model = load_model(path)
        name = path.name
        result[name] = {}
        for label, (a, b) in sets.items():
            t0 = time.perf_counter()
            s = score(model.embed(a, src), model.embed(b, tgt), args.seed)
            s["pairs"], s["seconds"] = len(a), round(time.perf_counter() - t0, 1)
            result[name][label] = s
            lines.append(
                f"{name:<10}{label:<22}{s['p_at_1']:>7.3f}"
                f"{s['translation_distance_over_m']:>10.3f}"
                f"{s['random_pair_distance_over_m']:>11.3f}{s['offset_ratio']:>8.3f}"
            )
    text = "\n".join(lines)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1))
    args.out.with_suffix(".txt").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
