"""The search index at scale: build cost, recall against exact search, latency, throughput, and
CSLS re-ranking's P@1 against exact CSLS, on a run root that has ``embeddings``, ``model``,
``splits`` and ``documents``.

Usage (repository root; a run root from ``bench/bench_chain.py`` or the demo)::

    OPENBLAS_NUM_THREADS=1 nice -n 10 .venv/bin/python bench/bench_search.py \\
        --root /tmp/cr5_chain_1000000/out --conf conf/local.yaml --conf bench/wikishape.yaml \\
        --label 1M

What it runs and measures, everything in this one run:

1. **Build.** ``jobs/index.py`` as its own process (its own local Spark), twice: the
   configured index (HNSW above ``search.flat_max_rows``, CSLS terms) and, as the baseline,
   exact flat shards without CSLS terms (``search.index_type=flat``, ``search.csls=false``),
   which is the same Spark pass (read, shuffle, write) without the graphs and the CSLS
   searches. Wall time, CPU, peak memory of the process tree (``bench_chain.run_stage``),
   index bytes; both per million vectors.
2. **Recall@10** of the index against the exact flat index (the same vectors, exact inner
   products), over the held-out test documents of every direction of every ``splits`` pair
   as queries (the query is the document's indexed vector, the targets every indexed document
   of the other language); and the same at other ``ef_search`` values (the latency / recall
   curve that chose the default).
3. **Latency and throughput.** Single queries, one at a time: a vector against the largest
   language; a text (embedding included, :meth:`SearchIndex.query`) against the largest
   language, and against every other language, with and without CSLS. p50 / p99 over the
   queries, index against exact flat. Batched: queries per second in batches of 1,000.
4. **P@1 on held-out concepts.** Cosine: the index's top-1 against exact search's (the
   pessimistic-rank rule of :mod:`pipeline.ranking`). CSLS: the index's CSLS re-ranking
   (``search.csls_rerank`` cosine candidates, precomputed r_S) against **exact** CSLS
   (:mod:`pipeline.retrieval.csls` with the whole indexed query-language collection as the
   source set). Exact CSLS over a million documents would take every candidate's exact r_S,
   hours on this machine, so it is certified instead (:func:`exact_csls_top1`): the index's
   r_S is a mean of true similarities of k real neighbours, hence a lower bound L(c) of the
   exact r_S(c); a candidate can outscore the target only if 2 cos(q, c) − L(c) reaches the
   target's exact score, and only those candidates (a handful per query) get their exact r_S.
   The result is exact CSLS P@1; ``--crosscheck`` compares it with
   :func:`pipeline.retrieval.csls_retrieval` itself on the directions small enough.

Results: ``bench/results/search_<label>.json`` and ``.txt``; bench/README.md, "Search".
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.bench_chain import machine_info, run_stage  # noqa: E402
from pipeline.ranking import DEFAULT_TIE_TOL  # noqa: E402
from pipeline.search import SearchIndex  # noqa: E402

PYTHON = sys.executable
MB = 1024.0 * 1024.0


def rss_mb() -> float:
    """This process's resident memory (VmRSS)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return float(line.split()[1]) / 1024.0
    return 0.0


def percentiles(seconds: list[float]) -> dict[str, float]:
    ms = np.asarray(seconds) * 1e3
    return {
        "n": len(ms),
        "p50_ms": round(float(np.percentile(ms, 50)), 3),
        "p99_ms": round(float(np.percentile(ms, 99)), 3),
        "mean_ms": round(float(ms.mean()), 3),
        "max_ms": round(float(ms.max()), 3),
    }


# --------------------------------------------------------------------------- build


def build(args: argparse.Namespace, name: str, index: Path, sets: list[str]) -> dict[str, Any]:
    cmd = [PYTHON, "jobs/index.py"]
    for c in args.conf:
        cmd += ["--conf", c]
    for s in [f"paths.root={args.root}", f"paths.index={index}", *args.set, *sets]:
        cmd += ["--set", s]
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    res = run_stage(name, cmd, Path(args.workdir), 1.0, env)
    manifest = json.loads((index / "_manifest.json").read_text())
    n = manifest["rows"]
    res["index_bytes"] = sum(manifest["files"].values())
    res["rows"] = n
    res["report"] = manifest["report"]
    res["per_million"] = {
        "wall_s": round(res["wall_s"] * 1e6 / n, 1),
        "index_mb": round(res["index_bytes"] / MB * 1e6 / n, 1),
        "peak_tree_rss_mb": round(res["peak_mb"]["tree_rss"] * 1e6 / n, 1),
    }
    return res


