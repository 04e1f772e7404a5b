"""The Spark ML stages: Cr5 in a user's Pipeline equals the train + embed jobs; parameters
derived from the declarations and checked with the configuration's messages before Spark
work; save/load round trips (also in a fresh process); the transform's options."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import scipy.linalg

from pipeline.config import FeaturesConfig, TextConfig, TrainConfig, load_config
from pipeline.errors import ConfigError, InputDataError
from pipeline.io.datasets import read_dataset
from pipeline.io.schemas import EMBEDDINGS
from pipeline.model import Cr5Model
from pipeline.sparkml import Cr5, Cr5Embedding
from pipeline.sparkml.derived import EMBEDDING_PARAMS, FIT_PARAMS, LEFT_OUT
from pipeline.stages import get_stage
from tests.conftest import REPO, SAMPLE

#: Small and fast: r = 10, the short-documents filter, three languages of 3/16 of the
#: sample's concepts.
SETTINGS = {"r": 10, "minUniqueWords": 10, "minDf": 2}
OVERRIDES = ["train.r=10", "features.min_unique_words=10", "features.min_df=2"]


# --------------------------------------------------------------------------- parameters


def test_every_applicable_key_is_a_param_with_its_declared_doc_and_default():
    stage = Cr5()
    for section, cls in (
        ("train", TrainConfig),
        ("features", FeaturesConfig),
        ("text", TextConfig),
    ):
        for f in dataclasses.fields(cls):
            key = f"{section}.{f.name}"
            found = [d for d in FIT_PARAMS if d.key == key]
            assert found or key in LEFT_OUT, f"{key} is neither a Cr5 parameter nor left out"
    for d in FIT_PARAMS + EMBEDDING_PARAMS:
        param = stage.getParam(d.name)
        assert d.info.doc in param.doc and d.info.allowed() in param.doc
        assert stage.getOrDefault(param) == d.info.default
    assert stage.getInputCol() == "text" and stage.getOutputCol() == "embedding"
    assert stage.getLam() == TrainConfig().lam and stage.getMinDf() == FeaturesConfig().min_df
    # camelCase names and the shared transform parameters on the model too
    model = Cr5Embedding()
    assert {d.name for d in EMBEDDING_PARAMS} <= {p.name for p in model.params}
    assert "cgRtol" in stage.explainParams() and "train.cg_rtol" in stage.explainParams()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lam": -1.0}, "parameter 'lam' must be a real number > 0; got -1.0 "
                        "(configuration key train.lam)"),
        ({"cgRtol": 2}, "parameter 'cgRtol' must be a real number in (0, 1); got 2 "
                        "(configuration key train.cg_rtol)"),
        ({"setup": "both"}, "parameter 'setup' must be one of 'joint', 'pairwise', "
                            "'transitive'; got 'both' (configuration key train.setup)"),
        ({"r": 2.5}, "parameter 'r' must be an int >= 1; got 2.5 (configuration key train.r)"),
        ({"languages": "en"}, "parameter 'languages' must be a list of strings; got 'en'"),
        ({"outputType": "matrix"}, "parameter 'outputType' must be one of 'array', 'vector'"),
        ({"lamda": 1.0}, "Cr5 has no parameter 'lamda'; did you mean 'lam'?"),
    ],
)  # fmt: skip
def test_bad_params_fail_at_construction_with_the_configuration_message(kwargs, message):
    with pytest.raises(ConfigError) as err:
        Cr5(**kwargs)
    assert message in str(err.value)
    # and through the setters
    name, value = next(iter(kwargs.items()))
    if name != "lamda":
        with pytest.raises(ConfigError, match="must be"):
            getattr(Cr5(), f"set{name[0].upper()}{name[1:]}")(value)
    with pytest.raises(ConfigError, match="batchRows"):
        Cr5Embedding(batchRows=0)


def test_valid_values_are_converted_as_the_configuration_converts_them():
    stage = Cr5(lam=2, pair=("en", "de"), checkpointSeconds=5)
    assert stage.getLam() == 2.0 and isinstance(stage.getLam(), float)
    assert stage.getPair() == ["en", "de"]
    assert stage.getCheckpointSeconds() == 5.0


@pytest.mark.parametrize(
    ("kwargs", "overrides"),
    [
        ({"setup": "pairwise"}, ["train.setup=pairwise"]),
        ({"minUniqueWords": 20, "maxUniqueWords": 10},
         ["features.min_unique_words=20", "features.max_unique_words=10"]),
    ],
)  # fmt: skip
def test_rules_across_params_fail_at_fit_before_any_spark_work(spark, kwargs, overrides):
    """The configuration loader's own message, and no Spark job started."""
    with pytest.raises(ConfigError) as from_config:
        load_config([], overrides)
    df = spark.createDataFrame(
        [("c1", "en", "some text")], "concept_id string, lang string, text string"
    )
    sc = spark.sparkContext
    group = f"cr5-bad-params-{len(overrides)}"
    sc.setJobGroup(group, "must stay empty")
    try:
        with pytest.raises(ConfigError) as from_fit:
            Cr5(**kwargs).fit(df)
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    assert str(from_fit.value) == str(from_config.value)
    assert list(sc.statusTracker().getJobIdsForGroup(group)) == []


