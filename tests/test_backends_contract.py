"""Contract tests of the corpus backends built from a real ``tfidf`` dataset: local and Spark.

The dataset comes from running the real stages (ingest -> vocabulary -> tfidf) on a tiny
generated corpus. Every backend is checked against a dense reference assembled independently
(row by row from ``to_pylist()``), and the two backends against each other.

Tolerances (relative, Frobenius norm): float64 passes differ from the reference only in
summation order, so 1e-12. float32 passes round inputs and accumulate in float32: each output
entry is a sum of at most n_l (< 100 here) products, so the relative error is a few times
``sqrt(n_l) * 6e-8 ~ 6e-7``; 1e-5 leaves a margin of ~10 without hiding a real bug (a wrong
row, concept or partition would be O(1)).
"""

from __future__ import annotations

import functools
import json
import pickle
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import scipy.linalg
import scipy.sparse as sp

from pipeline.backends import make_backend
from pipeline.backends.loader import arrow_to_csr
from pipeline.backends.local import LocalCorpusBackend
from pipeline.backends.spark import (
    DetachedBackendError,
    SparkCorpusBackend,
    in_task_chunk,
    job_description,
)
from pipeline.backends.spark_passes import gram_partition
from pipeline.errors import ConfigError, ConvergenceWarning, InputDataError
from pipeline.io.datasets import read_dataset, write_dataset
from pipeline.io.schemas import TFIDF
from pipeline.linalg.cr5 import solve_cr5
from pipeline.linalg.preconditioner import spectral_jacobi
from pipeline.stages import get_stage

REPO = Path(__file__).resolve().parent.parent
LANGS = ("de", "en", "fr")
KINDS = ("local", "spark")
TOL = {"float64": 1e-12, "float32": 1e-5}
# Few row blocks per language; 3 > cores exercises the compact merge of partials.
SPARK_PARTITIONS = {"float64": 2, "float32": 3}


# --- the dataset ------------------------------------------------------------------------------


def _records(seed: int = 3, n_concepts: int = 60) -> list[dict]:
    rng = np.random.default_rng(seed)
    records = []
    for c in range(n_concepts):
        for lang in LANGS:
            if rng.random() < 0.1:
                continue
            vocab = [f"{lang}{w}" for w in range(80)]
            p = 1.0 / np.arange(1, 81)
            words = rng.choice(vocab, size=int(rng.integers(5, 40)), p=p / p.sum())
            records.append(
                {"concept_id": f"c{c:03d}", "lang": lang, "title": "t", "text": " ".join(words)}
            )
    return records


@pytest.fixture(scope="module")
def tfidf_path(spark, tmp_path_factory) -> str:
    from pipeline.config import load_config

    d = tmp_path_factory.mktemp("contract")
    corpus = d / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in _records()))
    cfg = load_config(
        [REPO / "conf" / "local.yaml"],
        [
            f"paths.root={d / 'out'}",
            "spark.shuffle_partitions=2",
            f"ingest.input={corpus}",
            "features.min_unique_words=2",
            "features.min_df=2",
        ],
    )
    for stage in ("ingest", "vocabulary", "tfidf"):
        get_stage(stage)(spark, cfg)
    return cfg.paths.dataset("tfidf")


@pytest.fixture(scope="module")
def reference(spark, tfidf_path):
    """``{lang: (dense X_l float64, dense Y_l)}``, K and p_l, assembled row by row."""
    from pipeline.io.datasets import read_manifest

    report = read_manifest(spark, TFIDF, tfidf_path)["report"]
    k = report["concepts"]
    rows = read_dataset(spark, TFIDF, tfidf_path).toArrow().to_pylist()
    out = {}
    for lang in LANGS:
        mine = sorted((r for r in rows if r["lang"] == lang), key=lambda r: r["row"])
        p = report["per_language"][lang]["vocabulary"]
        x = np.zeros((len(mine), p))
        y = np.zeros((len(mine), k))
        for i, r in enumerate(mine):
            x[i, r["indices"]] = r["values"]
            y[i, r["concept_index"]] = 1.0
        out[lang] = (x, y)
    return out, k


