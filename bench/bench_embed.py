"""Embedding benchmark: the Python API and the Spark ``embed`` stage on a synthetic corpus.

What it does (all seeded):

1. writes a synthetic model with ``--langs`` languages, each a vocabulary of ``--vocab`` terms
   (``w0`` .. ``w<p-1>``; a Zipf(s) rank -> term permutation of its own, so frequent words are
   spread over Φ), IDF ``log(N / E[df])`` under that Zipf law, random float32 Φ of shape
   (p, r), saved with :func:`pipeline.model.format.save_model`;
2. writes ``--docs`` documents as Parquet, in chunks (never the whole corpus in memory):
   ``doc_id, lang, text`` with text ``"w123 w9 ..."``, ~Poisson(``--tokens``) tokens drawn
   Zipfian from the language's vocabulary, a fraction ``--oov`` of them out of vocabulary.
   Each chunk of ``--chunk`` documents is one language (languages cycle), as in per-language
   dumps; ``--files`` files, one row group per chunk;
3. **API** (a subprocess, so its peak RSS is its own): :meth:`Cr5Model.embed` over the corpus
   in batches of ``--batch`` texts read from the Parquet files, single process; and, on the
   same batches, the three phases timed separately — ``Tokenizer.flat_tokens``,
   ``tfidf_rows`` (vocabulary lookup + TF-IDF; the lookup alone is timed once more to split
   it out) and ``csr @ Φ`` — with a bitwise check that the phases reproduce ``embed``;
4. **Spark** (another subprocess): :func:`pipeline.stages.embed.run` on ``local[2]`` with
   ``embed.batch_rows = --batch`` on the same Parquet; session start is timed separately
   and excluded from throughput. A sampler thread reads ``/proc`` every 0.25 s for the
   JVM and the ``pyspark.daemon`` Python workers below the driver (RSS and PSS);
5. equality: 1,000 random documents, Spark output vs ``Cr5Model.embed`` (max |diff|).

Usage (repository root)::

    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/bench_embed.py --docs 1000000 --langs 3 \\
        --vocab 200000 --r 300 --batch 10000 --out bench/results/embed.json \\
        > bench/results/embed.txt
"""

from __future__ import annotations

import os

# Must precede the numpy import: multithreaded BLAS was 5-8x slower on the 2-core machine.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import scipy.sparse as sp

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.machine import machine_info, process_tree  # noqa: E402
from pipeline.linalg.peak_memory import peak_resident_mib  # noqa: E402

LANG_CODES = ("en", "de", "fr", "es", "it", "nl", "pl", "ru", "sv", "fi")
MB = 1024.0 * 1024.0


def emit(line: str = "") -> None:
    print(line, flush=True)


# --- machine ----------------------------------------------------------------------------------


def rss_now_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


def peak_rss_mb() -> float:
    """This process's resident-set high-water mark (VmHWM, MiB;
    :func:`pipeline.linalg.peak_memory.peak_resident_mib`), NaN without ``/proc``."""
    peak = peak_resident_mib()
    return float("nan") if peak is None else peak


# --- synthetic model and corpus ---------------------------------------------------------------


def zipf_cdf(p: int, s: float) -> np.ndarray:
    w = 1.0 / np.arange(1, p + 1, dtype=np.float64) ** s
    cdf = np.cumsum(w)
    return cdf / cdf[-1]


def term_strings(prefix: str, n: int) -> pa.Array:
    """``prefix0 .. prefix<n-1>`` as an Arrow string array, built without a Python loop."""
    digits = pc.cast(pa.array(np.arange(n, dtype=np.int64)), pa.string())
    return pc.binary_join_element_wise(pa.scalar(prefix), digits, "")