def test_estimator_params_round_trip(tmp_path, spark):
    stage = Cr5(lam=2.5, pair=["en", "de"], setup="pairwise", inputCol="body", minDf=4)
    stage.save(str(tmp_path / "cr5"))
    loaded = Cr5.load(str(tmp_path / "cr5"))
    assert loaded.uid == stage.uid
    for p in stage.params:
        assert loaded.getOrDefault(p.name) == stage.getOrDefault(p)


# --------------------------------------------------------------------------- fits


@pytest.fixture(scope="module")
def corpus(spark, tmp_path_factory):
    """3/16 of the sample's concepts in en, de, fr (~1,800 documents), as the ingest input."""
    table = pq.read_table(SAMPLE)
    keep = pc.and_(
        pc.is_in(pc.utf8_slice_codeunits(table.column("concept_id"), 0, 1),
                 value_set=pa.array(list("012"))),
        pc.is_in(table.column("lang"), value_set=pa.array(["en", "de", "fr"])),
    )  # fmt: skip
    path = tmp_path_factory.mktemp("corpus") / "corpus.parquet"
    pq.write_table(table.filter(keep).select(["doc_id", "concept_id", "lang", "text"]), path)
    return path


@pytest.fixture(scope="module")
def jobs(spark, corpus, tmp_path_factory):
    """ingest -> vocabulary -> tfidf -> train -> embed on the corpus: the jobs' vectors."""
    root = tmp_path_factory.mktemp("jobs") / "out"
    cfg = load_config(
        [REPO / "conf" / "local.yaml"],
        [f"paths.root={root}", f"ingest.input={corpus}", "spark.shuffle_partitions=2", *OVERRIDES],
    )
    for stage in ("ingest", "vocabulary", "tfidf", "train", "embed"):
        get_stage(stage)(spark, cfg)
    t = read_dataset(spark, EMBEDDINGS, cfg.paths.dataset("embeddings")).toArrow()
    return cfg, vectors_by_id(t, "vector")


def vectors_by_id(table: pa.Table, column: str) -> dict[str, np.ndarray]:
    ids = table.column("doc_id").to_pylist()
    return dict(zip(ids, table.column(column).to_pylist(), strict=True))


@pytest.fixture(scope="module")
def fitted(spark, corpus):
    """Pipeline([SQLTransformer, Cr5]) fitted on the corpus; the users' column names."""
    from pyspark.ml import Pipeline
    from pyspark.ml.feature import SQLTransformer

    df = spark.read.parquet(str(corpus))
    rename = SQLTransformer(
        statement="SELECT doc_id, concept_id AS item, upper(lang) AS language, text AS body "
        "FROM __THIS__"
    )
    cr5 = Cr5(inputCol="body", langCol="language", conceptCol="item", **SETTINGS)
    return Pipeline(stages=[rename, cr5]).fit(df), df


