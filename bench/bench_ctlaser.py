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


def train_variant(
    beta: float, margin: float, center: bool, warmup: int, epochs: int, corpus: Path
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
    vocab = SubwordVocabulary.train(list(train.text), LANGS, 4000)
    sizes = EncoderSizes(vocab=len(vocab), dim=128, heads=4, layers=2, ff=256, max_tokens=64)

    def part(frame, lang):
        rows = frame[frame.lang == lang]
        return vocab.encode(list(rows.text), 64), np.array([index[c] for c in rows.concept_id])

    validation = {lang: part(val, lang) for lang in LANGS}
    training = {lang: part(train, lang) for lang in LANGS}
    task = TLaserTask(
        langs=LANGS,
        ids=[training[lang][0] for lang in LANGS],
        concepts=[training[lang][1] for lang in LANGS],
        tags=[vocab.tag(lang) for lang in LANGS],
        sizes=sizes,
        beta=beta,
        margin=margin,
        center=center,
        warmup_epochs=warmup,
        validation=validation,
        distractors=2000,
    )
    t0 = time.perf_counter()
    res = run_loop(task, LoopSettings(epochs=epochs, batch_size=64, lr=1e-3, seed=0))
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
    ap.add_argument("--one", help=argparse.SUPPRESS)  # a single variant, in a child process
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(train_variant(*parse(args.one), args.epochs, args.corpus)))
        return 0
    children = []
    for v in args.variants:
        cmd = [sys.executable, __file__, "--one", v, "--epochs", str(args.epochs)]
        cmd += ["--corpus", str(args.corpus)]
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