def make_model(path: Path, langs: list[str], p: int, r: int, docs: int, args) -> dict:
    """Write the synthetic model; returns ``{lang: rank -> term index permutation}`` (as lists
    of arrays are not JSON) via ``np.save`` beside it, and the save_model metadata."""
    from pipeline.model.format import LanguageMap, save_model

    rng = np.random.default_rng(args.seed)
    cdf = zipf_cdf(p, args.zipf)
    prob = np.diff(cdf, prepend=0.0)
    terms = term_strings("w", p)
    maps = {}
    for lang in langs:
        perm = rng.permutation(p)  # rank -> term index
        np.save(path.parent / f"perm_{lang}.npy", perm)
        n_l = max(docs // len(langs), 1)
        # Expected document frequency of a rank under the corpus' length law.
        df_rank = n_l * (1.0 - (1.0 - prob * (1.0 - args.oov)) ** args.tokens)
        df_rank = np.maximum(df_rank, 1.0)
        df = np.empty(p, dtype=np.int64)
        df[perm] = np.round(df_rank).astype(np.int64)
        idf = np.log(n_l / df.astype(np.float64)).clip(min=0.0).astype(np.float32)
        phi = rng.standard_normal((p, r), dtype=np.float32)
        phi *= np.float32(1.0 / np.sqrt(p))
        maps[lang] = LanguageMap(terms=terms, idf=idf, df=df, phi=phi, mean=None)
    meta = save_model(
        path,
        maps,
        {"r": r, "lambda": 1.0, "synthetic": True, "zipf_s": args.zipf, "seed": args.seed},
    )
    return {"files_bytes": sum(f["bytes"] for f in meta["files"].values())}


def make_corpus(out_dir: Path, langs: list[str], p: int, args) -> dict:
    """Write ``args.docs`` documents as Parquet in chunks; returns sizes."""
    rng = np.random.default_rng(args.seed + 1)
    cdf = zipf_cdf(p, args.zipf)
    terms = term_strings("w", p)
    oov_terms = term_strings("x", 50_000)
    perms = {lang: np.load(out_dir.parent / f"perm_{lang}.npy") for lang in langs}
    out_dir.mkdir(parents=True)
    n_chunks = -(-args.docs // args.chunk)
    chunks_per_file = -(-n_chunks // args.files)
    schema = pa.schema([("doc_id", pa.string()), ("lang", pa.string()), ("text", pa.string())])
    writer = None
    n_tokens = 0
    n_oov = 0
    text_bytes = 0
    per_lang = dict.fromkeys(langs, 0)
    for c in range(n_chunks):
        if c % chunks_per_file == 0:
            if writer is not None:
                writer.close()
            writer = pq.ParquetWriter(
                out_dir / f"part-{c // chunks_per_file:05d}.parquet", schema, compression="zstd"
            )
        lo, hi = c * args.chunk, min((c + 1) * args.chunk, args.docs)
        n = hi - lo
        lang = langs[c % len(langs)]
        lens = np.maximum(rng.poisson(args.tokens, n), 1)
        total = int(lens.sum())
        ranks = np.minimum(np.searchsorted(cdf, rng.random(total), side="right"), p - 1)
        tok = terms.take(pa.array(perms[lang][ranks]))
        oov = rng.random(total) < args.oov
        if oov.any():
            repl = oov_terms.take(pa.array(rng.integers(0, len(oov_terms), total)))
            tok = pc.if_else(pa.array(oov), repl, tok)
        offsets = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(lens, out=offsets[1:])
        text = pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets), tok), " ")
        ids = pc.binary_join_element_wise(
            pa.scalar("d"),
            pc.utf8_lpad(pc.cast(pa.array(np.arange(lo, hi)), pa.string()), 9, "0"),
            "",
        )
        batch = pa.record_batch([ids, pa.array([lang] * n, pa.string()), text], schema=schema)
        writer.write_batch(batch, row_group_size=args.chunk)
        n_tokens += total
        n_oov += int(oov.sum())
        text_bytes += text.nbytes
        per_lang[lang] += n
    if writer is not None:
        writer.close()
    return {
        "documents": args.docs,
        "per_language": per_lang,
        "tokens": n_tokens,
        "tokens_per_doc": round(n_tokens / args.docs, 2),
        "oov_tokens": n_oov,
        "text_mb_in_memory": round(text_bytes / MB, 1),
        "parquet_files": len(list(out_dir.glob("*.parquet"))),
        "row_groups": n_chunks,
        "parquet_mb": round(sum(f.stat().st_size for f in out_dir.glob("*.parquet")) / MB, 1),
    }


# --- worker: Python API -----------------------------------------------------------------------


class Clock:
    """Accumulates wall and CPU (this process) seconds over ``with`` blocks."""

    def __init__(self) -> None:
        self.wall = 0.0
        self.cpu = 0.0

    def __enter__(self) -> Clock:
        self._w = time.perf_counter()
        self._c = time.process_time()
        return self

    def __exit__(self, *exc) -> None:
        self.wall += time.perf_counter() - self._w
        self.cpu += time.process_time() - self._c

    def as_dict(self) -> dict:
        return {"wall_s": round(self.wall, 3), "cpu_s": round(self.cpu, 3)}