# --------------------------------------------------------------------------- held-out queries


def directions(root: Path, index: SearchIndex, limit: int) -> list[dict[str, Any]]:
    """Per direction S -> T of every splits pair: the test concepts with a document indexed in
    both languages, the query rows (in S) and the target rows (in T); at most ``limit``."""
    splits = pq.read_table(root / "splits").to_pylist()
    rows_of = {
        lang: {c: i for i, c in enumerate(index.documents(lang)["concept_id"])}
        for lang in index.languages
    }
    out = []
    for pair in sorted({r["pair"] for r in splits if r["role"] == "test"}):
        concepts = sorted(
            (r["priority"], r["concept_id"])
            for r in splits
            if r["pair"] == pair and r["role"] == "test"
        )
        a, b = pair.split("-")
        for s, t in ((a, b), (b, a)):
            if s not in rows_of or t not in rows_of:
                continue
            both = [c for _, c in concepts if c in rows_of[s] and c in rows_of[t]][:limit]
            out.append(
                {
                    "source": s,
                    "target": t,
                    "concepts": both,
                    "queries": np.array([rows_of[s][c] for c in both], dtype=np.int64),
                    "targets": np.array([rows_of[t][c] for c in both], dtype=np.int64),
                }
            )
    return out


def query_texts(root: Path, doc_ids: list[str]) -> dict[str, str]:
    """Texts of ``doc_ids`` from the documents dataset."""
    dataset = ds.dataset(root / "documents", format="parquet", partitioning="hive")
    table = dataset.to_table(
        columns=["doc_id", "text"], filter=pc.field("doc_id").isin(sorted(set(doc_ids)))
    )
    return dict(zip(table.column("doc_id").to_pylist(), table.column("text").to_pylist()))


# --------------------------------------------------------------------------- exact references


def mean_top(index: SearchIndex, vectors: np.ndarray, lang: str, k: int) -> np.ndarray:
    """Exact mean cosine of each vector with its ``k`` nearest documents of ``lang`` (an
    exact flat index): the r_S of pipeline.retrieval.csls over the whole collection."""
    out = np.empty(len(vectors), dtype=np.float32)
    for lo in range(0, len(vectors), 2048):
        s, _ = index.search_vectors(vectors[lo : lo + 2048], lang, lang, k)
        out[lo : lo + 2048] = s.mean(axis=1, dtype=np.float64)
    return out


def index_top1(
    index: SearchIndex,
    q: np.ndarray,
    s: str,
    t: str,
    targets: np.ndarray,
    tol: float,
    *,
    csls: bool,
) -> np.ndarray:
    """Whether the index ranks each target first, by the same pessimistic rule as the exact
    references: the target is its top result and the next one scores below it by more than
    ``tol`` (a tie counts against the target, as in :mod:`pipeline.ranking`)."""
    scores, ids = index.search_vectors(q, s, t, 2, csls=csls)
    return (ids[:, 0] == targets) & (scores[:, 1] < scores[:, 0] - tol)


def exact_cosine_top1(
    flat: SearchIndex, q: np.ndarray, s: str, t: str, targets: np.ndarray, tol: float
) -> np.ndarray:
    """Whether each target has pessimistic rank 1 by exact cosine."""
    scores, ids = flat.search_vectors(q, s, t, 2)
    tv = flat.vectors(t, targets)
    st = np.einsum("ij,ij->i", q, tv)
    other = np.where(ids[:, 0] == targets, scores[:, 1], scores[:, 0])
    return other < st - tol


