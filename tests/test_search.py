"""Search: the index stage, shard merging, SearchIndex against exact references, stale-index
refusal, every bad input's message, the CLI and the HTTP JSON endpoint.

One small corpus (three languages, random word maps) is embedded and indexed once per module;
its shards are small enough (12 rows) that every language has several, and ef_search (96)
exceeds every shard's rows, so an HNSW search expands its whole graph and is exact here:
every result can be compared with numpy and with :mod:`pipeline.retrieval` to rounding.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.config import load_config
from pipeline.errors import InputDataError, ModelError
from pipeline.io.datasets import read_manifest, write_dataset
from pipeline.io.schemas import DOCUMENTS, EMBEDDINGS
from pipeline.model import LanguageMap, save_model
from pipeline.model.format import model_fingerprint, read_model_json
from pipeline.ranking import sort_topk, topk_of_scores
from pipeline.retrieval import csls_retrieval
from pipeline.stages import get_stage
from tests.conftest import REPO

faiss = pytest.importorskip("faiss", reason="pip install 'cr5-on-spark[search]'")

from pipeline.search import SearchIndex, StaleIndexError  # noqa: E402
from pipeline.search.shard import build_shard, search_shard, search_shards  # noqa: E402

R = 6
SIZES = {"en": 30, "de": 25, "fr": 12}
VOCAB = 40


def make_model(path: Path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    maps = {
        lang: LanguageMap(
            terms=pa.array([f"{lang}w{i}" for i in range(VOCAB)]),
            idf=rng.uniform(0.5, 3, VOCAB).astype(np.float32),
            df=np.ones(VOCAB, np.int64),
            phi=rng.normal(size=(VOCAB, R)).astype(np.float32),
        )
        for lang in SIZES
    }
    save_model(path, maps, {"r": R, "lam": 1.0, "preprocessing": {"text": {}}})


def corpus() -> list[dict]:
    rng = np.random.default_rng(7)
    rows = []
    for lang, n in SIZES.items():
        for i in range(n):
            words = rng.integers(0, VOCAB, rng.integers(4, 9))
            rows.append(
                {
                    "doc_id": f"{lang}:{i:02d}",
                    "concept_id": f"c{i:02d}",
                    "lang": lang,
                    "title": f"{lang} title {i}",
                    "text": " ".join(f"{lang}w{w}" for w in words),
                }
            )
    # No word of the vocabulary: a zero vector, which the index leaves out.
    rows.append(
        {"doc_id": "en:zero", "concept_id": "cz", "lang": "en", "title": "z", "text": "qq zz"}
    )
    return rows


def stage_config(root: Path, *extra: str):
    return load_config(
        [REPO / "conf" / "local.yaml"],
        [
            f"paths.root={root}",
            "spark.shuffle_partitions=2",
            "search.shard_rows=12",
            "search.flat_max_rows=20",
            "search.snippet_chars=20",
            *extra,
        ],
    )


@pytest.fixture(scope="module")
def built(spark, tmp_path_factory):
    """documents -> embed -> index under one run root; the index stage's report."""
    root = tmp_path_factory.mktemp("search") / "out"
    cfg = stage_config(root)
    make_model(Path(cfg.paths.dataset("model")), seed=1)
    docs = corpus()
    df = spark.createDataFrame(docs)
    write_dataset(spark, df, DOCUMENTS, cfg.paths.dataset("documents"))
    get_stage("embed")(spark, cfg)
    report = get_stage("index")(spark, cfg)
    emb = pq.read_table(cfg.paths.dataset("embeddings")).to_pylist()
    vectors = {r["doc_id"]: np.asarray(r["vector"], np.float32) for r in emb}
    return SimpleNamespace(
        root=root, cfg=cfg, report=report, docs={d["doc_id"]: d for d in docs}, vectors=vectors
    )


