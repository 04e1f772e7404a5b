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
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.machine import machine_info  # noqa: E402
from pipeline.neural.validation import distractor_rows  # noqa: E402

LANGS = ["en", "de", "fr", "es"]


def parallel_texts(path: Path, n: int, seed: int = 0) -> dict[str, tuple[list, np.ndarray]]:
    """Per language of LANGS, the parallel corpus's texts and 0-based concept indices (its
    concepts in two or more of LANGS; a seeded sample of ``n`` of them when n > 0), as the
    train stage selects them (:func:`pipeline.neural.parallel.parallel_documents`)."""
    import pyarrow.parquet as pq

    from pipeline.neural.parallel import parallel_documents

    table = pq.read_table(path, columns=["concept_id", "lang", "doc_id", "text"])
    return parallel_documents(table, LANGS, n, seed)


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
    save: Path | None = None,
) -> dict:
    """One variant, in this process; its record (and, with ``save``, its model directory
    there, named after the variant: the pipeline's encoder model format)."""
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
    if save is not None:
        save_model(save, beta, sizes, res, vocab.proto)
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


def save_model(where: Path, beta: float, sizes: Any, res: dict, proto: bytes) -> None:
    """The trained weights as an encoder model directory (``load_model`` reads it)."""
    from pipeline.model.format import save_encoder_model

    meta = {
        "method": "ctlaser" if beta > 0 else "tlaser",
        "r": sizes.dim,
        "lam": 0.0,
        "languages": LANGS,
        "encoder": {"sizes": sizes.to_dict(), "threads": 1},
        "solver": {"history": {"epochs": res["history"], "chosen_epoch": res["chosen_epoch"]}},
    }
    save_encoder_model(where, meta, res["weights"], {"subwords.model": proto})


def rescore(models: list[Path], corpus: Path) -> dict[str, float]:
    """Each saved model's validation P@1 recomputed here (on the CPU, through ``load_model``
    and the embedding API): a model trained on another machine scores what it scored there."""
    import pyarrow.parquet as pq

    from pipeline.model.loading import load_model
    from pipeline.neural.validation import validation_p_at_1

    t = pq.read_table(corpus).to_pandas()
    concepts = np.array(sorted(t.concept_id.unique()))
    held = set(np.random.default_rng(0).choice(concepts, 300, replace=False))
    train, val = t[~t.concept_id.isin(held)], t[t.concept_id.isin(held)]
    out = {}
    for path in models:
        model = load_model(path)
        emb, conc, extra = {}, {}, {}
        for i, lang in enumerate(LANGS):
            rows = val[val.lang == lang]
            emb[lang] = np.asarray(model.embed(list(rows.text), lang), dtype=np.float32)
            conc[lang] = rows.concept_id.to_numpy()
            docs = list(train[train.lang == lang].text)
            pick = distractor_rows(len(docs), 2000, seed=i)
            extra[lang] = np.asarray(model.embed([docs[r] for r in pick], lang), np.float32)
        out[path.name] = validation_p_at_1(emb, conc, extra)
    return out


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
    ap.add_argument("--save", type=Path, help="write each variant's model directory here")
    ap.add_argument(
        "--rescore", type=Path, nargs="+", help="saved model directories: recompute their "
        "validation P@1 on this machine and print it (nothing is trained)"
    )  # fmt: skip
    ap.add_argument("--one", help=argparse.SUPPRESS)  # a single variant, in a child process
    args = ap.parse_args(argv)
    if args.rescore:
        for name, score in rescore(args.rescore, args.corpus).items():
            print(f"{name}  validation P@1 {score:.4f}")
        return 0
    if args.parallel_only and not args.parallel:
        ap.error("--parallel-only needs --parallel")
    options = ["--corpus", str(args.corpus), "--device", args.device]
    if args.parallel:
        options += ["--parallel", str(args.parallel)]
        options += ["--parallel-concepts", str(args.parallel_concepts)]
        options += ["--parallel-only"] if args.parallel_only else []
    if args.save:
        options += ["--save", str(args.save)]
    if args.one:
        record = train_variant(
            *parse(args.one),
            args.epochs,
            args.corpus,
            args.parallel,
            args.parallel_concepts,
            args.parallel_only,
            args.device,
            args.save / args.one.replace(":", "_") if args.save else None,
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