def exact_csls_top1(
    flat: SearchIndex,
    approx: SearchIndex,
    q: np.ndarray,
    s: str,
    t: str,
    targets: np.ndarray,
    k: int,
    tol: float,
    shortlist: int = 2000,
) -> tuple[np.ndarray, dict[str, int]]:
    """Whether each target has pessimistic rank 1 by exact CSLS (source = the indexed
    collection of ``s``), certified with few exact r_S computations (module docstring).

    ``approx``'s stored r_S of each candidate c is the mean cosine of k true neighbours of c,
    so L(c) <= r_S(c) (checked on every candidate whose exact r_S is computed). A candidate c
    can reach the target's exact score s_t - tol only if U(c) = 2 cos(q, c) - L(c) does; the
    candidates with U(c) >= s_t - tol are taken in order of U and scored exactly until one
    ties or beats the target (rank > 1) or none is left (rank 1). Candidates are drawn from
    each query's ``shortlist`` best cosines; the certificate requires every candidate outside
    it to have U below the threshold (2 cos_shortlist - min L < s_t - tol), checked.
    """
    lower = approx.csls_terms(t, s)
    min_lower = float(lower.min())
    n_s = approx.manifest["languages"][s]["rows"]
    k_s = min(k, n_s)
    tv = flat.vectors(t, targets)
    s_t = 2 * np.einsum("ij,ij->i", q, tv) - mean_top(flat, tv, s, k_s)
    threshold = s_t - tol
    cos, ids = flat.search_vectors(q, s, t, shortlist)
    valid = ids >= 0
    u = np.where(valid, 2 * cos - lower[np.where(valid, ids, 0)], -np.inf)
    u = np.where(ids == targets[:, None], -np.inf, u)  # the target itself does not count
    stats = {"not_certified": 0, "exact_r_s": 0, "lower_bound_violations": 0}
    order = np.argsort(-u, axis=1, kind="stable")
    rank1 = np.ones(len(q), dtype=bool)
    open_ = np.ones(len(q), dtype=bool)
    cache: dict[int, float] = {}
    gaps: list[float] = []  # exact r_S - stored r_S of the candidates scored exactly
    for j in range(ids.shape[1]):
        cand = ids[np.arange(len(q)), order[:, j]]
        uj = u[np.arange(len(q)), order[:, j]]
        open_ &= uj >= threshold
        if not open_.any():
            break
        need = sorted({int(c) for c in cand[open_] if int(c) not in cache})
        if need:
            exact = mean_top(flat, flat.vectors(t, np.array(need)), s, k_s)
            stats["exact_r_s"] += len(need)
            stats["lower_bound_violations"] += int(np.sum(lower[need] > exact + 1e-5))
            gaps.extend((exact - lower[need]).tolist())
            cache.update(zip(need, exact.tolist()))
        for i in np.flatnonzero(open_):
            c = int(cand[i])
            score = 2 * float(cos[i, order[i, j]]) - cache[c]
            if score >= threshold[i]:
                rank1[i] = False
                open_[i] = False
    # rank 1 is certified only if no candidate outside the shortlist (cos <= its last) can
    # reach the threshold
    stats["not_certified"] = int(np.sum(rank1 & (2 * cos[:, -1] - min_lower >= threshold)))
    stats["r_s_gap_mean"] = round(float(np.mean(gaps)), 6) if gaps else 0.0
    stats["r_s_gap_max"] = round(float(np.max(gaps)), 6) if gaps else 0.0
    return rank1, stats


# --------------------------------------------------------------------------- the measurements


def recall_at(approx_ids: np.ndarray, exact_ids: np.ndarray) -> float:
    hits = [len(set(a[a >= 0]) & set(e[e >= 0])) / max(1, (e >= 0).sum()) for a, e in
            zip(approx_ids, exact_ids)]  # fmt: skip
    return float(np.mean(hits))


def index_knob(index: SearchIndex) -> str:
    """The query-time knob of the index's approximate shards: ``nprobe`` (IVF) or
    ``ef_search`` (HNSW), by the kind of its largest language."""
    langs = index.manifest["languages"]
    big = max(langs, key=lambda lang: langs[lang]["rows"])
    return "nprobe" if langs[big].get("kind") == "ivf" else "ef_search"


