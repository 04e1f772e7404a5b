"""Stage ``translate_words``: word translation on a bilingual lexicon.

The lexicon (``words.lexicon``, source language ``words.pair[0]``) is restricted to the pairs
whose words every evaluated method knows (the model's vocabularies for ``cr5``, the word2vec
vocabularies for ``procrustes``/``rcsls``), then split by source word (seeded): ``n_test`` test
words, ``n_validation`` validation words (RCSLS's learning rate and epochs), the rest trains the
maps. All methods are scored on the same test words with :func:`~pipeline.wordmap.translation.
word_translation` (cosine and CSLS, P@1/5/10, a word is correct when any translation ranks
within k; candidates are the ``max_candidates`` most frequent target words of each method's
vocabulary).

Methods: ``cr5``: rows of Φ_lᵀ of the model at ``paths.model`` (words looked up through the
model's own tokeniser); ``cr5_phi_star``: rows of the same model's Φ_l*ᵀ = Φ_lᵀ Λ^{1/2} Qᵀ
(before Eq. 15's orthonormalisation; needs a model saved with Λ and Q); ``procrustes``:
orthogonal map of the normalised word2vec vectors fitted on the training pairs;
``procrustes_refined`` (``words.refine_iterations > 0``): that map refitted on mutual CSLS
nearest neighbours; ``rcsls``: RCSLS from the Procrustes start.
Writes ``words.json`` and ``words.md`` (atomically) to ``words.report_dir``.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pyspark.sql import SparkSession

from pipeline.config import Config
from pipeline.errors import ConfigError
from pipeline.io.storage import join, write_file
from pipeline.model.cr5_model import Cr5Model
from pipeline.model.format import load_model_files, save_model
from pipeline.stages.word_vectors import word_vectors_dir
from pipeline.wordmap.documents import averaged_word_vector_map
from pipeline.wordmap.lexicon import Lexicon, LexiconSplit, read_lexicon, split_lexicon
from pipeline.wordmap.mapping import (
    fit_rcsls,
    mutual_nn_dictionary,
    normalize_embeddings,
    procrustes,
)
from pipeline.wordmap.store import WordVectors, local_dir, read_word_vectors
from pipeline.wordmap.translation import word_translation

__all__ = ["format_words_table", "run"]

logger = logging.getLogger(__name__)

KS = (1, 5, 10)
#: words.methods served by the Cr5 model, and the word vector variant each uses.
CR5_VARIANTS = {"cr5": "phi", "cr5_phi_star": "phi_star"}


def _pairs_index(lex: Lexicon, s_words: list[str], t_words: list[str]) -> tuple[np.ndarray, ...]:
    si = {w: i for i, w in enumerate(s_words)}
    ti = {w: i for i, w in enumerate(t_words)}
    rows = [(si[s], ti[t]) for s, t in lex.pairs if s in si and t in ti]
    a = np.asarray(rows, dtype=np.int64).reshape(-1, 2)
    return a[:, 0], a[:, 1]


def _score(method: str, lex, sw, sv, tw, tv, cfg: Config, **extra: Any) -> list[dict[str, Any]]:
    w = cfg.words
    out = []
    for measure in ("cosine", "csls"):
        res = word_translation(
            lex,
            sw,
            sv,
            tw,
            tv,
            similarity=measure,
            precision_at=KS,
            max_candidates=w.max_candidates,
            csls_k=w.csls_k,
        )
        out.append(
            {
                "method": method,
                "measure": measure,
                "query_lang": w.pair[0],
                "target_lang": w.pair[1],
                "precision_at": res.precision,
                "mrr": res.mrr,
                "n_queries": res.n_queries,
                "n_candidates": res.n_candidates,
                "n_unreachable": res.n_unreachable,
                "n_oov": res.n_oov,
                **extra,
            }
        )
    return out


def format_words_table(results: list[dict[str, Any]]) -> str:
    """Markdown table: one row per method × measure."""
    lines = [
        "| method | measure | P@1 | P@5 | P@10 | MRR | queries | candidates |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        p = r["precision_at"]
        lines.append(
            f"| {r['method']} | {r['measure']} | {p[1]:.3f} | {p[5]:.3f} | {p[10]:.3f} | "
            f"{r['mrr']:.3f} | {r['n_queries']} | {r['n_candidates']} |"
        )
    return "\n".join(lines)


@dataclass
class _MethodVectors:
    """The word vectors the methods are scored with, read once.

    Attributes
    ----------
    model : Cr5Model or None
        The model at ``paths.model`` (when a Cr5 method is evaluated).
    cr5 : dict of str to tuple
        Per Cr5 method: source words, their vectors (n_s, r), target words, their vectors.
    source, target : WordVectors or None
        The word2vec vectors of the pair (when procrustes or rcsls is evaluated).
    vocabularies : list of (set of str, set of str)
        The source and target words each kind of method knows.
    """

    model: Cr5Model | None = None
    cr5: dict[str, tuple[list[str], np.ndarray, list[str], np.ndarray]] = field(
        default_factory=dict
    )
    source: WordVectors | None = None
    target: WordVectors | None = None
    vocabularies: list[tuple[set[str], set[str]]] = field(default_factory=list)


def run(spark: SparkSession, cfg: Config) -> dict[str, Any]:
    """The registered stage: score ``words.methods`` on the lexicon's test words, save the
    averaged-word-vector document models, write ``words.json`` and ``words.md``."""
    w = cfg.words
    t_start = time.perf_counter()
    if not w.lexicon:
        raise ConfigError(
            "words.lexicon is not set; build one with scripts/build_lexicon.py and pass "
            "--set words.lexicon=<path.tsv>"
        )
    src, tgt = w.pair
    lexicon = read_lexicon(w.lexicon)
    vectors = _read_vectors(cfg)
    if vectors.model is not None:
        lexicon = lexicon.tokenized(vectors.model.tokenizer)
    n_lexicon = len(lexicon)
    for sv_, tv_ in vectors.vocabularies:
        lexicon = lexicon.restrict(sv_, tv_)
    split = split_lexicon(lexicon, n_test=w.n_test, n_validation=w.n_validation, seed=w.seed)
    sizes = {
        "lexicon_pairs": n_lexicon,
        "usable_pairs": len(lexicon),
        **{
            f"{part}_words": len(getattr(split, part).source_words)
            for part in ("train", "validation", "test")
        },
    }
    logger.info("translate_words %s->%s: %s", src, tgt, sizes)
    results: list[dict[str, Any]] = []
    selection: dict[str, Any] = {}
    for method, (c_sw, c_sv, c_tw, c_tv) in vectors.cr5.items():
        results += _score(method, split.test, c_sw, c_sv, c_tw, c_tv, cfg)
    if vectors.source is not None and vectors.target is not None:
        wv_s, wv_t = vectors.source, vectors.target
        yt = normalize_embeddings(wv_t.vectors)
        maps = _map_word_vectors(cfg, split, wv_s, wv_t, yt, results, selection)
        if vectors.model is not None and maps:
            selection["document_models"] = _document_models(
                cfg, vectors.model, maps, wv_s.words, wv_t.words, yt
            )
    report = _report(cfg, sizes, selection, results, t_start)
    return _write_reports(cfg, report, results, sizes, selection)


def _read_vectors(cfg: Config) -> _MethodVectors:
    """The Cr5 model's word vectors (``cr5``, ``cr5_phi_star``) and the word2vec vectors
    (``procrustes``, ``rcsls``) of the pair, for the methods of ``words.methods``."""
    w = cfg.words
    src, tgt = w.pair
    out = _MethodVectors()
    if set(CR5_VARIANTS) & set(w.methods):
        out.model = Cr5Model.load(cfg.paths.dataset("model"))
        for method, variant in CR5_VARIANTS.items():
            if method in w.methods:
                c_sw, c_sv = out.model.word_vectors(src, variant)
                c_tw, c_tv = out.model.word_vectors(tgt, variant)
                out.cr5[method] = (c_sw, c_sv, c_tw, c_tv)
        out.vocabularies.append((set(c_sw), set(c_tw)))
    if {"procrustes", "rcsls"} & set(w.methods):
        root = local_dir(word_vectors_dir(cfg), "paths.word_vectors")
        out.source, out.target = read_word_vectors(root, src), read_word_vectors(root, tgt)
        out.vocabularies.append((set(out.source.words), set(out.target.words)))
    return out


def _map_word_vectors(
    cfg: Config,
    split: LexiconSplit,
    wv_s: WordVectors,
    wv_t: WordVectors,
    yt: np.ndarray,
    results: list[dict[str, Any]],
    selection: dict[str, Any],
) -> dict[str, np.ndarray]:
    """Fit the word2vec maps of ``words.methods`` on the training pairs and score each;
    append their rows to ``results`` and their choices to ``selection``. Returns, per
    method, the source vectors mapped into the target space (``yt``: the normalised
    target vectors)."""
    w = cfg.words
    maps: dict[str, np.ndarray] = {}
    xs = normalize_embeddings(wv_s.vectors)
    i, j = _pairs_index(split.train, wv_s.words, wv_t.words)
    w_proc = procrustes(xs[i], yt[j]).astype(np.float32)
    if "procrustes" in w.methods:
        maps["procrustes"] = xs @ w_proc
        results += _score(
            "procrustes", split.test, wv_s.words, maps["procrustes"], wv_t.words, yt, cfg
        )
        if w.refine_iterations:
            w_ref, selection["refined_dictionary_pairs"] = _refine_procrustes(cfg, xs, yt, w_proc)
            maps["procrustes_refined"] = xs @ w_ref
            results += _score(
                "procrustes_refined",
                split.test,
                wv_s.words,
                maps["procrustes_refined"],
                wv_t.words,
                yt,
                cfg,
            )
    if "rcsls" in w.methods:
        w_rcsls, selection["rcsls"] = _select_rcsls(
            cfg, split, wv_s.words, xs, wv_t.words, yt, w_proc
        )
        maps["rcsls"] = xs @ w_rcsls
        results += _score(
            "rcsls",
            split.test,
            wv_s.words,
            xs @ w_rcsls,
            wv_t.words,
            yt,
            cfg,
            lr=selection["rcsls"]["lr"],
            epochs=selection["rcsls"]["epochs"],
        )
    return maps


def _refine_procrustes(
    cfg: Config, xs: np.ndarray, yt: np.ndarray, w_proc: np.ndarray
) -> tuple[np.ndarray, int]:
    """``words.refine_iterations`` refits of the Procrustes map on the mutual CSLS nearest
    neighbours among the ``words.refine_vocabulary`` most frequent words; (map, number of
    pairs of the last dictionary)."""
    w = cfg.words
    w_ref = w_proc
    n_r = w.refine_vocabulary
    for _ in range(w.refine_iterations):
        d = mutual_nn_dictionary(xs[:n_r] @ w_ref, yt[:n_r], k=w.csls_k)
        w_ref = procrustes(xs[d[:, 0]], yt[d[:, 1]]).astype(np.float32)
    return w_ref, len(d)


def _report(
    cfg: Config,
    sizes: dict[str, int],
    selection: dict[str, Any],
    results: list[dict[str, Any]],
    t_start: float,
) -> dict[str, Any]:
    """``words.json``: the sizes, the choices, the results and one evaluation row per
    method × measure × k (the ``evaluation`` dataset's columns)."""
    w = cfg.words
    src, tgt = w.pair
    return {
        "stage": "translate_words",
        "pair": [src, tgt],
        "lexicon": w.lexicon,
        "sizes": sizes,
        "selection": selection,
        "results": results,
        "rows": [
            {
                "setup": "words",
                "method": r["method"],
                "split": "test",
                "query_lang": src,
                "target_lang": tgt,
                "measure": r["measure"],
                "csls_source": "collection",
                "n_queries": r["n_queries"],
                "n_candidates": r["n_candidates"],
                "k": k,
                "metric": "precision",
                "value": v,
            }
            for r in results
            for k, v in r["precision_at"].items()
        ],
        "total_seconds": round(time.perf_counter() - t_start, 2),
    }


def _write_reports(
    cfg: Config,
    report: dict[str, Any],
    results: list[dict[str, Any]],
    sizes: dict[str, int],
    selection: dict[str, Any],
) -> dict[str, Any]:
    """Write ``words.json`` and ``words.md`` to ``words.report_dir``; the stage's summary."""
    w = cfg.words
    src, tgt = w.pair
    out = local_dir(w.report_dir or cfg.paths.root.rstrip("/") + "/reports", "words.report_dir")
    table = format_words_table(results)
    write_file(join(out, "words.json"), json.dumps(report, indent=2, sort_keys=True, default=str))
    write_file(
        join(out, "words.md"),
        f"# Word translation {src} → {tgt}\n\nLexicon: `{w.lexicon}`; sizes: {sizes}\n\n"
        f"{table}\n\nRCSLS selection: {selection.get('rcsls')}\n",
    )
    logger.info("word translation:\n%s", table)
    return {**report, "table": table, "report_json": join(out, "words.json")}


def _document_models(
    cfg: Config,
    model: Cr5Model,
    maps: dict[str, np.ndarray],
    s_words: list[str],
    t_words: list[str],
    yt: np.ndarray,
) -> dict[str, Any]:
    """Save one averaged-word-vector model per map (see :mod:`pipeline.wordmap.documents`)."""
    w = cfg.words
    src, tgt = w.pair
    where = w.document_models_dir or cfg.paths.root.rstrip("/") + "/wordmap_models"
    root = local_dir(where, "words.document_models_dir")
    _, bases = load_model_files(cfg.paths.dataset("model"), languages=[src, tgt])
    out: dict[str, Any] = {}
    for method, xs_mapped in maps.items():
        ms, cov_s = averaged_word_vector_map(bases[src], s_words, xs_mapped)
        mt, cov_t = averaged_word_vector_map(bases[tgt], t_words, yt)
        path = join(root, f"avg_{method}")
        save_model(
            path,
            {src: ms, tgt: mt},
            {
                "r": int(yt.shape[1]),
                "lam": 0.0,
                "method": f"avg_{method}",
                "preprocessing": model.meta.get("preprocessing", {}),
                "base_model": str(cfg.paths.dataset("model")),
            },
        )
        out[f"avg_{method}"] = {"path": str(path), "covered_terms": {src: cov_s, tgt: cov_t}}
        logger.info(
            "document baseline avg_%s -> %s (terms with a vector: %d, %d)",
            method,
            path,
            cov_s,
            cov_t,
        )
    return out


def _select_rcsls(
    cfg: Config,
    split: Any,
    s_words: list[str],
    xs: np.ndarray,
    t_words: list[str],
    yt: np.ndarray,
    w0: np.ndarray,
) -> tuple[np.ndarray, dict[str, Any]]:
    """RCSLS for each learning rate, snapshots at each epoch count; best validation P@1."""
    w = cfg.words
    i, j = _pairs_index(split.train, s_words, t_words)
    n_neg = w.max_candidates
    epochs = tuple(sorted(set(w.rcsls_epochs)))
    best: tuple[float, float, int, np.ndarray] | None = None
    tried = []
    for lr in w.rcsls_learning_rates:
        fit = fit_rcsls(
            xs[i],
            yt[j],
            xs[:n_neg],
            yt[:n_neg],
            lr=lr,
            epochs=max(epochs),
            k=w.rcsls_k,
            constraint=w.rcsls_constraint,
            w0=w0,
            snapshot_at=epochs,
        )
        for ep in epochs:
            wm = fit.snapshots.get(ep, fit.w) if ep else w0
            p1 = (
                word_translation(
                    split.validation,
                    s_words,
                    xs @ wm,
                    t_words,
                    yt,
                    similarity="csls",
                    precision_at=(1,),
                    max_candidates=w.max_candidates,
                    csls_k=w.csls_k,
                ).precision[1]
                if len(split.validation)
                else 0.0
            )
            tried.append({"lr": lr, "epochs": ep, "validation_p1_csls": p1})
            if best is None or p1 > best[0]:
                best = (p1, lr, ep, wm)
    if best is None:
        raise ConfigError(
            "words.rcsls_learning_rates and words.rcsls_epochs must each name at least one "
            "value, e.g. --set 'words.rcsls_learning_rates=[1.0]'"
        )
    logger.info("RCSLS selection: %s", tried)
    return best[3], {
        "lr": best[1],
        "epochs": best[2],
        "validation_p1_csls": best[0],
        "tried": tried,
    }