def worker_api(args) -> dict:
    from pipeline.features.weighting import tfidf_rows
    from pipeline.model.cr5_model import Cr5Model

    rss0 = rss_now_mb()
    t = time.perf_counter()
    model = Cr5Model.load(args.model)  # checksums verified
    load_s = time.perf_counter() - t
    for lang in model.languages:
        model._map(lang)  # builds each language's LanguageVocabulary (what embed does first)
    rss_model = rss_now_mb()

    clocks = {k: Clock() for k in ("read", "embed", "tokenize", "tfidf", "lookup", "phi")}
    n_docs = 0
    n_batches = 0
    mismatched = 0
    zero_rows = 0
    for f in sorted(Path(args.corpus).glob("*.parquet")):
        pf = pq.ParquetFile(f)
        it = iter(pf.iter_batches(batch_size=args.batch, columns=["lang", "text"]))
        while True:
            with clocks["read"]:
                batch = next(it, None)
            if batch is None:
                break
            langs = batch.column("lang")
            for lang in pc.unique(langs).to_pylist():
                texts = batch.column("text")
                if len(pc.unique(langs)) > 1:
                    texts = pc.filter(texts, pc.equal(langs, lang))
                n = len(texts)
                # End to end: the public API.
                with clocks["embed"]:
                    vectors = model.embed(texts, lang)
                # The same work, phase by phase.
                vocab = model._vocab[lang]
                phi = model._map(lang).phi
                with clocks["tokenize"]:
                    tokens, doc_of = model.tokenizer.flat_tokens(texts)
                with clocks["tfidf"]:
                    indptr, indices, values = tfidf_rows(tokens, doc_of, n, vocab)
                with clocks["lookup"]:
                    vocab.lookup(tokens)
                with clocks["phi"]:
                    x = sp.csr_matrix((values, indices, indptr), shape=(n, phi.shape[0]))
                    v2 = np.asarray(x @ phi, dtype=np.float32)
                if not np.array_equal(vectors, v2):
                    mismatched += 1
                zero_rows += int((np.diff(indptr) == 0).sum())
                n_docs += n
                n_batches += 1
                del vectors, v2, x, tokens, doc_of, indptr, indices, values
    return {
        "documents": n_docs,
        "batches": n_batches,
        "zero_vectors": zero_rows,
        "batches_phases_differ_from_embed": mismatched,
        "model_load_s": round(load_s, 2),
        "rss_before_load_mb": round(rss0, 1),
        "rss_after_model_load_mb": round(rss_model, 1),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "clocks": {k: c.as_dict() for k, c in clocks.items()},
    }


# --- worker: Spark stage ----------------------------------------------------------------------


