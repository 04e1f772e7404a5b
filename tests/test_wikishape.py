"""bench/wikishape.py: deterministic, Wikipedia-shaped, and equal to what the pipeline computes.

The Spark test generates a tiny corpus, then runs the pipeline's own ``vocabulary`` and
``tfidf`` stages on the generated ``documents`` (with the generated ``splits`` held out)
and compares their datasets with the ones the generator wrote directly.
"""

from __future__ import annotations

import sys

import numpy as np
import pyarrow as pa
import pytest

from tests.conftest import REPO

sys.path.insert(0, str(REPO))

from bench import wikishape as ws
from pipeline.errors import ConfigError

TINY = ws.WikiShape(
    docs=600,
    seed=3,
    vocab=(3000, 2500, 2000, 2000),
    topics=20,
    words_per_topic=30,
    median_unique=30,
    sigma_unique=0.6,
    min_unique=10,
    max_unique=120,
    partition_docs=250,
    chunk_docs=64,
)


def _reference_name(i: int) -> str:
    s, i = "", i + 1
    while i > 0:
        i -= 1
        s = chr(ord("a") + i % 26) + s
        i //= 26
    return s


def test_term_names_are_bijective_base26_single_tokens():
    from pipeline.text.tokenizer import Tokenizer

    n = 20_000
    names = ws.term_names(n).to_pylist()
    assert names == [_reference_name(i) for i in range(n)]
    assert len(set(names)) == n
    text = " ".join(names[:1000])
    assert Tokenizer().tokenize(text) == names[:1000]


def _all_chunks(shape: ws.WikiShape) -> list[tuple[int, int, np.ndarray, np.ndarray, np.ndarray]]:
    out = []
    for part in range(shape.n_partitions):
        for li in range(len(shape.languages)):
            for c, d, w in ws.language_chunks(shape, part, li):
                out.append((part, li, c, d, w))
    return out


def test_deterministic_for_a_seed_and_different_for_another():
    a, b = _all_chunks(TINY), _all_chunks(TINY)
    assert len(a) == len(b) > 0
    for x, y in zip(a, b):
        assert x[:2] == y[:2]
        for u, v in zip(x[2:], y[2:]):
            np.testing.assert_array_equal(u, v)
    other = ws.WikiShape(**{**ws.asdict(TINY), "seed": 4})
    c = _all_chunks(other)
    assert not np.array_equal(
        np.concatenate([x[4] for x in a])[:500], np.concatenate([x[4] for x in c])[:500]
    )
    # A partition is generated alone: the same rows whatever else runs.
    part1 = [x for x in a if x[0] == 1]
    alone = [(1, li, *t) for li in range(4) for t in ws.language_chunks(TINY, 1, li)]
    for x, y in zip(part1, alone):
        for u, v in zip(x[2:], y[2:]):
            np.testing.assert_array_equal(u, v)


def test_shape_properties():
    shape = ws.WikiShape(docs=40_000, vocab=(50_000, 40_000, 30_000, 30_000))
    masks = shape.all_masks()
    assert masks.size == shape.n_concepts
    bits = (masks[:, None] >> np.arange(4)[None, :]) & 1
    # every concept in >= 2 languages; en covers most; en > it > vi, da
    assert bits.sum(axis=1).min() >= 2
    per_lang = bits.sum(axis=0)
    assert per_lang[0] > 0.85 * masks.size
    assert per_lang[0] > per_lang[1] > per_lang[3] > per_lang[2]
    assert abs(per_lang.sum() - shape.docs) < 0.02 * shape.docs
    # unique words per document inside [min_unique, max_unique] with a Wikipedia-like spread,
    # and background words Zipfian (word id = frequency rank)
    uniq, counts = [], np.zeros(shape.vocab[0], dtype=np.int64)
    for c, d, w in ws.language_chunks(shape, 0, 0):
        dd, ww, cc = ws.chunk_counts(d, w, c.size, shape.vocab[0])
        uniq.append(np.bincount(dd, minlength=c.size))
        np.add.at(counts, ww, cc)
    u = np.concatenate(uniq)
    assert u.min() >= shape.min_unique and u.max() <= shape.max_unique
    assert 120 < np.median(u) < 180 and u.max() > 600
    head = counts[:1000]
    assert np.all(head[:10] > head[100:110].max())
    assert (counts > 0).sum() > 20_000  # a long tail of rare words


def test_rejects_bad_shapes():
    with pytest.raises(ConfigError, match="coverage"):
        ws.WikiShape(coverage=(0.5, 0.5))
    with pytest.raises(ConfigError, match="two languages"):
        ws.WikiShape(languages=("en",), coverage=(1.0,), vocab=(5000,))