def normalized(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def indexed(built, index: SearchIndex, lang: str) -> tuple[list[str], np.ndarray]:
    """The index's documents of ``lang`` in row order and their normalised vectors."""
    ids = index.documents(lang)["doc_id"]
    return ids, normalized(np.stack([built.vectors[d] for d in ids]))


# --------------------------------------------------------------------------- the stage


@pytest.mark.slow
def test_index_stage_layout_manifest_and_rerun(spark, built):
    r = built.report
    assert r["per_language"] == {
        "de": {"documents": 25, "shards": 3, "kind": "ivf", "zero_vectors": 0},
        "en": {"documents": 30, "shards": 3, "kind": "ivf", "zero_vectors": 1},
        "fr": {"documents": 12, "shards": 1, "kind": "flat", "zero_vectors": 0},
    }
    assert r["documents"] == 67 and r["csls_pairs"] == 6
    assert any("zero vector" in w for w in r["warnings"])
    index_dir = Path(built.cfg.paths.dataset("index"))
    manifest = json.loads((index_dir / "_manifest.json").read_text())
    meta = read_model_json(built.cfg.paths.dataset("model"))
    assert manifest["model"]["fingerprint"] == model_fingerprint(meta)
    assert manifest["model"]["path"] == "<paths.root>/model"
    emb = read_manifest(spark, EMBEDDINGS, built.cfg.paths.dataset("embeddings"))
    assert manifest["embeddings"]["write_token"] == emb["write_token"]
    assert emb["report"]["model_fingerprint"] == model_fingerprint(meta)
    # every shard holds its hash share, in doc_id order; the shards are disjoint and complete
    for lang, info in manifest["languages"].items():
        seen = []
        for i, shard in enumerate(info["shards"]):
            ids = pq.read_table(index_dir / lang / f"shard-{i:05d}.docs.parquet")["doc_id"]
            ids = ids.to_pylist()
            assert ids == sorted(ids) and len(ids) == shard["rows"]
            seen += ids
        expected = {d for d, doc in built.docs.items() if doc["lang"] == lang} - {"en:zero"}
        assert sorted(seen) == sorted(expected)
    assert sorted(p.name for p in index_dir.parent.iterdir() if p.name.startswith(".")) == []
    # a rerun with the same inputs writes the same files
    files = [p for p in index_dir.rglob("*") if p.is_file() and p.suffix != ".json"]
    before = {p: p.read_bytes() for p in files}
    get_stage("index")(spark, built.cfg)
    after = {p: p.read_bytes() for p in index_dir.rglob("*") if p.is_file() and p.suffix != ".json"}
    assert before.keys() == after.keys()
    assert all(before[p] == after[p] for p in before)


# --------------------------------------------------------------------------- merging shards


def test_shard_merge_equals_one_index():
    """Top-k over uneven flat shards, merged, is one flat index's top-k under the project's
    rule (score descending, ties to the lower id), duplicates (exact ties) included."""
    rng = np.random.default_rng(0)
    x = normalized(rng.normal(size=(300, 16))).astype(np.float32)
    x[250:260] = x[10:20]  # exact duplicates: tied scores across shards
    q = normalized(rng.normal(size=(12, 16))).astype(np.float32)
    q[:3] = x[10:13]
    cuts = [0, 7, 100, 101, 240, 300]
    shards = [
        build_shard(x[a:b], "flat", hnsw_m=8, ef_construction=8)
        for a, b in itertools.pairwise(cuts)
    ]
    one = build_shard(x, "flat", hnsw_m=8, ef_construction=8)
    for k in (1, 5, 37):
        got_s, got_i = search_shards(shards, cuts[:-1], q, k, ef_search=1)
        all_s, all_i = one.search(q, x.shape[0])
        want_s, want_i = sort_topk(all_s, all_i, k)
        np.testing.assert_array_equal(got_i, want_i)
        np.testing.assert_allclose(got_s, want_s, atol=1e-6)
        # and it is the exact top-k (float64 dot products, one routine for every pair, so
        # duplicates tie exactly)
        exact = np.array(
            [[np.dot(a, b) for b in x.astype(np.float64)] for a in q.astype(np.float64)]
        )
        np.testing.assert_array_equal(got_i, topk_of_scores(exact, k)[1])
    # a duplicate ties with its original: the lower id comes first
    s, i = search_shards(shards, cuts[:-1], q[:1], 2, ef_search=1)
    assert list(i[0]) == [10, 250] and s[0, 0] == s[0, 1]
    # fewer documents than k: the missing results are marked -1 / -inf
    s, i = search_shards(shards[:1], [0], q[:2], 10, ef_search=1)
    assert i.shape == (2, 7) and (i >= 0).all()


def test_ivf_shard_recall_determinism_and_vectors():
    """An IVF shard: every list scanned is exact search; a rebuild writes the same bytes;
    the stored vectors come back by row; on clustered points (documents cluster by topic)
    a few lists give the exact top-10 for queries from a shifted distribution (another
    language's documents), where the lists follow the clusters."""
    from pipeline.search.shard import deserialize, ivf_lists, serialize, shard_vectors

    rng = np.random.default_rng(3)
    centres = normalized(rng.normal(size=(40, 24)))
    x = normalized(centres[rng.integers(0, 40, 4000)] + 0.15 * rng.normal(size=(4000, 24)))
    x = x.astype(np.float32)
    shift = 0.1 * normalized(rng.normal(size=(1, 24)))  # the other language's offset
    q = normalized(centres[rng.integers(0, 40, 50)] + shift + 0.15 * rng.normal(size=(50, 24)))
    q = q.astype(np.float32)
    assert ivf_lists(4000, None) == 4000 // 39 and ivf_lists(100_000, None) == 1265
    assert ivf_lists(4000, 7) == 7 and ivf_lists(10, None) == 1
    ivf = build_shard(x, "ivf", hnsw_m=8, ef_construction=8, lists=64)
    flat = build_shard(x, "flat", hnsw_m=8, ef_construction=8)
    want_s, want_i = search_shard(flat, q, 10, ef_search=1)
    got_s, got_i = search_shard(ivf, q, 10, ef_search=1, nprobe=64)
    np.testing.assert_array_equal(got_i, want_i)
    np.testing.assert_allclose(got_s, want_s, atol=1e-6)
    _, few = search_shard(ivf, q, 10, ef_search=1, nprobe=8)
    hits = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(few, want_i)])
    assert hits >= 0.95, hits
    again = build_shard(x, "ivf", hnsw_m=8, ef_construction=8, lists=64)
    assert serialize(again) == serialize(ivf)
    back = deserialize(serialize(ivf))
    np.testing.assert_array_equal(shard_vectors(back), x)