@pytest.fixture(scope="module")
def backends(spark, tfidf_path):
    """Every (kind, dtype) backend over the dataset, built once through the factory."""
    built = {}
    for dtype in TOL:
        built["local", dtype] = make_backend("local", spark, tfidf_path, dtype=dtype)
        # row-partitioned with one job per CG iteration (no fused solves)
        built["spark", dtype] = make_backend(
            "spark",
            spark,
            tfidf_path,
            dtype=dtype,
            partitions_per_language=SPARK_PARTITIONS[dtype],
            solve_in_task_max_nnz=0,
        )
    # the default layout for small languages: one block each, CG solves fused (one job)
    built["spark_in_task", "float64"] = make_backend("spark", spark, tfidf_path, dtype="float64")
    # row-partitioned like a big language on a cluster, solves fused: every solving task
    # gathers the 3 blocks; one task (passes comparable with local) or 2 column groups
    for tasks in (1, 2):
        built[f"spark_fused{tasks}", "float64"] = make_backend(
            "spark",
            spark,
            tfidf_path,
            dtype="float64",
            partitions_per_language=3,
            solve_tasks=tasks,
        )
    yield built
    for be in built.values():
        if isinstance(be, SparkCorpusBackend):
            be.close()


@pytest.fixture(params=KINDS)
def kind(request):
    return request.param


@pytest.fixture(params=sorted(TOL))
def dtype(request):
    return request.param


def _close(got: np.ndarray, want: np.ndarray, tol: float) -> None:
    assert got.dtype == np.float64 and got.shape == want.shape
    assert np.linalg.norm(got - want) <= tol * np.linalg.norm(want), np.linalg.norm(
        got - want
    ) / np.linalg.norm(want)


# --- the contract, against each backend --------------------------------------------------------


@pytest.mark.slow
def test_sizes_come_from_the_manifest(backends, reference, kind):
    ref, k = reference
    be = backends[kind, "float32"]
    assert be.languages == LANGS
    assert be.n_concepts == k
    for lang, (x, _) in ref.items():
        assert (be.n_docs(lang), be.n_terms(lang)) == x.shape
    assert be.n_total_docs() == sum(x.shape[0] for x, _ in ref.values())