def test_build_vocabulary_rule():
    names = pa.array(["d", "a", "c", "b", "e"])
    df = np.array([5, 2, 5, 2, 1])
    ti, terms, dfs, idf = ws.build_vocabulary(df, 10, min_df=2, max_vocabulary=3, names=names)
    assert terms.to_pylist() == ["c", "d", "a"]  # df desc, then term asc; capped at 3
    np.testing.assert_array_equal(ti, [1, 2, 0, -1, -1])
    np.testing.assert_array_equal(dfs, [5, 5, 2])
    np.testing.assert_allclose(idf, np.log(10 / np.array([5, 5, 2])).astype(np.float32))


@pytest.mark.slow
def test_datasets_equal_the_pipeline_stages(spark, make_config, tmp_path):
    from pyspark.sql import functions as F

    from pipeline.backends.loader import local_backend_from_tfidf
    from pipeline.io.datasets import read_dataset
    from pipeline.io.schemas import CONCEPTS, DOCUMENTS, TFIDF, VOCABULARY
    from pipeline.stages import tfidf as tfidf_stage
    from pipeline.stages import vocabulary as vocab_stage

    common = [
        "features.min_unique_words=10",
        "features.max_unique_words=120",
        "features.max_vocabulary=1500",  # below the candidates: the cap and ties matter
        "features.heldout_concepts=splits",
        "split.n_test=15",
        "split.n_validation=10",
    ]
    cfg = make_config(*common)
    report = ws.generate(spark, cfg, TINY)
    gen = cfg.paths.root
    assert report["heldout_concepts"] > 0
    # The pipeline's stages on the generated documents, holding out the generated splits.
    ref = make_config(
        *common,
        f"paths.root={tmp_path / 'ref'}",
        f"paths.documents={gen}/documents",
        f"paths.splits={gen}/splits",
    )
    vocab_stage.run(spark, ref)
    tfidf_stage.run(spark, ref)

    def table(spec, root, order):
        return read_dataset(spark, spec, f"{root}/{spec.name}").orderBy(*order).toArrow()

    v_gen = table(VOCABULARY, gen, ["lang", "term_index"])
    v_ref = table(VOCABULARY, ref.paths.root, ["lang", "term_index"])
    assert v_gen.num_rows == v_ref.num_rows > 0
    for col in ("lang", "term", "term_index", "df"):
        assert v_gen.column(col).to_pylist() == v_ref.column(col).to_pylist(), col
    np.testing.assert_array_equal(v_gen.column("idf").to_numpy(), v_ref.column("idf").to_numpy())

    c_gen = table(CONCEPTS, gen, ["concept_index"])
    c_ref = table(CONCEPTS, ref.paths.root, ["concept_index"])
    assert c_gen.to_pylist() == c_ref.to_pylist()

    t_gen = table(TFIDF, gen, ["lang", "row"])
    t_ref = table(TFIDF, ref.paths.root, ["lang", "row"])
    assert t_gen.num_rows == t_ref.num_rows == report["documents"]
    for col in ("lang", "row", "doc_id", "concept_id", "concept_index", "indices"):
        assert t_gen.column(col).to_pylist() == t_ref.column(col).to_pylist(), col
    np.testing.assert_allclose(
        t_gen.column("values").combine_chunks().flatten().to_numpy(),
        t_ref.column("values").combine_chunks().flatten().to_numpy(),
        rtol=1e-6,
    )
    # Manifests agree on what the trainer reads.
    from pipeline.io.datasets import read_manifest

    m_gen = read_manifest(spark, TFIDF, f"{gen}/tfidf")["report"]
    m_ref = read_manifest(spark, TFIDF, f"{ref.paths.root}/tfidf")["report"]
    for key in ("languages", "per_language", "documents", "nnz", "concepts"):
        assert m_gen[key] == m_ref[key], key

    # Held-out concepts have documents but no training rows; every concept >= 2 languages.
    docs = read_dataset(spark, DOCUMENTS, f"{gen}/documents")
    assert docs.count() == report["documents_total"]
    per_concept = docs.groupBy("concept_id").agg(F.countDistinct("lang").alias("n"))
    assert per_concept.filter("n < 2").count() == 0
    # The trainer's reader accepts it.
    backend = local_backend_from_tfidf(spark, f"{gen}/tfidf")
    assert backend.n_concepts == report["concepts"]
    assert sum(backend.n_docs(lang) for lang in backend.languages) == report["documents"]