def test_partition_salts_put_each_shard_in_its_own_partition(spark):
    """The build relies on Spark's hash partitioner sending salt p to partition p."""
    from pyspark.sql import functions as F

    from pipeline.search.build import partition_salts

    for n in (1, 5, 13):
        salts = partition_salts(spark, n)
        df = spark.createDataFrame([(s, i) for i, s in enumerate(salts) for _ in range(3)],
                                   "salt long, shard int")  # fmt: skip
        got = (
            df.repartition(n, "salt")
            .withColumn("partition", F.spark_partition_id())
            .select("shard", "partition")
            .distinct()
            .collect()
        )
        assert sorted((r["shard"], r["partition"]) for r in got) == [(i, i) for i in range(n)]


def test_plan_shards():
    from pipeline.search.build import plan_shards

    cfg = stage_config(Path("/tmp/unused"), "search.shard_rows=100", "search.flat_max_rows=150")
    plans = plan_shards({"en": 250, "de": 150, "fr": 0, "it": 1}, cfg.search)
    assert {k: (p.shards, p.kind, p.first_key) for k, p in plans.items()} == {
        "de": (2, "flat", 0),
        "en": (3, "ivf", 2),
        "it": (1, "flat", 5),
    }
    forced = stage_config(Path("/tmp/unused"), "search.index_type=hnsw").search
    assert plan_shards({"en": 5}, forced)["en"].kind == "hnsw"


# --------------------------------------------------------------------------- query API


