#!/usr/bin/env python3
"""cT-LASER's distance constraint against T-LASER on the DDTP sample, variant by variant.

Trains T-LASER / cT-LASER in one process (one thread) per variant, straight through
:func:`pipeline.neural.loop.run_loop` (no Spark), on the bundled DDTP sample with a seeded
hold-out of 300 concepts as validation documents, and records per epoch the loss and the
validation P@1 (cosine, with 2,000 training-document distractors per language, as the train
stage scores it), plus the trained model's *offset ratio* on the English validation
documents: ‖mean embedding‖ / mean ‖embedding‖ (1: every embedding the same vector; a
large common component makes cosine rank every query's candidates alike).

A variant is ``beta[:margin[:center[:warmup]]]`` (β = 0: T-LASER; center 1: the centred
mean norm, ``train.ctlaser.center``; warmup k: β rises linearly over the first k epochs,
``train.ctlaser.warmup_epochs``). The variants run concurrently, one process each::

    OPENBLAS_NUM_THREADS=1 python bench/bench_ctlaser.py --epochs 2 \\
        --variants 0 0.5:1:0 0.5:1:1 0.5:1.5:1 --out bench/results/ctlaser_variants.json

``--parallel FILE`` adds the pairs of a parallel corpus in the documents contract (e.g.
scripts/build_parallel_corpus.py's), ``--parallel-concepts N`` a seeded sample of N of its
concepts, ``--parallel-only`` trains on them alone (the sample's training documents stay as
negatives and validation distractors, as ``train.tlaser.parallel_only`` does); ``--device``
is the loop's (auto, cpu, cuda).

Model sizes are the train stage's defaults (d_model 128, 2 encoder layers, 4,000 BPE
pieces, 64 subwords per document; batch 64 pairs, Adam 1e-3, seed 0).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.machine import machine_info  # noqa: E402

LANGS = ["en", "de", "fr", "es"]


def parallel_texts(path: Path, n: int, seed: int = 0) -> dict[str, tuple[list, np.ndarray]]:
    """Per language of LANGS, the parallel corpus's texts and 0-based concept indices (its
    concepts in two or more of LANGS; a seeded sample of ``n`` of them when n > 0)."""
    import pyarrow.parquet as pq

    t = pq.read_table(path, columns=["concept_id", "lang", "text"]).to_pandas()
    t = t[t.lang.isin(LANGS)].drop_duplicates(["concept_id", "lang"])
    counts = t.concept_id.value_counts()
    keep = np.sort(counts.index[counts >= 2].to_numpy())
    if 0 < n < keep.size:
        keep = np.sort(np.random.default_rng(seed).choice(keep, n, replace=False))
    t = t[t.concept_id.isin(set(keep))]
    index = {c: i for i, c in enumerate(keep)}
    out = {}
    for lang in LANGS:
        rows = t[t.lang == lang]
        out[lang] = (list(rows.text), np.array([index[c] for c in rows.concept_id], dtype=np.int64))
    return out


def train_variant(
    beta: float,
    margin: float,
    center: bool,
    warmup: int,
    epochs: int,
    corpus: Path,
    parallel: Path | None = None,
    parallel_concepts: int = 0,
    parallel_only: bool = False,
    device: str = "cpu",
) -> dict:
    """One variant, in this process; its record."""
    import pyarrow.parquet as pq
    import torch

    from pipeline.neural.loop import LoopSettings, run_loop
    from pipeline.neural.tlaser import EncoderSizes, SubwordVocabulary, TLaserTask, encode_texts

    t = pq.read_table(corpus).to_pandas()
    concepts = np.array(sorted(t.concept_id.unique()))
    held = set(np.random.default_rng(0).choice(concepts, 300, replace=False))
    train, val = t[~t.concept_id.isin(held)], t[t.concept_id.isin(held)]
    index = {c: i for i, c in enumerate(concepts)}
    extra = parallel_texts(parallel, parallel_concepts) if parallel else None
    texts = list(train.text) + ([x for v in extra.values() for x in v[0]] if extra else [])
    vocab = SubwordVocabulary.train(texts, LANGS, 4000)
    sizes = EncoderSizes(vocab=len(vocab), dim=128, heads=4, layers=2, ff=256, max_tokens=64)

    def part(frame, lang):
        rows = frame[frame.lang == lang]
        return vocab.encode(list(rows.text), 64), np.array([index[c] for c in rows.concept_id])

    validation = {lang: part(val, lang) for lang in LANGS}
    training = {lang: part(train, lang) for lang in LANGS}
    pool = [len(training[lang][0]) for lang in LANGS]
    ids = [training[lang][0] for lang in LANGS]
    conc = [training[lang][1] for lang in LANGS]
    if parallel_only:  # unique negative concepts: no pairs among the sample's documents
        conc = [-1 - (i + np.arange(len(c)) * len(LANGS)) for i, c in enumerate(conc)]
    if extra:
        offset = len(concepts)
        ids = [x + vocab.encode(extra[lang][0], 64) for x, lang in zip(ids, LANGS)]
        conc = [np.concatenate([c, extra[lang][1] + offset]) for c, lang in zip(conc, LANGS)]
    task = TLaserTask(
        langs=LANGS,
        ids=ids,
        concepts=conc,
        tags=[vocab.tag(lang) for lang in LANGS],
        sizes=sizes,
        beta=beta,
        margin=margin,
        center=center,
        warmup_epochs=warmup,
        validation=validation,
        distractors=2000,
        distractor_pool=pool,
    )
    t0 = time.perf_counter()
    settings = LoopSettings(epochs=epochs, batch_size=64, lr=1e-3, seed=0, device=device)
    res = run_loop(task, settings)
    model = task.build()
    model.load_state_dict({k: torch.tensor(v) for k, v in res["weights"].items()})
    model.eval()
    e = encode_texts(torch, model, validation["en"][0])
    offset = np.linalg.norm(e.mean(axis=0)) / np.linalg.norm(e, axis=1).mean()
    return {
        "beta": beta,
        "margin": margin,
        "center": center,
        "warmup_epochs": warmup,
        "parallel": str(parallel) if parallel else None,
        "parallel_concepts": parallel_concepts,
        "parallel_only": parallel_only,
        "pairs": task.n_items,
        "device": device,
        "history": res["history"],
        "offset_ratio": round(float(offset), 4),
        "seconds": round(time.perf_counter() - t0, 1),
    }


def parse(variant: str) -> tuple[float, float, bool, int]:
    given = variant.split(":")
    parts = given + ["1", "0", "0"][len(given) - 1 :]
    return float(parts[0]), float(parts[1]), parts[2] == "1", int(parts[3])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variants", nargs="+", default=["0", "0.5:1:0", "0.5:1:1", "0.5:1.5:1"])
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--corpus", type=Path, default=REPO / "data/sample/ddtp_en_de_fr_es.parquet")
    ap.add_argument("--out", type=Path, default=REPO / "bench/results/ctlaser_variants.json")
    ap.add_argument("--parallel", type=Path, help="a parallel corpus adding training pairs")
    ap.add_argument("--parallel-concepts", type=int, default=0, help="sample size (0: all)")
    ap.add_argument("--parallel-only", action="store_true", help="train on its pairs alone")
    ap.add_argument("--device", default="cpu", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--one", help=argparse.SUPPRESS)  # a single variant, in a child process
    args = ap.parse_args(argv)
    if args.parallel_only and not args.parallel:
        ap.error("--parallel-only needs --parallel")
    options = ["--corpus", str(args.corpus), "--device", args.device]
    if args.parallel:
        options += ["--parallel", str(args.parallel)]
        options += ["--parallel-concepts", str(args.parallel_concepts)]
        options += ["--parallel-only"] if args.parallel_only else []
    if args.one:
        record = train_variant(
            *parse(args.one),
            args.epochs,
            args.corpus,
            args.parallel,
            args.parallel_concepts,
            args.parallel_only,
            args.device,
        )
        print(json.dumps(record))
        return 0
    children = []
    for v in args.variants:
        cmd = [sys.executable, __file__, "--one", v, "--epochs", str(args.epochs), *options]
        children.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True))
    runs = []
    for child in children:
        out, _ = child.communicate()
        if child.returncode:
            raise SystemExit(f"a variant failed (exit {child.returncode})")
        runs.append(json.loads(out.strip().splitlines()[-1]))
    result = {"machine": machine_info(), "epochs": args.epochs, "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    for r in runs:
        scores = " ".join(f"{h['validation_p_at_1']:.3f}" for h in r["history"])
        print(f"beta {r['beta']:<4} margin {r['margin']:<4} center {int(r['center'])}  "
              f"warmup {r.get('warmup_epochs', 0)}  "
              f"validation P@1 by epoch {scores}  offset {r['offset_ratio']:.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