def measure_recall(
    approx: SearchIndex, flat: SearchIndex, dirs: list[dict[str, Any]], values: list[int]
) -> dict[str, Any]:
    knob = index_knob(approx)
    out: dict[str, Any] = {"per_direction": {}, "knob": knob, "sweep": {}}
    exact: dict[str, np.ndarray] = {}
    for d in dirs:
        q = approx.vectors(d["source"], d["queries"])
        key = f"{d['source']}->{d['target']}"
        _, exact[key] = flat.search_vectors(q, d["source"], d["target"], 10)
        _, got = approx.search_vectors(q, d["source"], d["target"], 10)
        out["per_direction"][key] = round(recall_at(got, exact[key]), 4)
    out["mean"] = round(float(np.mean(list(out["per_direction"].values()))), 4)
    for ef in values:
        vals, secs, n = [], 0.0, 0
        for d in dirs:
            q = approx.vectors(d["source"], d["queries"])
            t0 = time.perf_counter()
            _, got = approx.search_vectors(q, d["source"], d["target"], 10, **{knob: ef})
            secs += time.perf_counter() - t0
            n += len(q)
            vals.append(recall_at(got, exact[f"{d['source']}->{d['target']}"]))
        out["sweep"][ef] = {
            "recall_at_10": round(float(np.mean(vals)), 4),
            "batched_ms_per_query": round(secs / n * 1e3, 4),
        }
        print(f"   {knob} {ef}: recall@10 {np.mean(vals):.4f}", flush=True)
    return out


def single_latency(fn: Any, items: list[Any]) -> dict[str, float]:
    """Wall-clock percentiles of ``fn`` over ``items``, one at a time, and the same of the
    calling thread's CPU time (what the query costs when the machine is not shared: on a
    loaded machine the wall-clock tail includes waiting for a core)."""
    fn(items[0])  # warm-up (first-use loads)
    times, cpu = [], []
    for item in items:
        c0 = time.thread_time()
        t0 = time.perf_counter()
        fn(item)
        times.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)
    out = percentiles(times)
    cpu_ms = np.asarray(cpu) * 1e3
    out["cpu_p50_ms"] = round(float(np.percentile(cpu_ms, 50)), 3)
    out["cpu_p99_ms"] = round(float(np.percentile(cpu_ms, 99)), 3)
    return out


def measure_latency(
    approx: SearchIndex,
    flat: SearchIndex,
    dirs: list[dict[str, Any]],
    texts: dict[str, str],
    n: int,
    n_flat: int,
) -> dict[str, Any]:
    big = max(approx.languages, key=lambda lang: approx.manifest["languages"][lang]["rows"])
    into_big = [d for d in dirs if d["target"] == big]
    rng = np.random.default_rng(0)
    pool = [(d["source"], int(r)) for d in into_big for r in d["queries"]]
    picks = [pool[i] for i in rng.permutation(len(pool))[:n]]
    vecs = [(s, approx.vectors(s, np.array([r]))) for s, r in picks]
    docs = {s: approx.documents(s)["doc_id"] for s in approx.languages}
    text_items = [(s, texts[docs[s][r]]) for s, r in picks if docs[s][r] in texts]
    out: dict[str, Any] = {"target": big, "target_documents": approx.manifest["languages"][big]}
    out["vector_one_language"] = single_latency(
        lambda it: approx.search_vectors(it[1], it[0], big, 10), vecs
    )
    out["vector_one_language_exact"] = single_latency(
        lambda it: flat.search_vectors(it[1], it[0], big, 10), vecs[:n_flat]
    )
    out["text_one_language"] = single_latency(
        lambda it: approx.query(it[1], it[0], [big], 10), text_items
    )
    out["text_all_languages"] = single_latency(
        lambda it: approx.query(it[1], it[0], None, 10), text_items
    )
    out["text_all_languages_csls"] = single_latency(
        lambda it: approx.query(it[1], it[0], None, 10, csls=True), text_items
    )
    out["text_all_languages_exact"] = single_latency(
        lambda it: flat.query(it[1], it[0], None, 10), text_items[:n_flat]
    )
    # batched throughput into the largest language
    q = np.concatenate([v for _, v in vecs])
    src = vecs[0][0]
    for name, index in (("batched_qps", approx), ("batched_qps_exact", flat)):
        t0 = time.perf_counter()
        for lo in range(0, len(q), 1000):
            index.search_vectors(q[lo : lo + 1000], src, big, 10)
        out[name] = round(len(q) / (time.perf_counter() - t0), 1)
    out["speedup_p99_vector"] = round(
        out["vector_one_language_exact"]["p99_ms"] / out["vector_one_language"]["p99_ms"], 1
    )
    out["speedup_batched"] = round(out["batched_qps"] / out["batched_qps_exact"], 1)
    return out