@pytest.mark.slow
def test_every_method_matches_the_dense_reference(backends, reference, kind, dtype):
    ref, k = reference
    be = backends[kind, dtype]
    be.reset_counts()
    tol = TOL[dtype]
    rng = np.random.default_rng(1)
    b = 7
    for lang, (x, y) in ref.items():
        np.testing.assert_allclose(be.column_sums(lang), x.sum(0), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(be.column_sq_sums(lang), (x**2).sum(0), rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(be.concept_counts(lang), y.sum(0))
        v = rng.standard_normal((x.shape[1], b))
        p = rng.standard_normal((k, b))
        _close(be.gram(lang, v), x.T @ (x @ v), tol)
        _close(be.xt_gather(lang, p), x.T @ (y @ p), tol)
        _close(be.x_scatter(lang, v), y.T @ (x @ v), tol)
        # the compact form: exactly the rows of the language's concepts, the rest is zero
        ids, values = be.x_scatter_rows(lang, v)
        np.testing.assert_array_equal(ids, np.flatnonzero(np.asarray(y.sum(0)).ravel() > 0))
        dense = y.T @ (x @ v)
        # as the pass computed them (the pass dtype; a Spark pass that is not fused returns
        # float64 partial sums): the Cᵀ product adds them into its float64 sum, no copy here
        assert values.dtype == np.dtype(dtype) or (kind == "spark" and values.dtype == np.float64)
        _close(values.astype(np.float64), dense[ids], tol)
        assert not np.delete(dense, ids, axis=0).any()
    counts = be.pass_counts
    for method in ("gram", "xt_gather", "x_scatter"):
        calls = 2 if method == "x_scatter" else 1
        assert counts["passes"][method] == calls * len(LANGS)
        assert counts["column_passes"][method] == calls * b * len(LANGS)
    for method in ("column_sums", "column_sq_sums", "concept_counts"):
        assert counts["passes"][method] == len(LANGS)
        assert counts["column_passes"][method] == 0


@pytest.mark.slow
def test_local_and_spark_agree(backends, dtype):
    loc, spk = backends["local", dtype], backends["spark", dtype]
    tol = TOL[dtype]
    rng = np.random.default_rng(2)
    for lang in LANGS:
        v = rng.standard_normal((loc.n_terms(lang), 4))
        p = rng.standard_normal((loc.n_concepts, 4))
        for method, arg in (("gram", v), ("xt_gather", p), ("x_scatter", v)):
            _close(getattr(spk, method)(lang, arg), getattr(loc, method)(lang, arg), tol)
        for method in ("column_sums", "column_sq_sums", "concept_counts"):
            np.testing.assert_allclose(
                getattr(spk, method)(lang), getattr(loc, method)(lang), rtol=1e-12, atol=1e-15
            )


@pytest.mark.slow
@pytest.mark.parametrize("tree_above", [0, 100])
def test_spark_partials_merge_on_executors_or_driver(backends, dtype, monkeypatch, tree_above):
    """Both ways of summing the partials (executor tree vs. driver) give the local result, and
    the threshold picks the way: every pass over more partitions than ``TREE_REDUCE_ABOVE``
    sums its row ranges on the executors (one ``reduceByKey``, spied on the driver where the
    job is built), no pass up to it does."""
    from pyspark.rdd import RDD

    import pipeline.backends.spark as spark_backend

    monkeypatch.setattr(spark_backend, "TREE_REDUCE_ABOVE", tree_above)
    keyed_reduces: list[RDD] = []
    reduce_by_key = RDD.reduceByKey

    def spy(self: RDD, *args, **kwargs) -> RDD:
        keyed_reduces.append(self)
        return reduce_by_key(self, *args, **kwargs)

    monkeypatch.setattr(RDD, "reduceByKey", spy)
    loc, spk = backends["local", dtype], backends["spark", dtype]
    assert all(0 < spk.n_partitions(lang) <= 100 for lang in LANGS)
    passes_before = sum(spk.pass_counts["passes"].values())
    rng = np.random.default_rng(4)
    for lang in LANGS:
        v = rng.standard_normal((loc.n_terms(lang), 3))
        p = rng.standard_normal((loc.n_concepts, 3))
        for method, arg in (("gram", v), ("xt_gather", p), ("x_scatter", v)):
            _close(getattr(spk, method)(lang, arg), getattr(loc, method)(lang, arg), TOL[dtype])
    passes = sum(spk.pass_counts["passes"].values()) - passes_before
    assert passes == 3 * len(LANGS)
    assert len(keyed_reduces) == (passes if tree_above == 0 else 0)


@pytest.mark.slow
@pytest.mark.parametrize("fused", ["spark_fused1", "spark_fused2"])
def test_fused_passes_equal_the_dense_reference(backends, reference, fused):
    """Row-partitioned languages under solve_in_task_max_nnz run every pass as one job whose
    tasks gather the blocks and each sum a share of the columns (no shuffled partials):
    the same products as the dense reference and the per-partition route."""
    ref, k = reference
    be, per_partition = backends[fused, "float64"], backends["spark", "float64"]
    assert be._rdd(LANGS[0]).getNumPartitions() == 3
    rng = np.random.default_rng(7)
    b = 5
    for lang, (x, y) in ref.items():
        v = rng.standard_normal((x.shape[1], b))
        p = rng.standard_normal((k, b))
        for method, arg, want in (
            ("gram", v, x.T @ (x @ v)),
            ("xt_gather", p, x.T @ (y @ p)),
            ("x_scatter", v, y.T @ (x @ v)),
        ):
            got = getattr(be, method)(lang, arg)
            _close(got, want, TOL["float64"])
            _close(got, getattr(per_partition, method)(lang, arg), TOL["float64"])
        ids, values = be.x_scatter_rows(lang, v)
        ids2, values2 = per_partition.x_scatter_rows(lang, v)
        np.testing.assert_array_equal(ids, ids2)
        _close(values, (y.T @ (x @ v))[ids], TOL["float64"])
        _close(values, values2, TOL["float64"])


@pytest.mark.slow
def test_concurrent_passes_from_three_threads(backends, reference, kind):
    """Three threads at once (on Spark: three concurrent jobs), two on the same language."""
    ref, k = reference
    be = backends[kind, "float64"]
    be.reset_counts()
    rng = np.random.default_rng(3)
    jobs = [
        ("de", "gram", rng.standard_normal((ref["de"][0].shape[1], 5))),
        ("en", "xt_gather", rng.standard_normal((k, 5))),
        ("en", "x_scatter", rng.standard_normal((ref["en"][0].shape[1], 5))),
    ]
    results: dict[int, list] = {i: [] for i in range(len(jobs))}
    barrier = threading.Barrier(len(jobs))

    def work(i: int) -> None:
        lang, method, arg = jobs[i]
        barrier.wait()
        for rep in range(2):
            be.describe(f"cr5/eig{rep}/{method}[{lang}]", rep)
            results[i].append(getattr(be, method)(lang, arg))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    for i, (lang, method, arg) in enumerate(jobs):
        x, y = ref[lang]
        want = {
            "gram": lambda x=x, arg=arg: x.T @ (x @ arg),
            "xt_gather": lambda x=x, y=y, arg=arg: x.T @ (y @ arg),
            "x_scatter": lambda x=x, y=y, arg=arg: y.T @ (x @ arg),
        }[method]()
        assert len(results[i]) == 2
        for got in results[i]:
            _close(got, want, TOL["float64"])
    assert be.pass_counts["passes"] == {"gram": 2, "xt_gather": 2, "x_scatter": 2}


@pytest.mark.slow
@pytest.mark.parametrize("other", ["spark", "spark_in_task", "spark_fused1", "spark_fused2"])
def test_solve_cr5_gives_the_same_subspace_on_both_backends(backends, other):
    """float64 end to end: the backends differ only in summation order, so the subspaces
    agree far below the 0.1 degree acceptance bound; we require 1e-4 degrees. ``spark``
    drives CG with one job per iteration, ``spark_in_task`` runs each solve in one task,
    ``spark_fused<n>`` each solve in one job of n tasks that gather 3 row blocks."""
    params = dict(lam=10.0, r=5, oversampling=5, cg_rtol=1e-6, w_rtol=1e-10, eig_rtol=1e-4)
    res = {kind: solve_cr5(backends[kind, "float64"], **params) for kind in ("local", other)}
    phi = {kind: np.vstack([r.components[lang] for lang in LANGS]) for kind, r in res.items()}
    angles = np.degrees(scipy.linalg.subspace_angles(phi["local"], phi[other]))
    assert angles.max() < 1e-4, angles
    np.testing.assert_allclose(res[other].eigenvalues, res["local"].eigenvalues, rtol=1e-9)
    # same CG iterations, so the same passes (in-task iterations count as gram passes);
    # with columns split over 2 tasks (spark_fused2; spark_in_task on local[2] by default)
    # each task traverses X for its share: more passes carrying fewer columns, the same
    # column-passes
    if other in ("spark", "spark_fused1"):
        assert res[other].history["passes"] == res["local"].history["passes"]
    else:
        mine, ref = res[other].history["passes"], res["local"].history["passes"]
        assert mine["column_passes"] == ref["column_passes"]
        assert mine["passes"]["gram"] >= ref["passes"]["gram"]


@pytest.mark.slow
def test_in_task_solve_in_column_chunks_gives_the_same_answer(backends, reference, monkeypatch):
    """A memory bound below one column's CG vectors solves column by column in the task."""
    ref, _ = reference
    one = backends["spark_in_task", "float64"]
    lang, (x, _) = next(iter(ref.items()))
    rhs = np.random.default_rng(6).standard_normal((x.shape[1], 3))
    kw = dict(lam=0.5, precond=1.0 / ((x**2).sum(0) + 0.5), rtol=1e-10, maxiter=1000)
    whole = one.solve_gram(lang, rhs, **kw)
    monkeypatch.setattr(one, "_solve_memory_mb", 0)  # -> chunks of one column
    one.reset_counts()
    chunked = one.solve_gram(lang, rhs, **kw)
    np.testing.assert_allclose(chunked.x, whole.x, rtol=1e-12, atol=1e-12)
    assert chunked.converged.all() and chunked.residual_norms.shape == (chunked.n_iter + 1, 3)
    # each column was its own CG: the passes are the sum of their iterations
    per_column = [int(np.argmax(chunked.residual_norms[:, j] <= 1e-10)) for j in range(3)]
    assert one.pass_counts["passes"]["gram"] == sum(per_column)
    assert one.pass_counts["column_passes"]["gram"] == sum(per_column)


def test_in_task_chunks_follow_the_cg_dtype():
    """Nine working arrays per column in the CG's dtype: float32 fits twice the columns."""
    mb = 512 * 2**20
    assert in_task_chunk(mb, 200_000, np.float64) == mb // (9 * 8 * 200_000) == 37
    assert in_task_chunk(mb, 200_000, np.float32) == mb // (9 * 4 * 200_000) == 74
    assert in_task_chunk(0, 200_000, np.float32) == 1 and in_task_chunk(mb, 0, np.float32) > 1


@pytest.mark.slow
def test_float32_in_task_solve_equals_float32_block_cg(backends, reference):
    """The right-hand sides and guesses travel to the solving task already in the CG's
    float32 (half the broadcast): block_cg casting float64 inputs itself on the dense Gram
    takes the same iterations to the same solution (up to float32 summation order)."""
    from pipeline.linalg.block_cg import block_cg
    from pipeline.linalg.operator import DenseOperator

    ref, _ = reference
    one = backends["spark_in_task", "float64"]
    lang, (x, _) = next(iter(ref.items()))
    rng = np.random.default_rng(8)
    rhs = rng.standard_normal((x.shape[1], 3))
    x0 = 0.1 * rng.standard_normal((x.shape[1], 3))
    kw = dict(lam=0.5, precond=1.0 / ((x**2).sum(0) + 0.5), rtol=1e-4, maxiter=1000)
    got = one.solve_gram(lang, rhs, x0=x0, dtype=np.float32, **kw)
    gram = DenseOperator(x.T @ x + 0.5 * np.eye(x.shape[1]))
    want = block_cg(gram, rhs, x0=x0, m=kw["precond"], rtol=1e-4, dtype=np.float32)
    assert got.x.dtype == np.float32 and got.n_iter == want.n_iter
    np.testing.assert_allclose(got.x, want.x, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("fused", ["spark_in_task", "spark_fused1", "spark_fused2"])
def test_fused_solves_equal_a_dense_solve(backends, reference, fused):
    """One block or three gathered into the solving tasks, columns in one task or split over
    two: the dense solution. Above solve_in_task_max_nnz (here 0) there is no fused solve."""
    ref, _ = reference
    one, rows = backends[fused, "float64"], backends["spark", "float64"]
    assert all(one.n_partitions(lang) == (1 if fused == "spark_in_task" else 3) for lang in LANGS)
    rng = np.random.default_rng(5)
    for lang, (x, _) in ref.items():
        rhs = rng.standard_normal((x.shape[1], 3))
        jacobi = 1.0 / ((x**2).sum(0) + 0.5)
        # the deflated preconditioner travels to the tasks too (pickled with the payload)
        deflated = spectral_jacobi(
            lambda v, x=x: x.T @ (x @ v) + 0.5 * v, jacobi, 3, oversampling=3
        )
        assert deflated.rank == 3
        want = np.linalg.solve(x.T @ x + 0.5 * np.eye(x.shape[1]), rhs)
        res = one.solve_gram(lang, rhs, lam=0.5, precond=deflated, rtol=1e-10, maxiter=1000)
        assert res.converged.all()
        assert np.linalg.norm(res.x - want) <= 1e-8 * np.linalg.norm(want)
        kw = dict(lam=0.5, precond=jacobi, rtol=1e-10, maxiter=1000)
        assert rows.solve_gram(lang, rhs, **kw) is None
        one.reset_counts()
        res = one.solve_gram(lang, rhs, **kw)
        assert res.converged.all() and res.x.shape == rhs.shape
        assert np.linalg.norm(res.x - want) <= 1e-8 * np.linalg.norm(want)
        assert one.pass_counts["column_passes"]["gram"] == res.n_column_passes
        if fused == "spark_fused1":
            assert one.pass_counts["passes"]["gram"] == res.n_iter
        else:  # two tasks (columns 0:2 and 2:3), each traversing X once per own iteration
            assert res.n_iter <= one.pass_counts["passes"]["gram"] <= 2 * res.n_iter
    p0 = one.n_terms(LANGS[0])
    with pytest.warns(ConvergenceWarning, match="in-task"):
        one.solve_gram(
            LANGS[0],
            rng.standard_normal((p0, 2)),
            lam=0.5,
            precond=np.ones(p0),
            rtol=1e-12,
            maxiter=2,
        )


# --- Spark specifics ---------------------------------------------------------------------------


@pytest.mark.slow
def test_describe_sets_the_job_description_of_the_calling_thread(spark, backends):
    be = backends["spark", "float32"]
    sc = spark.sparkContext
    seen = {}

    def work(name: str, stage: str, it: int | None) -> None:
        be.describe(stage, it)
        seen[name] = sc.getLocalProperty("spark.job.description")

    threads = [
        threading.Thread(target=work, args=("a", "cr5/eig3/cg[en]", 7)),
        threading.Thread(target=work, args=("b", "cr5/mean", None)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"a": "cr5 train: eig 3 / cg[en] / it 7", "b": "cr5 train: mean"}
    assert job_description("cr5/phi/C[de]") == "cr5 train: phi / C[de]"
    # an in-task solve labels its one job as such
    one = backends["spark_in_task", "float64"]
    p0 = one.n_terms(LANGS[0])
    one.solve_gram(
        LANGS[0],
        np.ones((p0, 1)),
        lam=1.0,
        precond=np.ones(p0),
        rtol=0.1,
        maxiter=5,
        name="cr5/eig2/cg[en]",
    )
    assert sc.getLocalProperty("spark.job.description") == "cr5 train: eig 2 / cg[en] / in-task"


@pytest.mark.slow
def test_pickle_round_trip_keeps_sizes_and_drops_spark_handles(spark, backends):
    be = backends["spark", "float32"]
    blob = pickle.dumps(be)
    assert len(blob) < 50_000  # sizes and column statistics only
    clone = pickle.loads(blob)
    assert clone.fingerprint() == be.fingerprint()
    assert clone._sc is None and clone._blocks == {}
    np.testing.assert_array_equal(clone.column_sums("en"), be.column_sums("en"))
    with pytest.raises(DetachedBackendError, match="from_tfidf"):
        clone.gram("en", np.ones((be.n_terms("en"), 1)))
    # A task closure is a module-level function plus a broadcast handle: small, no context.
    from pyspark import cloudpickle

    sc = spark.sparkContext
    bc = sc.broadcast(np.ones(3))
    try:
        assert len(cloudpickle.dumps(functools.partial(gram_partition, bc))) < 2_000
    finally:
        # Pickling a broadcast outside a job registers it for this thread's next job.
        sc._pickled_broadcast_vars.clear()
        bc.destroy()


# --- arrow_to_csr ------------------------------------------------------------------------------


def _lists(rows: list[list], typ: pa.DataType) -> pa.ListArray:
    return pa.array(rows, pa.list_(typ))


def test_arrow_to_csr_matches_an_independent_construction():
    rng = np.random.default_rng(4)
    n, p, k = 40, 30, 9
    rows = rng.permutation(n)
    indices = [sorted(rng.choice(p, size=int(rng.integers(0, 6)), replace=False)) for _ in rows]
    values = [rng.random(len(ix)).astype(np.float32).tolist() for ix in indices]
    concepts = rng.integers(0, k, size=n)
    table = pa.table(
        {
            "row": pa.array(rows, pa.int64()),
            "concept_index": pa.array(concepts, pa.int64()),
            "indices": _lists(indices, pa.int32()),
            "values": _lists(values, pa.float32()),
        }
    )
    # Several chunks, one of them a slice of a larger array (offsets not starting at 0).
    chunked = pa.concat_tables([table.slice(0, 13), table.slice(13, 20), table.slice(33)])
    x, c = arrow_to_csr(chunked, p, lang="xx", n_concepts=k)
    coo_r = [r for r, ix in zip(rows, indices, strict=True) for _ in ix]
    coo_c = [j for ix in indices for j in ix]
    coo_v = [v for vs in values for v in vs]
    want = sp.coo_matrix((coo_v, (coo_r, coo_c)), shape=(n, p)).toarray()
    assert x.dtype == np.float32 and x.shape == (n, p) and isinstance(x, sp.csr_matrix)
    np.testing.assert_array_equal(x.toarray(), want)
    want_c = np.empty(n, np.int64)
    want_c[rows] = concepts
    np.testing.assert_array_equal(c, want_c)


def _table(rows, concepts, indices, values) -> pa.Table:
    return pa.table(
        {
            "row": pa.array(rows, pa.int64()),
            "concept_index": pa.array(concepts, pa.int64()),
            "indices": _lists(indices, pa.int32()),
            "values": _lists(values, pa.float32()),
        }
    )


@pytest.mark.parametrize(
    "table, match",
    [
        (_table([0, 0], [0, 1], [[1], [2]], [[1.0], [1.0]]), "row 0 occurs 2 times"),
        (_table([0, 2], [0, 1], [[1], [2]], [[1.0], [1.0]]), r"row numbers must be 0\.\.1"),
        (_table([0, 1], [0, 1], [[1], [5]], [[1.0], [1.0]]), r"outside \[0, 5\)"),
        (_table([0, 1], [0, 3], [[1], [2]], [[1.0], [1.0]]), r"concept_index .* \[0, 3\)"),
        (_table([0, 1], [0, 1], [[1, 2], [2]], [[1.0], [1.0, 2.0]]), "2 indices but 1 values"),
        (_table([0], [0], [[1]], [[float("nan")]]), "NaN"),
    ],
    ids=["repeated-row", "row-gap", "index>=p", "concept>=K", "ragged", "nan"],
)
def test_arrow_to_csr_rejects_bad_rows(table, match):
    with pytest.raises(InputDataError, match=match):
        arrow_to_csr(table, 5, lang="xx", n_concepts=3)


# --- datasets written by hand: sizes from the manifest, bad input ------------------------------


def _write_tfidf(spark, path: str, rows: list[tuple], vocabulary: int, concepts: int) -> str:
    """Write a one-language ("xx") tfidf dataset with the given manifest sizes."""
    df = spark.createDataFrame(
        [("xx", r, f"d{r}", f"c{c}", c, ix, vs) for r, c, ix, vs in rows],
        TFIDF.schema,
    )
    report = {
        "languages": ["xx"],
        "concepts": concepts,
        "per_language": {
            "xx": {
                "documents": len(rows),
                "nnz": sum(len(r[2]) for r in rows),
                "vocabulary": vocabulary,
            }
        },
    }
    write_dataset(spark, df, TFIDF, path, manifest={"report": report})
    return path


def test_vocabulary_size_not_largest_index_defines_p(spark, tmp_path, kind):
    path = _write_tfidf(
        spark, str(tmp_path / "tfidf"), [(0, 0, [0, 2], [0.6, 0.8]), (1, 1, [1], [1.0])], 10, 4
    )
    be = make_backend(kind, spark, path, dtype="float64")
    try:
        assert (be.n_terms("xx"), be.n_docs("xx"), be.n_concepts) == (10, 2, 4)
        g = be.gram("xx", np.eye(10))
        want = np.zeros((10, 10))
        want[np.ix_([0, 2], [0, 2])] = np.outer([0.6, 0.8], [0.6, 0.8])
        want[1, 1] = 1.0
        np.testing.assert_allclose(g, want, atol=1e-7)
    finally:
        if isinstance(be, SparkCorpusBackend):
            be.close()


@pytest.mark.parametrize(
    "rows, match",
    [
        ([(0, 0, [0], [1.0]), (0, 1, [1], [1.0])], r"row"),
        ([(0, 0, [0], [1.0]), (1, 1, [7], [1.0])], r"term index 0\.\.7 outside \[0, 5\)"),
        ([(0, 0, [0], [1.0]), (1, 4, [1], [1.0])], r"concept_index 0\.\.4 outside \[0, 3\)"),
    ],
    ids=["repeated-row", "index>=p", "concept>=K"],
)
def test_bad_datasets_raise_input_data_error(spark, tmp_path, kind, rows, match):
    path = _write_tfidf(spark, str(tmp_path / "tfidf"), rows, 5, 3)
    with pytest.raises(InputDataError, match=match):
        make_backend(kind, spark, path, dtype="float32")


@pytest.mark.slow
def test_unknown_language_is_named(spark, tfidf_path, kind):
    with pytest.raises(InputDataError, match=r"\['zz'\].*available: \['de', 'en', 'fr'\]"):
        make_backend(kind, spark, tfidf_path, dtype="float32", languages=["en", "zz"])


# --- the factory -------------------------------------------------------------------------------


@pytest.mark.slow
def test_factory_rejects_unknown_kinds_and_foreign_options(spark, tfidf_path):
    with pytest.raises(ConfigError, match=r"one of \('local', 'spark'\)"):
        make_backend("gpu", spark, tfidf_path, dtype="float32")
    with pytest.raises(ConfigError, match="float16"):
        make_backend("local", spark, tfidf_path, dtype="float16")
    with pytest.raises(ConfigError, match="partitions_per_language"):
        make_backend("local", spark, tfidf_path, dtype="float32", partitions_per_language=2)
    with pytest.raises(ConfigError, match="transpose"):
        make_backend("spark", spark, tfidf_path, dtype="float32", transpose="csr")


@pytest.mark.slow
def test_factory_builds_the_documented_classes(backends):
    assert type(backends["local", "float32"]) is LocalCorpusBackend
    assert type(backends["spark", "float32"]) is SparkCorpusBackend
    assert backends["spark", "float32"].n_partitions("en") == SPARK_PARTITIONS["float32"]
    assert {be.dtype for be in backends.values()} == set(TOL)


def test_auto_solve_in_task_limit():
    """train.solve_in_task_max_nnz=None: a quarter of the machine's memory over the solving
    tasks in local mode (24 bytes per nonzero), the cluster default elsewhere."""
    from pipeline.backends.spark import (
        CLUSTER_SOLVE_IN_TASK_MAX_NNZ,
        SOLVE_IN_TASK_BYTES_PER_NNZ,
        auto_solve_in_task_max_nnz,
    )

    gib = 2**30
    assert auto_solve_in_task_max_nnz("local[2]", 2, 24 * gib) == 24 * gib // 4 // (2 * 24)
    assert SOLVE_IN_TASK_BYTES_PER_NNZ == 24
    assert auto_solve_in_task_max_nnz("local[*]", 1, 8 * gib) == 2 * gib // 24
    assert auto_solve_in_task_max_nnz("yarn", 2, 24 * gib) == CLUSTER_SOLVE_IN_TASK_MAX_NNZ
    assert auto_solve_in_task_max_nnz("local[2]", 2) > 0  # reads the OS


@pytest.mark.slow
@pytest.mark.parametrize("fused", ["spark_in_task", "spark_fused2"])
def test_fused_solves_start_from_each_columns_initial_guess(backends, reference, fused):
    """x0 (a λ path's previous solves) reaches every task with its own columns: the dense
    solution still, in fewer CG iterations than from zero, and the same as block_cg's."""
    from pipeline.linalg.block_cg import block_cg
    from pipeline.linalg.operator import DenseOperator

    ref, _ = reference
    one = backends[fused, "float64"]
    rng = np.random.default_rng(8)
    for lang, (x, _) in ref.items():
        gram = x.T @ x + 0.5 * np.eye(x.shape[1])
        rhs = rng.standard_normal((x.shape[1], 3))
        want = np.linalg.solve(gram, rhs)
        # a guess off by a different amount per column: the columns must not be mixed up
        x0 = want * (1 + np.array([1e-3, 1e-2, 1e-1]))
        kw = dict(lam=0.5, precond=1.0 / ((x**2).sum(0) + 0.5), rtol=1e-10, maxiter=1000)
        cold = one.solve_gram(lang, rhs, **kw)
        warm = one.solve_gram(lang, rhs, x0=x0, **kw)
        assert warm.converged.all()
        assert np.linalg.norm(warm.x - want) <= 1e-8 * np.linalg.norm(want)
        assert warm.n_column_passes < cold.n_column_passes
        local = block_cg(DenseOperator(gram), rhs, x0=x0, m=kw["precond"], rtol=1e-10)
        np.testing.assert_allclose(warm.x, local.x, rtol=1e-9, atol=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("budget_mb", [0, 64])
def test_resident_matrix_equals_the_cached_blocks(spark, tfidf_path, reference, budget_mb):
    """A fused language's passes and solves give the dense reference whether the workers keep
    X_l between jobs or read it from the cached blocks in every job: with no budget nothing
    is kept (every share reads the blocks); with one, later jobs find it resident."""
    ref, k = reference
    be = make_backend(
        "spark",
        spark,
        tfidf_path,
        dtype="float64",
        partitions_per_language=3,
        resident_memory_mb=budget_mb,
    )
    try:
        rng = np.random.default_rng(11)
        for _ in range(3):
            for lang, (x, y) in ref.items():
                v = rng.standard_normal((x.shape[1], 4))
                p = rng.standard_normal((k, 4))
                _close(be.gram(lang, v), x.T @ (x @ v), TOL["float64"])
                _close(be.xt_gather(lang, p), x.T @ (y @ p), TOL["float64"])
                _close(be.x_scatter(lang, v), y.T @ (x @ v), TOL["float64"])
                res = be.solve_gram(
                    lang, v, lam=0.5, precond=np.ones(x.shape[1]), rtol=1e-10, maxiter=1000
                )
                want = np.linalg.solve(x.T @ x + 0.5 * np.eye(x.shape[1]), v)
                assert np.linalg.norm(res.x - want) <= 1e-8 * np.linalg.norm(want)
        counts = be.resident_counts
        assert counts["filled"] > 0
        assert be.placement["resident_memory_mb"] == budget_mb
        assert bool(be.placement["resident"]) == (budget_mb > 0)
        if budget_mb == 0:
            assert counts["resident"] == 0
        else:
            assert counts["resident"] > counts["filled"], counts
    finally:
        be.close()


def test_fused_tasks_split_columns_only_over_slots_the_languages_leave():
    from pipeline.backends.spark_solve import fused_tasks

    assert fused_tasks(2, 4) == 1  # local[2], 4 languages solving at once: no split
    assert fused_tasks(2, 2) == 1
    assert fused_tasks(8, 2) == 4  # idle slots: each language's columns in 4 shares
    assert fused_tasks(16, 28) == 1
    assert fused_tasks(2, 4, solve_tasks=3) == 3  # the setting wins