@pytest.mark.slow
def test_pipeline_fit_transform_equals_the_train_and_embed_jobs(spark, jobs, fitted):
    cfg, want = jobs
    model, df = fitted
    out = model.transform(df).select("doc_id", "embedding").toArrow()
    got = vectors_by_id(out, "embedding")
    assert set(got) == set(want)
    ids = sorted(want)
    a = np.array([got[i] for i in ids], dtype=np.float32)
    b = np.array([want[i] for i in ids], dtype=np.float32)
    # Same rows, same vocabulary, same solver and seed, same embedding code: the same
    # vectors (float32 values of size ~1e-2; 1e-6 is far below any modelling difference).
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    stage = model.stages[-1]
    job_model = Cr5Model.load(cfg.paths.dataset("model"))
    assert stage.languages == job_model.languages == ["de", "en", "fr"]
    assert stage.dim == 10
    fit_meta = Cr5Model.load(stage.modelDirectory).meta
    assert fit_meta["training"]["tfidf"] == "Cr5.fit(DataFrame)"
    assert fit_meta["eigenvalues"] == pytest.approx(job_model.meta["eigenvalues"], rel=1e-6)
    assert stage.summary["documents"] == sum(job_model.meta["training"]["documents"].values())
    # The train stage's model as a transformer gives the embed job's vectors as well.
    from_dir = Cr5Embedding.from_model(cfg.paths.dataset("model"))
    direct = vectors_by_id(
        from_dir.transform(df).select("doc_id", "embedding").toArrow(), "embedding"
    )
    np.testing.assert_array_equal(np.array([direct[i] for i in ids], dtype=np.float32), b)


@pytest.mark.slow
def test_saved_pipeline_model_loads_in_a_fresh_process_with_identical_output(
    spark, fitted, corpus, tmp_path
):
    model, df = fitted
    saved = tmp_path / "pipeline_model"
    model.save(str(saved))
    here = model.transform(df).select("doc_id", "embedding").toArrow().sort_by("doc_id")
    out = tmp_path / "fresh.parquet"
    code = f"""
from pipeline.config import load_config
from pipeline.spark import get_spark
from pyspark.ml import PipelineModel
cfg = load_config([{str(REPO / "conf" / "local.yaml")!r}],
                  ["spark.shuffle_partitions=2", "spark.driver_memory=1g"])
spark = get_spark(cfg.spark)
model = PipelineModel.load({str(saved)!r})
df = spark.read.parquet({str(corpus)!r})
t = model.transform(df).select("doc_id", "embedding").toArrow().sort_by("doc_id")
import pyarrow.parquet as pq
pq.write_table(t, {str(out)!r})
spark.stop()
"""
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    there = pq.read_table(out)
    assert there.column("doc_id").to_pylist() == here.column("doc_id").to_pylist()
    np.testing.assert_array_equal(
        np.stack(there.column("embedding").to_numpy(zero_copy_only=False)),
        np.stack(here.column("embedding").to_numpy(zero_copy_only=False)),
    )
    # The stage's directory: pyspark.ml metadata and the project's model directory.
    [stage_dir] = (saved / "stages").glob("1_Cr5Embedding_*")
    assert (stage_dir / "metadata").is_dir()
    meta = json.loads((stage_dir / "model" / "model.json").read_text())
    assert meta["r"] == 10 and not list(stage_dir.rglob("*.pkl"))
    # saving again over it needs overwrite
    with pytest.raises(Exception, match="already exists|exists already"):
        model.save(str(saved))
    model.write().overwrite().save(str(saved))