@pytest.mark.slow
def test_round_trip_matches_exact_cosine(built):
    index = SearchIndex.open(built.cfg.paths.dataset("index"))
    assert index.languages == ["de", "en", "fr"]
    queries = normalized(np.stack([built.vectors[f"en:{i:02d}"] for i in range(30)]))
    for target in index.languages:
        _, cand = indexed(built, index, target)
        scores, rows = index.search_vectors(queries, "en", target, 5)
        want_s, want_i = topk_of_scores(queries @ cand.T, 5)
        np.testing.assert_array_equal(rows, want_i)
        np.testing.assert_allclose(scores, want_s, atol=1e-5)
    # the text API: a document's own text finds it first, with its title and snippet
    doc = built.docs["de:07"]
    hits = index.query(doc["text"], "de", ["de"], k=3)
    assert [h.rank for h in hits] == [1, 2, 3]
    top = hits[0]
    assert (top.doc_id, top.language, top.title, top.concept_id) == (
        "de:07",
        "de",
        "de title 7",
        "c07",
    )
    assert top.snippet == doc["text"][:20] and top.score == pytest.approx(1.0, abs=1e-5)
    # several targets: k each, one list ranked by score; several texts: one list each
    hits = index.query(doc["text"], "de", ["fr", "en"], k=4)
    assert sorted(h.language for h in hits) == ["en"] * 4 + ["fr"] * 4
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    both = index.query([doc["text"], built.docs["de:03"]["text"]], "de", "de", k=1)
    assert [b[0].doc_id for b in both] == ["de:07", "de:03"]


@pytest.mark.slow
@pytest.mark.parametrize(("source", "target"), [("en", "fr"), ("fr", "de"), ("de", "en")])
def test_csls_rerank_equals_exact_csls_of_retrieval(built, source, target):
    """With the whole target language re-ranked, the index's CSLS is pipeline.retrieval's exact
    CSLS with the indexed source-language collection as the source set."""
    index = SearchIndex.open(built.cfg.paths.dataset("index"), csls_rerank=100)
    _, src = indexed(built, index, source)
    _, cand = indexed(built, index, target)
    queries = src[:10]
    scores, rows = index.search_vectors(queries, source, target, 5, csls=True)
    exact = csls_retrieval(
        queries,
        cand,
        np.full(len(queries), -1),
        k=5,
        csls_k=built.cfg.evaluate.csls_k,
        source="collection",
        source_embeddings=src,
    )
    np.testing.assert_array_equal(rows, exact.indices)
    np.testing.assert_allclose(scores, exact.scores, atol=1e-5)


# --------------------------------------------------------------------------- refusals


@pytest.mark.slow
def test_stale_index_is_refused(spark, built, tmp_path):
    # a copied run root still resolves its model (stored relative to paths.root)
    root = tmp_path / "moved"
    shutil.copytree(built.root, root)
    SearchIndex.open(root / "index")
    make_model(root / "model", seed=2)  # "retrained": another model at the same path
    with pytest.raises(StaleIndexError, match=r"was built with model .* but the model at"):
        SearchIndex.open(root / "index")
    proc = run_cli("search", "--index", str(root / "index"), "--lang", "en", "enw1")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "rebuild the index with this model" in proc.stderr
    # an explicit --model must be the index's too
    with pytest.raises(StaleIndexError):
        SearchIndex.open(built.cfg.paths.dataset("index"), model=root / "model")
    # and the stage refuses embeddings another model made
    cfg = stage_config(built.root, f"paths.model={root / 'model'}", f"paths.index={tmp_path}/i")
    with pytest.raises(ModelError, match="were made by model"):
        get_stage("index")(spark, cfg)


@pytest.fixture(scope="module")
def index(built):
    return SearchIndex.open(built.cfg.paths.dataset("index"))