def measure_p1(
    approx: SearchIndex,
    flat: SearchIndex,
    dirs: list[dict[str, Any]],
    k: int,
    crosscheck_max_pairs: float,
) -> dict[str, Any]:
    tol = DEFAULT_TIE_TOL
    out: dict[str, Any] = {"per_direction": {}}
    for d in dirs:
        s, t, targets = d["source"], d["target"], d["targets"]
        q = approx.vectors(s, d["queries"])
        key = f"{s}->{t}"
        t0 = time.perf_counter()
        top = index_top1(approx, q, s, t, targets, tol, csls=False)
        top_csls = index_top1(approx, q, s, t, targets, tol, csls=True)
        cos_exact = exact_cosine_top1(flat, q, s, t, targets, tol)
        csls_exact, stats = exact_csls_top1(flat, approx, q, s, t, targets, k, tol)
        row = {
            "queries": len(q),
            "cosine_index": round(float(np.mean(top)), 4),
            "cosine_exact": round(float(np.mean(cos_exact)), 4),
            "csls_index": round(float(np.mean(top_csls)), 4),
            "csls_exact": round(float(np.mean(csls_exact)), 4),
            "certificate": stats,
        }
        n_t = approx.manifest["languages"][t]["rows"]
        n_s = approx.manifest["languages"][s]["rows"]
        if n_t * n_s <= crosscheck_max_pairs:
            from pipeline.retrieval import csls_retrieval

            res = csls_retrieval(
                q,
                flat.vectors(t),
                targets,
                k=1,
                csls_k=k,
                source="collection",
                source_embeddings=flat.vectors(s),
            )
            row["csls_exact_retrieval"] = round(float(np.mean(res.ranks == 1)), 4)
        row["seconds"] = round(time.perf_counter() - t0, 1)
        out["per_direction"][key] = row
        print(f"   P@1 {key}: {row}", flush=True)
    for name in ("cosine_index", "cosine_exact", "csls_index", "csls_exact"):
        out[name] = round(float(np.mean([r[name] for r in out["per_direction"].values()])), 4)
    out["csls_gap_points"] = round(100 * (out["csls_exact"] - out["csls_index"]), 2)
    out["max_csls_gap_points"] = round(
        max(100 * abs(r["csls_exact"] - r["csls_index"]) for r in out["per_direction"].values()),
        2,
    )
    return out


# --------------------------------------------------------------------------- parameter sweep