@pytest.mark.slow
def test_transform_options(spark, fitted):
    model, _ = fitted
    stage = model.stages[-1].copy()
    docs = spark.createDataFrame(
        [("a", "EN ", "the package provides a library"), ("b", "xx", "unknown language"),
         ("c", None, "no language"), ("d", "de", "Bibliothek für Pakete")],
        "id string, lang string, text string",
    )  # fmt: skip
    stage.setInputCol("text").setLangCol("lang")
    plain = {r["id"]: r["embedding"] for r in stage.transform(docs).collect()}
    assert plain["b"] is None and plain["c"] is None  # languages the model lacks: null
    m = Cr5Model.load(stage.modelDirectory)
    np.testing.assert_array_equal(
        np.float32(plain["a"]), m.embed(["the package provides a library"], "en")[0]
    )
    np.testing.assert_array_equal(
        np.float32(plain["d"]), m.embed(["Bibliothek für Pakete"], "de")[0]
    )

    stage.setNormalize(True).setOutputType("vector")
    out = stage.transform(docs)
    assert type(out.schema["embedding"].dataType).__name__ == "VectorUDT"
    vec = {r["id"]: r["embedding"] for r in out.collect()}
    np.testing.assert_allclose(vec["a"].toArray(), plain["a"] / np.linalg.norm(plain["a"]),
                               rtol=1e-6)  # fmt: skip
    assert vec["b"] is None

    stage.setOnUnknownLanguage("error").setOutputType("array")
    with pytest.raises(Exception, match=r"(language 'xx'|without a language \(null\)), which"):
        stage.transform(docs).collect()
    with pytest.raises(Exception, match="in language 'xx', which the model does not have"):
        stage.transform(docs.filter("lang is not null")).collect()
    with pytest.raises(InputDataError, match="no column 'body' \\(inputCol\\)"):
        stage.setInputCol("body").transform(docs)
    with pytest.raises(InputDataError, match="outputCol"):
        stage.setInputCol("text").setOutputCol("lang").transform(docs)


@pytest.mark.slow
def test_bad_documents_are_refused_naming_the_parameter(spark):
    df = spark.createDataFrame(
        [("c1", "en", "a text"), ("c1", "EN", "the same concept and language"),
         (None, "de", "no concept")],
        "concept_id string, lang string, text string",
    )  # fmt: skip
    with pytest.raises(InputDataError, match="1 document\\(s\\) have no concept"):
        Cr5(**SETTINGS).fit(df)
    with pytest.raises(InputDataError, match="repeat an id, e.g. \\['en:c1'\\]"):
        Cr5(**SETTINGS).fit(df.filter("concept_id is not null"))
    with pytest.raises(InputDataError, match="no column 'body' \\(inputCol\\)"):
        Cr5(inputCol="body").fit(df)


@pytest.mark.slow
def test_spark_backend_and_pairwise_setup_through_the_training_service(spark, fitted, tmp_path):
    """backend=spark writes the datasets under workDir and trains as the train stage does;
    the same model as the local backend to the solver's rounding (pairwise setup)."""
    _, df = fitted
    common = {**SETTINGS, "r": 6, "setup": "pairwise", "pair": ["en", "fr"], "dtype": "float64"}
    models = {
        kind: Cr5(backend=kind, workDir=str(tmp_path / "work"), **common).fit(df)
        for kind in ("local", "spark")
    }
    assert list((tmp_path / "work").iterdir()) == []  # the fit's files are removed
    loaded = {k: Cr5Model.load(m.modelDirectory) for k, m in models.items()}
    assert loaded["spark"].meta["training"]["backend"] == "spark"
    assert loaded["local"].languages == loaded["spark"].languages == ["en", "fr"]
    np.testing.assert_allclose(
        loaded["spark"].meta["eigenvalues"], loaded["local"].meta["eigenvalues"], rtol=1e-6
    )
    a, b = (
        np.vstack([m.word_vectors(lang)[1] for lang in ("en", "fr")]).astype(np.float64)
        for m in (loaded["local"], loaded["spark"])
    )
    assert np.degrees(scipy.linalg.subspace_angles(a, b)).max() < 0.1