BAD_QUERIES = [
    ({"lang": "xx"}, r"unknown query language 'xx': the model embeds en, de, fr"),
    ({"lang": ""}, r"query language must be a code such as 'en'"),
    ({"texts": ""}, r"the query text is empty"),
    ({"texts": "   "}, r"the query text is empty"),
    ({"texts": ["enw1", ""]}, r"query text 2 is empty"),
    ({"texts": []}, r"a text or a non-empty list"),
    ({"texts": "no known words"}, r"no word of the model's 'en' vocabulary"),
    ({"k": 0}, r"k must be an integer from 1 to 100; got 0"),
    ({"k": 101}, r"k must be an integer from 1 to 100; got 101"),
    ({"k": "5"}, r"k must be an integer from 1 to 100; got '5'"),
    ({"targets": ["xx"]}, r"unknown target language 'xx': the index holds de, en, fr"),
    ({"targets": []}, r"target languages must be a non-empty list"),
    ({"targets": ["en"], "csls": True}, r"CSLS is not available for en -> en"),
    ({"csls": "yes"}, r"csls must be true or false"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("change", "message"), BAD_QUERIES, ids=lambda v: str(v)[:40])
def test_bad_query_messages(index, change, message):
    args = {"texts": "enw1 enw2", "lang": "en", "targets": None, "k": 3, "csls": False}
    args.update(change)
    with pytest.raises(InputDataError, match=message):
        index.query(args["texts"], args["lang"], args["targets"], args["k"], csls=args["csls"])


def run_cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
def test_cli_search_and_its_errors(built, index):
    where = built.cfg.paths.dataset("index")
    text = built.docs["fr:04"]["text"]
    proc = run_cli("search", "--index", where, "--lang", "fr", "--targets", "fr,de", "-k", "2",
                   "--json", text)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    [line] = proc.stdout.splitlines()
    got = json.loads(line)["results"]
    want = index.query(text, "fr", ["fr", "de"], 2)
    assert [(h["doc_id"], h["score"]) for h in got] == [(h.doc_id, h.score) for h in want]
    proc = run_cli("search", "--index", where, "--lang", "fr", "--csls", "--input", "-",
                   stdin=f"{text}\n\n{built.docs['fr:05']['text']}\n")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("# ") == 2 and "CSLS" in proc.stdout
    for args, message in [
        (["--lang", "xx", "enw1"], "unknown query language 'xx'"),
        (["--lang", "en", "-k", "1000", "enw1"], "k must be an integer from 1 to 100"),
        (["--lang", "en", "unknown"], "no word of the model's 'en' vocabulary"),
        (["--lang", "en", "--targets", "it", "enw1"], "unknown target language 'it'"),
    ]:
        proc = run_cli("search", "--index", where, *args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert message in proc.stderr and "Traceback" not in proc.stderr
    proc = run_cli("search", "--index", str(built.root / "nowhere"), "--lang", "en", "x")
    assert proc.returncode == 2 and "build it with the index stage" in proc.stderr


# --------------------------------------------------------------------------- HTTP


@pytest.fixture(scope="module")
def service(index):
    from pipeline.search.server import make_server

    server = make_server(index, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def http(url: str, body: object = None, raw: bytes | None = None) -> tuple[int, dict | str]:
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, text, kind = (
                response.status,
                response.read(),
                response.headers.get_content_type(),
            )
    except urllib.error.HTTPError as err:
        status, text, kind = err.code, err.read(), err.headers.get_content_type()
    return status, json.loads(text) if kind == "application/json" else text.decode()


@pytest.mark.slow
def test_http_json_endpoint(built, index, service):
    status, info = http(f"{service}/api/info")
    assert status == 200 and info["languages"] == ["de", "en", "fr"]
    assert info["documents"] == {"de": 25, "en": 30, "fr": 12} and info["max_k"] == 100
    text = built.docs["en:11"]["text"]
    want = [h.to_dict() for h in index.query(text, "en", ["de", "fr"], 3, csls=True)]
    status, got = http(
        f"{service}/api/search", {"q": text, "lang": "en", "targets": ["de", "fr"], "k": 3,
                                  "csls": True}
    )  # fmt: skip
    assert status == 200 and got["results"] == want and got["query"]["csls"] is True
    q = urllib.parse.urlencode({"q": text, "lang": "en", "targets": "de,fr", "k": "3",
                                "csls": "true"})  # fmt: skip
    status, got = http(f"{service}/api/search?{q}")
    assert status == 200 and got["results"] == want
    status, page = http(f"{service}/")
    assert status == 200 and 'id="query"' in page and "api/search" in page
    for body, message in [
        ({"q": text, "lang": "xx"}, "unknown query language 'xx'"),
        ({"q": "", "lang": "en"}, "the query text is empty"),
        ({"q": "zzz", "lang": "en"}, "no word of the model's 'en' vocabulary"),
        ({"q": text, "lang": "en", "k": 0}, "k must be an integer from 1 to 100"),
        ({"q": text, "lang": "en", "k": "many"}, "k must be an integer from 1 to 100"),
        ({"q": text, "lang": "en", "targets": ["it"]}, "unknown target language 'it'"),
        ({"q": text}, "the query language is missing"),
        ({"lang": "en"}, "the query text is missing"),
        ({"q": text, "lang": "en", "kk": 3}, "unknown parameter(s) ['kk']"),
        ([1, 2], "must be a JSON object"),
    ]:
        status, got = http(f"{service}/api/search", body)
        assert status == 400 and message in got["error"], (body, got)
    status, got = http(f"{service}/api/search", raw=b"{not json")
    assert status == 400 and "must be a JSON object" in got["error"]
    status, got = http(f"{service}/api/search?q=a&q=b&lang=en")
    assert status == 400 and "more than once" in got["error"]
    status, got = http(f"{service}/nothing")
    assert status == 404 and "no such page" in got["error"]


# --------------------------------------------------------------------------- the page, in a browser

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
BROWSER_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)


def headless_chromium():
    """A headless Debian Chromium under selenium, or fail saying how to install it (skip only
    with CR5_SKIP_BROWSER=1): the page must be tested in a real browser wherever tests run."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).exists()]
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing.append("the selenium package")
    if missing:
        if os.environ.get("CR5_SKIP_BROWSER") == "1":
            pytest.skip(f"CR5_SKIP_BROWSER=1 and no {', '.join(missing)}")
        pytest.fail(
            f"no {', '.join(missing)} for the browser test: run `bash scripts/setup_browser.sh` "
            "(apt-get install chromium chromium-driver) and `pip install -e '.[dev]'`, or set "
            "CR5_SKIP_BROWSER=1 to skip it",
            pytrace=False,
        )
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in BROWSER_FLAGS:
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


@pytest.mark.slow
def test_search_page_in_headless_chromium(built, index, service):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    driver = headless_chromium()
    try:
        wait = WebDriverWait(driver, 30)
        driver.get(f"{service}/")
        wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready"))
        text = built.docs["de:07"]["text"]

        def search(query: str, *, csls: bool = False) -> list[tuple[str, str, str, str]]:
            box = driver.find_element(By.ID, "query")
            box.clear()
            box.send_keys(query)
            if driver.find_element(By.ID, "csls").is_selected() != csls:
                driver.find_element(By.ID, "csls").click()
            body = driver.find_element(By.TAG_NAME, "body")
            done = int(body.get_attribute("data-searches") or 0)
            driver.find_element(By.ID, "search").click()
            # the page counts answered searches (results or an error)
            wait.until(lambda d: int(body.get_attribute("data-searches") or 0) > done)
            return [
                (
                    li.get_attribute("data-doc-id"),
                    li.find_element(By.CLASS_NAME, "lang").text,
                    li.find_element(By.CLASS_NAME, "title").text,
                    li.find_element(By.CLASS_NAME, "score").text,
                )
                for li in driver.find_elements(By.CSS_SELECTOR, "li.result")
            ]

        Select(driver.find_element(By.ID, "lang")).select_by_value("de")
        driver.find_element(By.CSS_SELECTOR, "input[name=target][value=de]").click()  # off
        k = driver.find_element(By.ID, "k")
        k.clear()
        k.send_keys("2")
        for csls in (False, True):
            shown = search(text, csls=csls)
            want = index.query(text, "de", ["en", "fr"], 2, csls=csls)
            assert shown == [(h.doc_id, h.language, h.title, f"{h.score:.3f}") for h in want]
            assert len(shown) == 4
            status = driver.find_element(By.ID, "status").text
            assert status.startswith("4 result(s)") and ("CSLS" if csls else "cosine") in status
        # a bad query shows the service's message and no results
        shown = search("zzz qqq")
        assert shown == []
        assert "no word of the model's 'de' vocabulary" in driver.find_element(By.ID, "error").text
    finally:
        driver.quit()