def sweep_build(
    flat: SearchIndex,
    dirs: list[dict[str, Any]],
    n: int,
    grid: list[tuple[int, int]],
    efs: list[int],
    flat_sizes: list[int],
) -> dict[str, Any]:
    """HNSW build parameters on ``n`` real vectors of the largest language, built in this
    process on one thread (as a build task does): build seconds, bytes per vector, and
    recall@10 / single-query latency at each ef_search against exact search, with that
    language's held-out crosslingual queries. Also a flat index's single-query latency at
    ``flat_sizes`` rows (where search.flat_max_rows should switch to HNSW)."""
    import faiss

    from pipeline.search.shard import build_shard, search_shard, serialize

    big = max(flat.languages, key=lambda lang: flat.manifest["languages"][lang]["rows"])
    rows = flat.manifest["languages"][big]["rows"]
    rng = np.random.default_rng(1)
    keep = np.sort(rng.choice(rows, size=min(n, rows), replace=False))
    x = flat.vectors(big, keep)
    qs = np.concatenate(
        [flat.vectors(d["source"], d["queries"]) for d in dirs if d["target"] == big]
    )[:1000]
    exact = build_shard(x, "flat", hnsw_m=2, ef_construction=1)
    _, truth = search_shard(exact, qs, 10, ef_search=1)
    faiss.omp_set_num_threads(1)
    out: dict[str, Any] = {
        "language": big,
        "vectors": len(x),
        "queries": len(qs),
        "hnsw": {},
        "ivf": {},
    }
    for lists in (512, 1024, 2048, 4096):
        t0 = time.perf_counter()
        index = build_shard(x, "ivf", hnsw_m=2, ef_construction=1, threads=1, lists=lists)
        build_s = time.perf_counter() - t0
        row = {"build_s": round(build_s, 1),
               "build_s_per_million": round(build_s * 1e6 / len(x), 1),
               "bytes_per_vector": round(len(serialize(index)) / len(x), 1)}  # fmt: skip
        for probe in (4, 8, 16, 32, 64):
            _, got = search_shard(index, qs, 10, ef_search=1, nprobe=probe)
            lat = single_latency(
                lambda v, ix=index, n=probe: search_shard(ix, v, 10, ef_search=1, nprobe=n),
                [qs[i : i + 1] for i in range(min(300, len(qs)))],
            )
            row[f"np{probe}"] = {"recall_at_10": round(recall_at(got, truth), 4), **lat}
        out["ivf"][f"lists{lists}"] = row
        print(f"   sweep IVF lists={lists}: {row}", flush=True)
    for m, efc in grid:
        t0 = time.perf_counter()
        index = build_shard(x, "hnsw", hnsw_m=m, ef_construction=efc, threads=1)
        build_s = time.perf_counter() - t0
        row: dict[str, Any] = {
            "build_s": round(build_s, 1),
            "build_s_per_million": round(build_s * 1e6 / len(x), 1),
            "bytes_per_vector": round(len(serialize(index)) / len(x), 1),
        }
        for ef in efs:
            _, got = search_shard(index, qs, 10, ef_search=ef)
            lat = single_latency(lambda v, ix=index, e=ef: search_shard(ix, v, 10, ef_search=e),
                                 [qs[i : i + 1] for i in range(min(300, len(qs)))])  # fmt: skip
            row[f"ef{ef}"] = {"recall_at_10": round(recall_at(got, truth), 4), **lat}
        out["hnsw"][f"M{m}_efc{efc}"] = row
        print(f"   sweep M={m} efC={efc}: {row}", flush=True)
    out["flat_single_query"] = {}
    for size in flat_sizes:
        if size > len(x):
            continue
        index = build_shard(x[:size], "flat", hnsw_m=2, ef_construction=1)
        out["flat_single_query"][size] = single_latency(
            lambda v, ix=index: search_shard(ix, v, 10, ef_search=1),
            [qs[i : i + 1] for i in range(min(300, len(qs)))],
        )
    faiss.omp_set_num_threads(os.cpu_count() or 1)
    return out


# --------------------------------------------------------------------------- report