@pytest.mark.slow
def test_save_and_load_through_hadoop_filesystem(spark, fitted, tmp_path, monkeypatch):
    """A path of another file system goes through Hadoop's FileSystem (here file: URIs
    routed there), with the same result."""
    from pipeline.sparkml import persistence

    model, df = fitted
    stage = model.stages[-1]
    monkeypatch.setattr(persistence, "is_local_path", lambda path: False)
    uri = f"file://{tmp_path}/via-hadoop"
    stage.save(uri)
    assert (tmp_path / "via-hadoop" / "model" / "model.json").exists()
    loaded = Cr5Embedding.load(uri)
    assert loaded.modelDirectory != stage.modelDirectory  # a local copy
    assert loaded.getInputCol() == "body" and loaded.getLangCol() == "language"
    docs = df.selectExpr("doc_id", "upper(lang) AS language", "text AS body").limit(50)
    a = loaded.transform(docs).select("doc_id", "embedding").toArrow().sort_by("doc_id")
    b = stage.transform(docs).select("doc_id", "embedding").toArrow().sort_by("doc_id")
    assert a.equals(b)


def test_the_guide_lists_the_parameters_as_declared():
    from pipeline.sparkml.derived import params_markdown

    text = (REPO / "docs" / "spark-ml.md").read_text()
    block = text.split("<!-- params:begin -->\n", 1)[1].split("<!-- params:end -->", 1)[0]
    assert block.strip() == params_markdown().strip(), (
        "docs/spark-ml.md's table is stale: paste pipeline.sparkml.derived.params_markdown()"
    )


CONNECT = """
import os, sys
from pipeline.java import ensure_java
ensure_java()
os.environ["PYSPARK_PYTHON"] = sys.executable
from pyspark.sql import SparkSession
builder = SparkSession.builder.remote("local[2]")
spark = builder.config("spark.sql.shuffle.partitions", "2").getOrCreate()
assert type(spark).__module__.startswith("pyspark.sql.connect"), type(spark)
from pyspark.ml import Pipeline, PipelineModel
from pyspark.ml.feature import SQLTransformer
from pipeline.sparkml import Cr5
df = spark.read.parquet(CORPUS)
loaded = PipelineModel.load(SAVED)
loaded.transform(df).select("doc_id", "embedding").write.parquet(OUT + "/loaded")
rename = SQLTransformer(statement=STATEMENT)
model = Pipeline(stages=[rename, Cr5(**PARAMS)]).fit(df)
model.save(OUT + "/saved-by-connect")
again = PipelineModel.load(OUT + "/saved-by-connect")
again.transform(df).select("doc_id", "embedding").write.parquet(OUT + "/fitted")
spark.stop()
"""


@pytest.mark.slow
def test_spark_connect_session_fits_transforms_saves_and_loads(fitted, corpus, tmp_path):
    """Through a local Spark Connect server (a subprocess): the classic session's saved
    PipelineModel gives the same vectors, and a fit there the same model."""
    model, df = fitted
    saved = tmp_path / "saved-by-classic"
    model.save(str(saved))
    here = vectors_by_id(model.transform(df).select("doc_id", "embedding").toArrow(), "embedding")
    rename, cr5 = model.stages[0], model.stages[-1]
    params = {
        "inputCol": "body", "langCol": "language", "conceptCol": "item", **SETTINGS
    }  # fmt: skip
    code = (
        f"CORPUS, SAVED, OUT = {str(corpus)!r}, {str(saved)!r}, {str(tmp_path)!r}\n"
        f"STATEMENT, PARAMS = {rename.getStatement()!r}, {params!r}\n" + CONNECT
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    ids = sorted(here)
    want = np.array([here[i] for i in ids], dtype=np.float32)
    for name, exact in (("loaded", True), ("fitted", False)):
        got = vectors_by_id(pq.read_table(tmp_path / name), "embedding")
        a = np.array([got[i] for i in ids], dtype=np.float32)
        if exact:
            np.testing.assert_array_equal(a, want)
        else:  # the same fit in another session: the same code on the same rows
            np.testing.assert_allclose(a, want, rtol=0, atol=1e-6)
    assert cr5.dim == 10