class ProcSampler(threading.Thread):
    """Samples RSS/PSS of this process's descendants (the JVM, pyspark.daemon and its workers)."""

    def __init__(self, interval: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.interval = interval
        self.stop_event = threading.Event()
        self.samples = 0
        self.lock = threading.Lock()
        self.cpu_ticks: dict[int, int] = {}  # last seen utime + stime of each descendant
        self.kind: dict[int, str] = {}  # "jvm", "python" (pyspark workers) or "other"
        self.peak = {
            "jvm_rss_mb": 0.0,
            "jvm_pss_mb": 0.0,
            "python_workers_rss_sum_mb": 0.0,
            "python_workers_pss_sum_mb": 0.0,
            "python_worker_rss_max_mb": 0.0,
            "python_workers_max_count": 0,
            "all_descendants_pss_sum_mb": 0.0,
        }

    @staticmethod
    def _kib(path: str, key: str) -> float:
        try:
            with open(path) as fh:
                for line in fh:
                    if line.startswith(key):
                        return int(line.split()[1]) / 1024.0
        except OSError:
            pass
        return 0.0

    def cpu_s(self, kind: str | None = None) -> float:
        """CPU seconds used so far by the descendants seen (of one kind); an exited process
        counts until its last sample."""
        with self.lock:
            ticks = sum(
                t for pid, t in self.cpu_ticks.items() if kind in (None, self.kind.get(pid))
            )
        return ticks / os.sysconf("SC_CLK_TCK")

    def _descendants(self) -> list[int]:
        stats = process_tree(os.getpid())
        out = [pid for pid in stats if pid != os.getpid()]
        with self.lock:
            for c in out:
                # fields[11], fields[12]: utime, stime (stat fields 14 and 15)
                self.cpu_ticks[c] = int(stats[c][11]) + int(stats[c][12])
        return out

    def sample(self) -> None:
        jvm_rss = jvm_pss = py_rss = py_pss = py_max = all_pss = 0.0
        n_py = 0
        for pid in self._descendants():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            rss = self._kib(f"/proc/{pid}/status", "VmRSS:")
            pss = self._kib(f"/proc/{pid}/smaps_rollup", "Pss:")
            all_pss += pss
            if "java" in cmd.split(" ")[0]:
                self.kind[pid] = "jvm"
                jvm_rss += rss
                jvm_pss += pss
            elif "pyspark.daemon" in cmd or "pyspark.worker" in cmd:
                self.kind[pid] = "python"
                py_rss += rss
                py_pss += pss
                py_max = max(py_max, rss)
                n_py += 1
        pk = self.peak
        pk["jvm_rss_mb"] = max(pk["jvm_rss_mb"], jvm_rss)
        pk["jvm_pss_mb"] = max(pk["jvm_pss_mb"], jvm_pss)
        pk["python_workers_rss_sum_mb"] = max(pk["python_workers_rss_sum_mb"], py_rss)
        pk["python_workers_pss_sum_mb"] = max(pk["python_workers_pss_sum_mb"], py_pss)
        pk["python_worker_rss_max_mb"] = max(pk["python_worker_rss_max_mb"], py_max)
        pk["python_workers_max_count"] = max(pk["python_workers_max_count"], n_py)
        pk["all_descendants_pss_sum_mb"] = max(pk["all_descendants_pss_sum_mb"], all_pss)
        self.samples += 1

    def run(self) -> None:
        while not self.stop_event.is_set():
            self.sample()
            self.stop_event.wait(self.interval)

    def result(self) -> dict:
        return {"samples": self.samples, **{k: round(v, 1) for k, v in self.peak.items()}}


def worker_spark(args) -> dict:
    from pipeline.config import load_config
    from pipeline.spark import get_spark
    from pipeline.stages.embed import run

    cfg = load_config(
        [ROOT / "conf" / "local.yaml"],
        [
            f"spark.master={args.spark_master}",
            'spark.conf={"spark.ui.showConsoleProgress": "false"}',
            f"paths.root={args.spark_root}",
            f"paths.model={args.model}",
            f"embed.input={args.corpus}",
            f"embed.batch_rows={args.batch}",
        ],
    )
    sampler = ProcSampler()
    sampler.start()
    t = time.perf_counter()
    spark = get_spark(cfg.spark)
    spark.sparkContext.setLogLevel("ERROR")
    session_s = time.perf_counter() - t
    java = spark.sparkContext._jvm.System.getProperty("java.version")
    sampler.sample()
    desc_cpu0 = sampler.cpu_s()
    jvm_cpu0, py_cpu0 = sampler.cpu_s("jvm"), sampler.cpu_s("python")
    t = time.perf_counter()
    c = time.process_time()
    report = run(spark, cfg)
    stage_s = time.perf_counter() - t
    stage_driver_cpu = time.process_time() - c
    sampler.sample()
    desc_cpu = sampler.cpu_s() - desc_cpu0
    jvm_cpu, py_cpu = sampler.cpu_s("jvm") - jvm_cpu0, sampler.cpu_s("python") - py_cpu0
    spark.stop()
    sampler.stop_event.set()
    sampler.join()
    return {
        "master": cfg.spark.master,
        "driver_memory": cfg.spark.driver_memory,
        "java": java,
        "session_start_s": round(session_s, 2),
        "stage_wall_s": round(stage_s, 2),
        "stage_driver_python_cpu_s": round(stage_driver_cpu, 2),
        # JVM (driver + executor threads in local mode) and Python workers, during the stage.
        "stage_descendants_cpu_s": round(desc_cpu, 2),
        "stage_jvm_cpu_s": round(jvm_cpu, 2),
        "stage_python_workers_cpu_s": round(py_cpu, 2),
        "stage_cpu_s": round(stage_driver_cpu + desc_cpu, 2),
        "report": report,
        "driver_python_peak_rss_mb": round(peak_rss_mb(), 1),
        "descendants": sampler.result(),
    }


# --- orchestration ----------------------------------------------------------------------------


def run_worker(kind: str, args, workdir: Path, extra: list[str]) -> dict:
    out = workdir / f"{kind}.json"
    log = workdir / f"{kind}.log"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", kind]
    cmd += ["--worker-out", str(out), "--model", str(workdir / "model")]
    cmd += ["--corpus", str(workdir / "corpus"), "--batch", str(args.batch), *extra]
    t = time.perf_counter()
    with log.open("w") as fh:
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT, check=False)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-40:]
        raise SystemExit(f"{kind} worker failed ({proc.returncode}):\n" + "\n".join(tail))
    res = json.loads(out.read_text())
    res["subprocess_wall_s"] = round(wall, 2)
    return res


