#!/usr/bin/env python3
"""The neural methods beside Cr5 and the baselines on the DDTP en/de/fr/es corpus: the
retrieval table, the crosslingual classification table, and training time and memory.

Runs the demo chain (``jobs/chain.py --stages demo`` with conf/local.yaml,
conf/short-docs.yaml, conf/sample.yaml: splits of 200 + 200 concepts per pair, r = 100, λ
chosen on validation) with ``evaluate.methods`` extended by xcnn, tlaser and ctlaser and
``evaluate.classify_labels`` set to the Debian sections (scripts/build_ddtp_labels.py), in a
subprocess, then reads the evaluation report and each model's training record:

- retrieval: mean P@1 and MRR (cosine) over the 12 directions, per method;
- classification: same / cross / all accuracy per method, with the majority-class and
  same-language TF-IDF references;
- training: fit seconds per method, and its ratio to Cr5's fit in the same run (the
  baseline); the neural methods' seconds per epoch, epochs, chosen epoch, processes and each
  training process's peak resident memory;
- pools: each model's test P@1 (cosine, mean over directions) with three candidate pools:
  every document of the target language (the evaluation's pool on this corpus, where each
  language has fewer documents than ``evaluate.max_candidates``: training documents are
  distractors), the held-out (test + validation) documents only, and the test documents only
  (the kind of pool the per-epoch validation P@1 ranks in). A method whose score falls far
  more than Cr5's from the last to the first has learned its training documents rather
  than the languages.

    nice -n 10 python bench/bench_neural.py --out bench/results/neural_ddtp_sample

writes ``<out>.json`` (everything, with the machine) and ``<out>.txt`` (the tables).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.machine import machine_info  # noqa: E402

#: Every method of the field beside Cr5 (the model's own method).
METHODS = [
    "untranslated", "cl_lsi", "cca", "opca", "jplsa", "cplsa", "s2net", "xcnn", "tlaser", "ctlaser"
]  # fmt: skip


def run_chain(
    root: Path, corpus: Path, labels: Path, extra: list[str], methods: list[str]
) -> float:
    """The demo chain with the neural methods and classification; its wall seconds."""
    sets = [
        f"paths.root={root}",
        f"ingest.input={corpus}",
        f"evaluate.methods=[{', '.join(methods)}]",
        f"evaluate.classify_labels={labels}",
        "evaluate.plot=false",
        *extra,
    ]
    cmd = [sys.executable, str(REPO / "jobs" / "chain.py"), "--stages", "demo"]
    for conf in ("local.yaml", "short-docs.yaml", "sample.yaml"):
        cmd += ["--conf", str(REPO / "conf" / conf)]
    for s in sets:
        cmd += ["--set", s]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    return time.perf_counter() - t0


def summarise(report: dict) -> dict:
    """Per method: retrieval means, classification, training cost."""
    methods = report["methods"]
    cr5_fit = methods["cr5"].get("fit_seconds")
    out = {}
    for name, info in methods.items():
        rows = [r for r in report["results"] if r["method"] == name and r["measure"] == "cosine"]
        model = json.loads((Path(info["model"]) / "model.json").read_text())
        hist = model.get("solver", {}).get("history", {})
        epochs = hist.get("epochs") or []
        fit = info.get("fit_seconds")
        out[name] = {
            "directions": len(rows),
            "p_at_1": float(
                np.mean(
                    [
                        r["precision_at"][str(1)]
                        if str(1) in r["precision_at"]
                        else r["precision_at"][1]
                        for r in rows
                    ]
                )
            )
            if rows
            else None,
            "mrr": float(np.mean([r["mrr"] for r in rows])) if rows else None,
            "r": info["r"],
            "fit_seconds": fit,
            "fit_over_cr5": round(fit / cr5_fit, 2) if fit and cr5_fit else None,
            "epochs": len(epochs) or None,
            "seconds_per_epoch": float(np.mean([e["seconds"] for e in epochs])) if epochs else None,
            "chosen_epoch": hist.get("chosen_epoch"),
            "validation_p_at_1": [e["validation_p_at_1"] for e in epochs] or None,
            "processes": hist.get("processes"),
            "peak_rss_mb_per_process": hist.get("peak_rss_mb_per_process"),
        }
    return out


def pool_effect(root: Path, report: dict) -> dict:
    """Per method: test P@1 (cosine) with candidates = all / held-out / test documents of
    the target language (see the module docstring), and with all documents once more after
    subtracting each language's mean embedding (over all its documents) before the cosine:
    ``centred`` (None for sparse embeddings)."""
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    from pipeline.evaluation.classify import unit_rows
    from pipeline.model.loading import load_model
    from pipeline.ranking import pessimistic_ranks

    splits = pq.read_table(root / "splits").to_pydict()
    test = {c for c, r in zip(splits["concept_id"], splits["role"]) if r == "test"}
    heldout = set(splits["concept_id"])
    docs = ds.dataset(root / "documents", partitioning="hive").to_table().to_pydict()
    langs = sorted(set(docs["lang"]))
    concepts = {lang: np.array([c for c, x in zip(docs["concept_id"], docs["lang"]) if x == lang])
                for lang in langs}  # fmt: skip
    texts = {lang: [t for t, x in zip(docs["text"], docs["lang"]) if x == lang] for lang in langs}
    pools = {
        "all": lambda c: np.ones(c.size, bool),
        "heldout": lambda c: np.isin(c, list(heldout)),
        "test": lambda c: np.isin(c, list(test)),
    }
    out = {}
    for name, info in report["methods"].items():
        model = load_model(info["model"])
        raw = {lang: model.embed(texts[lang], lang).astype(np.float64) for lang in langs}
        out[name] = {}
        variants = [(pool, keep, False) for pool, keep in pools.items()]
        if not any(sp.issparse(x) for x in raw.values()):
            variants.append(("centred", pools["all"], True))
        for pool, keep, centre in variants:
            emb = {lang: unit_rows(x - x.mean(axis=0) if centre else x) for lang, x in raw.items()}
            scores = []
            for a in langs:
                for b in langs:
                    if a == b:
                        continue
                    cand = np.flatnonzero(keep(concepts[b]))
                    where: dict[str, int] = {}
                    for i, c in enumerate(concepts[b][cand]):
                        where.setdefault(c, i)
                    q = [i for i, c in enumerate(concepts[a]) if c in test and c in where]
                    if not q:
                        continue
                    target = np.array([where[concepts[a][i]] for i in q])
                    sims = emb[a][q] @ emb[b][cand].T
                    sims = sims.toarray() if sp.issparse(sims) else sims
                    ranks = pessimistic_ranks(sims, target)
                    scores.append(float(np.mean(ranks == 1)))
            out[name][pool] = float(np.mean(scores)) if scores else None
    return out


def tables(summary: dict, classification: dict | None, pools: dict | None = None) -> str:
    def f(v: float | None, fmt: str = ".3f") -> str:
        return "–" if v is None else format(v, fmt)

    lines = [
        "Retrieval (mean over directions, cosine):",
        f"{'method':<14}{'P@1':>7}{'MRR':>7}{'r':>5}{'fit s':>9}{'/cr5':>7}{'s/epoch':>9}"
        f"{'epochs':>7}{'chosen':>7}{'RSS MB':>8}",
    ]
    for name, s in summary.items():
        lines.append(
            f"{name:<14}{f(s['p_at_1']):>7}{f(s['mrr']):>7}{s['r']:>5}"
            f"{f(s['fit_seconds'], '.1f'):>9}{f(s['fit_over_cr5'], '.2f'):>7}"
            f"{f(s['seconds_per_epoch'], '.1f'):>9}{s['epochs'] or '–':>7}"
            f"{s['chosen_epoch'] or '–':>7}{f(s['peak_rss_mb_per_process'], '.0f'):>8}"
        )
    if pools:
        lines += [
            "",
            "Test P@1 (cosine) by candidate pool: all documents / held-out / test; and all "
            "documents with each language's mean embedding subtracted:",
        ]
        for name, p in pools.items():
            lines.append(
                f"{name:<14}{f(p['all']):>7}{f(p['heldout']):>7}{f(p['test']):>7}"
                f"{f(p.get('centred')):>7}"
            )
    if classification:
        lines += ["", "Classification accuracy (Debian sections; same / cross / all):"]
        named = {**classification["methods"], **classification["references"]}
        for name, c in named.items():
            lines.append(f"{name:<14}{f(c['same']):>7}{f(c['cross']):>7}{f(c['all']):>7}")
        docs = ", ".join(
            f"{k} {v['train']}/{v['test']}" for k, v in classification["documents"].items()
        )
        lines.append(f"documents train/test: {docs}; {len(classification['classes'])} classes")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", type=Path, default=Path("/tmp/cr5-bench-neural"))
    ap.add_argument("--corpus", type=Path, default=REPO / "data/sample/ddtp_en_de_fr_es.parquet")
    ap.add_argument("--labels", type=Path, default=REPO / "data/sample/ddtp_sections.parquet")
    ap.add_argument("--set", action="append", default=[], help="more --set overrides")
    ap.add_argument("--out", type=Path, default=REPO / "bench/results/neural_ddtp_sample")
    ap.add_argument("--report-only", action="store_true", help="summarise an existing run")
    ap.add_argument(
        "--methods",
        default=",".join(METHODS),
        help="comma-separated evaluate.methods (default: every method; the splits are seeded, "
        "so runs with different methods score the same test concepts)",
    )
    args = ap.parse_args(argv)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    wall = (
        0.0
        if args.report_only
        else run_chain(args.root, args.corpus, args.labels, args.set, methods)
    )
    report = json.loads((args.root / "reports" / "evaluation.json").read_text())
    summary = summarise(report)
    pools = pool_effect(args.root, report)
    text = tables(summary, report.get("classification"), pools)
    result = {
        "machine": machine_info(),
        "corpus": str(args.corpus),
        "labels": str(args.labels),
        "overrides": args.set,
        "chain_wall_seconds": round(wall, 1),
        "training_documents": report.get("training_documents"),
        "methods": summary,
        "classification": report.get("classification"),
        "pools": pools,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1, default=str))
    args.out.with_suffix(".txt").write_text(text + f"\nchain wall: {wall:.0f} s\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