def table(res: dict[str, Any]) -> str:
    b, f = res["build"]["index"], res["build"].get("flat")
    lat = res["latency"]
    lines = [
        f"search benchmark {res['label']}: {res['documents']:,} documents, r = {res['r']}, "
        f"{res['machine']['cores']} cores, {res['machine'].get('memory_gb')} GB, load average "
        f"{res['machine'].get('load_average_at_start')} at the start",
        "",
        "build (jobs/index.py)        wall s   per 1M s   peak tree MB   index MB/1M",
    ]
    kinds = sorted({v.get("kind", "?") for v in res.get("kinds", {}).values()})
    for name, x in ((f"index ({'/'.join(kinds)} + csls)", b), ("baseline: flat, no csls", f)):
        if x:
            lines.append(
                f"  {name:<26} {x['wall_s']:>7.1f}   {x['per_million']['wall_s']:>8.1f}   "
                f"{x['peak_mb']['tree_rss']:>12.0f}   {x['per_million']['index_mb']:>11.1f}"
            )
    if f:
        lines.append(f"  ratio index / baseline wall: {b['wall_s'] / f['wall_s']:.2f}")
    r = res["recall"]
    lines += ["", f"recall@10 vs exact (mean over directions): {r['mean']:.4f}"]
    for ef, v in r["sweep"].items():
        lines.append(
            f"  {r['knob']} {ef:>4}: recall@10 {v['recall_at_10']:.4f}, batched "
            f"{v['batched_ms_per_query']:.3f} ms/query"
        )
    lines += [
        "",
        f"single-query latency into {lat['target']} (ms)      p50       p99   "
        "(thread CPU p50 / p99)",
    ]
    for name in (
        "vector_one_language",
        "vector_one_language_exact",
        "text_one_language",
        "text_all_languages",
        "text_all_languages_csls",
        "text_all_languages_exact",
    ):
        v = lat[name]
        lines.append(
            f"  {name:<34} {v['p50_ms']:>8.2f}  {v['p99_ms']:>8.2f}   "
            f"({v['cpu_p50_ms']:.2f} / {v['cpu_p99_ms']:.2f}, n={v['n']})"
        )
    lines.append(
        f"  batched queries/s: index {lat['batched_qps']}, exact {lat['batched_qps_exact']} "
        f"(x{lat['speedup_batched']}); p99 speed-up, vector query: x{lat['speedup_p99_vector']}"
    )
    p = res["p1"]
    lines += [
        "",
        "P@1 on held-out concepts     cosine index  cosine exact  CSLS index  CSLS exact",
    ]
    for key, v in p["per_direction"].items():
        extra = (
            f"  (retrieval: {v['csls_exact_retrieval']:.4f})" if "csls_exact_retrieval" in v else ""
        )
        lines.append(
            f"  {key:<26} {v['cosine_index']:>12.4f}  {v['cosine_exact']:>12.4f}  "
            f"{v['csls_index']:>10.4f}  {v['csls_exact']:>10.4f}{extra}"
        )
    lines.append(
        f"  {'mean':<26} {p['cosine_index']:>12.4f}  {p['cosine_exact']:>12.4f}  "
        f"{p['csls_index']:>10.4f}  {p['csls_exact']:>10.4f}"
    )
    lines.append(
        f"  CSLS gap, exact - index: {p['csls_gap_points']:+.2f} points (mean), "
        f"{p['max_csls_gap_points']:.2f} (largest direction)"
    )
    sw = res.get("sweep")
    if sw:
        lines += [
            "",
            f"IVF and HNSW parameters on {sw['vectors']:,} vectors of {sw['language']} (one "
            f"thread), {sw['queries']} queries: build s/1M, bytes/vector; recall@10, p50/p99 ms "
            "per nprobe (np) or ef_search (ef)",
        ]
        for name, row in [*sw.get("ivf", {}).items(), *sw["hnsw"].items()]:
            cells = "  ".join(
                f"{k}: {v['recall_at_10']:.3f} {v['p50_ms']:.2f}/{v['p99_ms']:.2f}"
                for k, v in row.items()
                if isinstance(v, dict)
            )
            lines.append(
                f"  {name:<12} {row['build_s_per_million']:>7.0f} s "
                f"{row['bytes_per_vector']:>6.0f} B  {cells}"
            )
        lines.append(
            "  flat single query p50/p99 ms: "
            + ", ".join(
                f"{size:,} rows {v['p50_ms']:.2f}/{v['p99_ms']:.2f}"
                for size, v in sw["flat_single_query"].items()
            )
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--root", required=True, type=Path, help="run root (paths.root)")
    p.add_argument("--conf", action="append", default=[], help="profiles for jobs/index.py")
    p.add_argument("--set", action="append", default=[], help="more --set for jobs/index.py")
    p.add_argument("--label", required=True, help="names bench/results/search_<label>.*")
    p.add_argument("--workdir", type=Path, help="index directories and logs (default: --root)")
    p.add_argument("--skip-build", action="store_true", help="reuse the indexes in --workdir")
    p.add_argument("--queries", type=int, default=1000, help="held-out queries per direction")
    p.add_argument("--latency-queries", type=int, default=1000)
    p.add_argument("--latency-queries-exact", type=int, default=200)
    p.add_argument(
        "--ef",
        type=int,
        nargs="*",
        default=None,
        help="values of the index's query knob to sweep (default: nprobe 4 8 16 32 64 128 for "
        "IVF, ef_search 16 32 64 96 128 256 for HNSW)",
    )
    p.add_argument(
        "--sweep-vectors",
        type=int,
        default=0,
        help="also sweep HNSW M / efConstruction on this many vectors (0: no sweep)",
    )
    p.add_argument(
        "--crosscheck-max-pairs",
        type=float,
        default=2e10,
        help="also run pipeline.retrieval.csls_retrieval where n_target * n_source <= this",
    )
    args = p.parse_args(argv)
    args.conf = args.conf or ["conf/local.yaml"]
    args.workdir = args.workdir or args.root / "bench_search"
    args.workdir.mkdir(parents=True, exist_ok=True)
    index_dir, flat_dir = args.workdir / "index", args.workdir / "index_flat"
    res: dict[str, Any] = {"label": args.label, "root": str(args.root), "machine": machine_info()}
    res["build"] = {}
    if not args.skip_build:
        res["build"]["index"] = build(args, "index", index_dir, [])
        res["build"]["flat"] = build(
            args, "index_flat", flat_dir, ["search.index_type=flat", "search.csls=false"]
        )
    else:
        for name, d in (("index", index_dir), ("flat", flat_dir)):
            m = json.loads((d / "_manifest.json").read_text())
            res["build"][name] = None
            res.setdefault("build_reports", {})[name] = m["report"]
    before = rss_mb()
    t0 = time.perf_counter()
    approx = SearchIndex.open(index_dir, preload=True)
    res["open"] = {"seconds": round(time.perf_counter() - t0, 1)}
    res["open"]["rss_mb"] = round(rss_mb() - before, 1)
    flat = SearchIndex.open(flat_dir, preload=True)
    res["documents"] = approx.manifest["rows"]
    res["r"] = approx.model.dim
    res["open"]["rss_mb_per_million"] = round(res["open"]["rss_mb"] * 1e6 / res["documents"], 1)
    res["settings"] = {"build": approx.manifest["build"], "search": approx.manifest["search"],
                       "csls": {k: v for k, v in approx.manifest["csls"].items()
                                if k != "sources"}}  # fmt: skip
    dirs = directions(args.root, approx, args.queries)
    res["directions"] = {f"{d['source']}->{d['target']}": len(d["queries"]) for d in dirs}
    print("-- recall", flush=True)
    res["kinds"] = {lang: {"kind": v.get("kind"), "shards": len(v["shards"])}
                    for lang, v in approx.manifest["languages"].items()}  # fmt: skip
    sweep_values = args.ef or (
        [4, 8, 16, 32, 64, 128] if index_knob(approx) == "nprobe" else [16, 32, 64, 96, 128, 256]
    )
    res["recall"] = measure_recall(approx, flat, dirs, sweep_values)
    print("-- latency", flush=True)
    docs = {s: approx.documents(s)["doc_id"] for s in approx.languages}
    wanted = [docs[d["source"]][r] for d in dirs for r in d["queries"]]
    texts = query_texts(args.root, wanted)
    res["latency"] = measure_latency(
        approx, flat, dirs, texts, args.latency_queries, args.latency_queries_exact
    )
    print("-- P@1", flush=True)
    csls_k = approx.csls_k or 10
    res["p1"] = measure_p1(approx, flat, dirs, csls_k, args.crosscheck_max_pairs)
    if args.sweep_vectors:
        print("-- build parameter sweep", flush=True)
        res["sweep"] = sweep_build(
            flat,
            dirs,
            args.sweep_vectors,
            [(16, 40), (16, 80), (32, 40), (32, 80), (32, 160), (48, 80)],
            [32, 64, 96, 128],
            [5_000, 10_000, 20_000, 50_000, 100_000],
        )
    text = table(res)
    out = ROOT / "bench" / "results" / f"search_{args.label}"
    out.with_suffix(".json").write_text(json.dumps(res, indent=2, default=str))
    out.with_suffix(".txt").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