def equality_check(workdir: Path, n_docs: int, sample: int, seed: int) -> dict:
    from pipeline.model.cr5_model import Cr5Model

    rng = np.random.default_rng(seed + 2)
    pick = np.sort(rng.choice(n_docs, size=min(sample, n_docs), replace=False))
    ids = pc.binary_join_element_wise(
        pa.scalar("d"), pc.utf8_lpad(pc.cast(pa.array(pick), pa.string()), 9, "0"), ""
    )
    docs = (
        pads.dataset(str(workdir / "corpus"), format="parquet")
        .to_table(filter=pc.field("doc_id").isin(ids))
        .sort_by("doc_id")
    )
    files = sorted(str(f) for f in (workdir / "spark" / "embeddings").rglob("*.parquet"))
    emb = (
        pads.dataset(files, format="parquet", partitioning=pads.partitioning(flavor="hive"))
        .to_table(columns=["doc_id", "vector", "n_terms"], filter=pc.field("doc_id").isin(ids))
        .sort_by("doc_id")
    )
    if emb.num_rows != docs.num_rows or emb.column("doc_id") != docs.column("doc_id"):
        return {"ok": False, "error": f"{emb.num_rows} Spark rows for {docs.num_rows} docs"}
    model = Cr5Model.load(workdir / "model", verify=False)
    api = np.zeros((docs.num_rows, model.dim), dtype=np.float32)
    counts = np.zeros(docs.num_rows, dtype=np.int64)
    langs = docs.column("lang").combine_chunks()
    for lang in pc.unique(langs).to_pylist():
        rows = np.flatnonzero(pc.equal(langs, lang).to_numpy(zero_copy_only=False))
        v, cnt = model.embed_with_counts(docs.column("text").take(pa.array(rows)), lang)
        api[rows] = v
        counts[rows] = cnt
    spark_vec = np.stack(emb.column("vector").to_numpy(zero_copy_only=False)).astype(np.float32)
    diff = np.abs(spark_vec - api)
    return {
        "ok": True,
        "documents": int(docs.num_rows),
        "max_abs_diff": float(diff.max()),
        "rows_bitwise_equal": int((spark_vec == api).all(axis=1).sum()),
        "n_terms_equal": bool(np.array_equal(emb.column("n_terms").to_numpy(), counts)),
        "max_abs_value": float(np.abs(api).max()),
    }


def fmt_int(x: float) -> str:
    return f"{x:,.0f}"


def print_report(res: dict) -> None:
    a, s, cfg = res.get("api"), res.get("spark"), res["config"]
    emit()
    emit("## Results")
    emit()
    if a:
        ck = a["clocks"]
        phase_wall = ck["tokenize"]["wall_s"] + ck["tfidf"]["wall_s"] + ck["phi"]["wall_s"]
        phase_cpu = ck["tokenize"]["cpu_s"] + ck["tfidf"]["cpu_s"] + ck["phi"]["cpu_s"]
        emit(f"API (Cr5Model.embed, 1 process, batches of {cfg['batch']:,}):")
        emit("| phase | wall [s] | CPU [s] | share of wall | share of CPU |")
        emit("|---|---|---|---|---|")
        for key, label in (
            ("tokenize", "tokenise (Tokenizer.flat_tokens)"),
            ("tfidf", "lookup + TF-IDF (tfidf_rows)"),
            ("lookup", "  of which vocabulary lookup (timed again)"),
            ("phi", "Φ product (csr @ phi)"),
        ):
            emit(
                f"| {label} | {ck[key]['wall_s']:.1f} | {ck[key]['cpu_s']:.1f} | "
                f"{ck[key]['wall_s'] / phase_wall:.1%} | {ck[key]['cpu_s'] / phase_cpu:.1%} |"
            )
        emit(f"| sum of the three phases | {phase_wall:.1f} | {phase_cpu:.1f} | 100% | 100% |")
        emit(
            f"| Cr5Model.embed, end to end | {ck['embed']['wall_s']:.1f} | "
            f"{ck['embed']['cpu_s']:.1f} | | |"
        )
        emit(
            f"| Parquet read (not in embed) | {ck['read']['wall_s']:.1f} | "
            f"{ck['read']['cpu_s']:.1f} | | |"
        )
        emit()
    emit("| path | documents | wall [s] | docs/s/core (wall) | docs per CPU-s | peak memory [MB] |")
    emit("|---|---|---|---|---|---|")
    if a:
        e = a["clocks"]["embed"]
        emit(
            f"| API Cr5Model.embed (1 core) | {fmt_int(a['documents'])} | {e['wall_s']:.1f} | "
            f"{fmt_int(a['documents'] / e['wall_s'])} | {fmt_int(a['documents'] / e['cpu_s'])} | "
            f"{a['peak_rss_mb']:,.0f} (process VmHWM; {a['rss_after_model_load_mb']:,.0f} "
            f"after model load) |"
        )
    if s:
        d = s["descendants"]
        n = s["report"]["documents"]
        emit(
            f"| Spark embed stage, {s['master']} (2 cores) | {fmt_int(n)} | "
            f"{s['stage_wall_s']:.1f} | {fmt_int(n / s['stage_wall_s'] / 2)} | "
            f"{fmt_int(n / s['stage_cpu_s'])} | "
            f"driver Python {s['driver_python_peak_rss_mb']:,.0f}; JVM {d['jvm_rss_mb']:,.0f} RSS; "
            f"Python workers Σ {d['python_workers_rss_sum_mb']:,.0f} RSS / "
            f"{d['python_workers_pss_sum_mb']:,.0f} PSS "
            f"(max one {d['python_worker_rss_max_mb']:,.0f}, "
            f"{d['python_workers_max_count']} procs); all Σ PSS "
            f"{d['all_descendants_pss_sum_mb']:,.0f} |"
        )
        emb = s["report"]["embed_seconds"]
        other = max(
            0.0,
            s["stage_descendants_cpu_s"] - s["stage_jvm_cpu_s"] - s["stage_python_workers_cpu_s"],
        )
        emit(
            f"| Spark, embed + count only (report embed_seconds) | {fmt_int(n)} | {emb:.1f} | "
            f"{fmt_int(n / emb / 2)} | | |"
        )
        emit()
        emit(
            f"Spark session start (excluded): {s['session_start_s']:.1f} s. Stage wall includes "
            "the input language count, model checksum verification, embedding and the "
            "Parquet write of the embeddings dataset; stage CPU "
            f"{s['stage_cpu_s']:.1f} s = driver Python {s['stage_driver_python_cpu_s']:.1f} + "
            f"JVM {s['stage_jvm_cpu_s']:.1f} + Python workers "
            f"{s['stage_python_workers_cpu_s']:.1f} (+ other {other:.1f}"
            "; from /proc, sampled every 0.25 s)."
        )
    q = res.get("equality")
    if q:
        emit()
        if q["ok"]:
            emit(
                f"Equality, Spark vs API on {q['documents']:,} random documents: max |diff| = "
                f"{q['max_abs_diff']:.3g} (max |value| {q['max_abs_value']:.3g}); "
                f"{q['rows_bitwise_equal']:,} rows bitwise equal; n_terms equal: "
                f"{q['n_terms_equal']}"
            )
        else:
            emit(f"Equality check FAILED: {q['error']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--langs", type=int, default=3)
    ap.add_argument("--vocab", type=int, default=200_000)
    ap.add_argument("--r", type=int, default=300)
    ap.add_argument(
        "--batch",
        type=int,
        default=10_000,
        help="texts per API batch and embed.batch_rows for Spark",
    )
    ap.add_argument("--tokens", type=float, default=60.0, help="mean tokens per document")
    ap.add_argument("--zipf", type=float, default=1.0, help="Zipf exponent s")
    ap.add_argument("--oov", type=float, default=0.05, help="fraction of out-of-vocabulary tokens")
    ap.add_argument(
        "--chunk",
        type=int,
        default=50_000,
        help="documents per generated chunk (one language, one row group)",
    )
    ap.add_argument("--files", type=int, default=10, help="Parquet files")
    ap.add_argument("--sample", type=int, default=1000, help="documents in the equality check")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--spark-master", default="local[2]")
    ap.add_argument("--skip-api", action="store_true")
    ap.add_argument("--skip-spark", action="store_true")
    ap.add_argument("--workdir", default=None, help="scratch directory (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument("--out", default=None, help="JSON file for every number")
    # Internal: the measured subprocesses.
    ap.add_argument("--worker", choices=("api", "spark"), help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--corpus", help=argparse.SUPPRESS)
    ap.add_argument("--spark-root", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.worker:
        res = worker_api(args) if args.worker == "api" else worker_spark(args)
        Path(args.worker_out).write_text(json.dumps(res, indent=2, default=str))
        return 0

    if args.langs > len(LANG_CODES):
        ap.error(f"--langs at most {len(LANG_CODES)}")
    langs = list(LANG_CODES[: args.langs])
    config = {
        k: getattr(args, k)
        for k in (
            "docs",
            "langs",
            "vocab",
            "r",
            "batch",
            "tokens",
            "zipf",
            "oov",
            "chunk",
            "files",
            "sample",
            "seed",
            "spark_master",
        )
    }
    res: dict = {"machine": machine_info("pyarrow", "pyspark"), "config": config}
    m = res["machine"]
    emit("# Embedding benchmark (bench/bench_embed.py)")
    emit()
    emit(
        f"machine   {m['cpu_model']}, {m['cores']} cores, {m['memory_gb']} GB, load average "
        f"at start {m['load_average_at_start']}"
    )
    emit(
        f"threads   OPENBLAS_NUM_THREADS={m['OPENBLAS_NUM_THREADS']} "
        f"OMP_NUM_THREADS={m['OMP_NUM_THREADS']}"
    )
    emit(
        f"software  python {m['python']}, numpy {m['numpy']}, scipy {m['scipy']}, pyarrow "
        f"{m['pyarrow']}, pyspark {m['pyspark']}"
    )
    emit(f"config    {json.dumps(config)}")

    base = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="bench_embed_"))
    workdir = base / f"run-{os.getpid()}"
    workdir.mkdir(parents=True)
    try:
        t = time.perf_counter()
        model_info = make_model(workdir / "model", langs, args.vocab, args.r, args.docs, args)
        model_s = time.perf_counter() - t
        t = time.perf_counter()
        corpus = make_corpus(workdir / "corpus", langs, args.vocab, args)
        corpus_s = time.perf_counter() - t
        res["model"] = {
            "languages": langs,
            "vocab_per_language": args.vocab,
            "r": args.r,
            "mb_on_disk": round(model_info["files_bytes"] / MB, 1),
            "generate_s": round(model_s, 1),
        }
        res["corpus"] = {**corpus, "generate_s": round(corpus_s, 1)}
        emit(
            f"model     {langs}, p = {args.vocab:,} each, r = {args.r}, "
            f"{res['model']['mb_on_disk']:,} MB on disk (written in {model_s:.1f} s)"
        )
        emit(
            f"corpus    {corpus['documents']:,} docs, {corpus['tokens']:,} tokens "
            f"({corpus['tokens_per_doc']}/doc, {corpus['oov_tokens']:,} OOV), "
            f"{corpus['parquet_files']} files / {corpus['row_groups']} row groups, "
            f"{corpus['parquet_mb']:,} MB Parquet, {corpus['text_mb_in_memory']:,} MB text "
            f"(written in {corpus_s:.1f} s)"
        )
        if not args.skip_api:
            emit("running   API worker ...")
            res["api"] = run_worker("api", args, workdir, [])
        if not args.skip_spark:
            emit("running   Spark worker ...")
            res["spark"] = run_worker(
                "spark",
                args,
                workdir,
                ["--spark-root", str(workdir / "spark"), "--spark-master", args.spark_master],
            )
            emit("running   equality check ...")
            res["equality"] = equality_check(workdir, args.docs, args.sample, args.seed)
        res["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
        print_report(res)
        emit()
        emit(f"load average at end {res['load_average_at_end']}")
    finally:
        if args.keep:
            emit(f"kept {workdir}")
        else:
            shutil.rmtree(base if not args.workdir else workdir, ignore_errors=True)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(res, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
