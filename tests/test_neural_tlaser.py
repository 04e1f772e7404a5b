"""T-LASER / cT-LASER on tiny data: the distance constraint against a hand computation, the
subword vocabulary, the start-tag embedding, the losses decreasing and a tiny batch overfit."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sentencepiece")

from pipeline.neural.loop import LoopSettings, run_loop  # noqa: E402
from pipeline.neural.tlaser import (  # noqa: E402
    EncoderSizes,
    SubwordVocabulary,
    TLaserTask,
    build_module,
    distance_constraint,
    encode_texts,
)

WORDS_EN = ["red", "green", "blue", "house", "tree", "river", "small", "large", "old", "new"]
WORDS_DE = ["rot", "gruen", "blau", "haus", "baum", "fluss", "klein", "gross", "alt", "neu"]


def test_distance_constraint_against_a_hand_computation():
    ea = torch.tensor([[3.0, 4.0], [0.0, 1.0]])
    eb = torch.tensor([[3.0, 0.0], [0.0, 1.0]])
    en = torch.tensor([[0.0, 4.0], [0.0, -2.0]])
    margin = 1.5

    def want(m: float) -> float:
        pos = [4 / m, 0 / m]  # |ea - eb|
        neg = [3 / m, 3 / m]  # |ea - en|
        return np.mean(pos) + np.mean([max(0.0, margin - v) for v in neg])

    # the paper's m: the mean norm of the six vectors
    literal = float(distance_constraint(torch, ea, eb, en, margin))
    assert literal == pytest.approx(want(sum([5, 1, 3, 1, 4, 2]) / 6), rel=1e-6)
    # centred: the six vectors' mean is (1, 4/3); their norms less it, by hand
    rows = np.array([[3, 4], [0, 1], [3, 0], [0, 1], [0, 4], [0, -2]], float) - [1, 4 / 3]
    centred = float(distance_constraint(torch, ea, eb, en, margin, center=True))
    assert centred == pytest.approx(want(np.linalg.norm(rows, axis=1).mean()), rel=1e-6)
    # scaling every vector leaves both unchanged (the batch-norm normalisation)
    for center, got in [(False, literal), (True, centred)]:
        scaled = distance_constraint(torch, 7 * ea, 7 * eb, 7 * en, margin, center=center)
        assert float(scaled) == pytest.approx(got)


def test_centred_distance_constraint_cannot_be_won_by_a_common_offset():
    """Early in training a pair is no closer than an unrelated document (pos ≈ neg ≈ √2 m):
    adding one large vector to every embedding then lowers the paper's uncentred loss to its
    collapsed value (the margin: every distance over m near zero), so the gradient leads
    there; the centred loss does not move."""
    g = torch.Generator().manual_seed(0)
    ea = torch.randn(32, 8, generator=g)
    eb = torch.randn(32, 8, generator=g)
    en = torch.randn(32, 8, generator=g)
    shift = torch.full((8,), 1e4)
    shifted = (ea + shift, eb + shift, en + shift)
    literal = float(distance_constraint(torch, ea, eb, en, 1.0))
    literal_shifted = float(distance_constraint(torch, *shifted, 1.0))
    assert literal_shifted < literal
    assert literal_shifted == pytest.approx(1.0, abs=1e-3)
    centred = float(distance_constraint(torch, ea, eb, en, 1.0, center=True))
    assert float(distance_constraint(torch, *shifted, 1.0, center=True)) == pytest.approx(
        centred, rel=1e-3
    )


def _corpus(n: int = 12):
    rng = np.random.default_rng(0)
    en, de = [], []
    for _ in range(n):
        w = rng.choice(len(WORDS_EN), size=3, replace=False)
        en.append(" ".join(WORDS_EN[i] for i in w))
        de.append(" ".join(WORDS_DE[i] for i in w))
    return en, de


def _task(beta: float = 0.0, n: int = 12, center: bool = False) -> TLaserTask:
    en, de = _corpus(n)
    vocab = SubwordVocabulary.train(en + de, ["en", "de"], 60)
    sizes = EncoderSizes(len(vocab), dim=32, heads=2, layers=2, ff=64, max_tokens=16)
    return TLaserTask(
        langs=["en", "de"],
        ids=[vocab.encode(en, 16), vocab.encode(de, 16)],
        concepts=[np.arange(n), np.arange(n)],
        tags=[vocab.tag("en"), vocab.tag("de")],
        sizes=sizes,
        center=center,
        beta=beta,
        margin=1.0,
    )


def test_subword_vocabulary_is_shared_and_tags_languages():
    en, de = _corpus()
    vocab = SubwordVocabulary.train(en + de, ["en", "de"], 60)
    assert vocab.tag("en") != vocab.tag("de")
    again = SubwordVocabulary.train(en + de, ["en", "de"], 60)
    assert again.proto == vocab.proto  # deterministic
    ids = vocab.encode(["red house", None], 16)
    assert ids[0].size >= 2 and ids[1].size == 0
    assert SubwordVocabulary(vocab.proto).encode(["red house"], 16)[0].tolist() == ids[0].tolist()


def test_embedding_is_the_start_tag_output_and_ignores_padding():
    task = _task()
    torch.manual_seed(0)
    model = task.build().eval()
    ids = task.ids[0][:3]
    batched = encode_texts(torch, model, ids)
    alone = np.concatenate([encode_texts(torch, model, [x]) for x in ids])
    np.testing.assert_allclose(batched, alone, rtol=1e-4, atol=1e-5)
    assert batched.shape == (3, 32)


@pytest.mark.parametrize("beta", [0.0, 0.5])
def test_losses_decrease_and_a_tiny_batch_is_overfit(beta):
    task = _task(beta)
    out = run_loop(task, LoopSettings(epochs=100, batch_size=12, lr=5e-3, seed=0))
    losses = [h["loss"] for h in out["history"]]
    assert losses[-1] < 0.05 * losses[0], losses[::10]  # the decoder reproduces the targets
    model = task.build()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in out["weights"].items()})
    model.eval()
    # overfit: every English document's nearest German document is its translation
    ea, eb = (encode_texts(torch, model, task.ids[i]) for i in (0, 1))
    ea /= np.linalg.norm(ea, axis=1, keepdims=True)
    eb /= np.linalg.norm(eb, axis=1, keepdims=True)
    hits = np.mean(np.argmax(ea @ eb.T, axis=1) == np.arange(len(ea)))
    # the constraint pulls translations together; translation alone does not have to (on
    # 12 documents it does not: the two languages' encodings may live apart)
    if beta > 0:
        assert hits >= 11 / 12, hits


def test_heads_must_divide_the_width():
    from pipeline.errors import ConfigError

    with pytest.raises(ConfigError, match="heads"):
        build_module(EncoderSizes(50, dim=30, heads=4, layers=1, ff=8, max_tokens=8))


def test_encoder_model_directory_round_trip(tmp_path):
    from pipeline.errors import ModelError
    from pipeline.model.encoder_model import SUBWORDS, EncoderModel
    from pipeline.model.format import save_encoder_model
    from pipeline.model.loading import load_model

    en, de = _corpus()
    vocab = SubwordVocabulary.train(en + de, ["en", "de"], 60)
    task = _task()
    torch.manual_seed(3)
    net = task.build().eval()
    weights = task.export(net)
    sizes = {**task.sizes.to_dict(), "vocab": len(vocab)}
    meta = {"method": "tlaser", "r": 32, "lam": 0.0, "languages": ["en", "de"],
            "encoder": {"sizes": sizes, "threads": 1}}  # fmt: skip
    save_encoder_model(tmp_path / "m", meta, weights, {SUBWORDS: vocab.proto})
    model = load_model(tmp_path / "m")
    assert isinstance(model, EncoderModel) and model.dim == 32 and not model.is_sparse
    vectors, counts = model.embed_with_counts(["red house", "", None], "DE ")
    assert counts[1] == counts[2] == 0 and not vectors[1:].any()
    want = encode_texts(torch, net, vocab.encode(["red house"], 16))
    np.testing.assert_allclose(vectors[:1], want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ModelError, match="not in this model"):
        model.embed(["x"], "fr")
    # a changed weight file fails its checksum
    f = next((tmp_path / "m" / "encoder").glob("out.weight.npy"))
    arr = np.load(f)
    arr[0, 0] += 1
    np.save(f, arr)
    with pytest.raises(ModelError, match="SHA-256"):
        load_model(tmp_path / "m")


@pytest.mark.slow
@pytest.mark.parametrize(("beta", "center"), [(0.0, False), (0.5, False), (0.5, True)])
def test_torch_distributor_run_equals_a_single_process_run(spark, beta, center):
    """Two processes take the single process's steps: the translation loss is normalised by
    the whole batch's token count and cT-LASER's m is the whole batch's mean norm, centred
    on the whole batch's mean (per-slice normalisers moved the embeddings by 0.87 (β = 0)
    and 1.87 (β = 0.5) on this task)."""
    from pipeline.methods.neural import train_task

    settings = LoopSettings(epochs=3, batch_size=8, lr=0.01, seed=7)
    single = run_loop(_task(beta, 24, center), settings)
    distributed = train_task(_task(beta, 24, center), settings, processes=2)
    assert distributed["world_size"] == 2
    for h1, h2 in zip(single["history"], distributed["history"]):
        assert h1["loss"] == pytest.approx(h2["loss"], rel=1e-5)
    task = _task(beta, 24)
    docs = task.ids[0] + task.ids[1]
    emb = []
    for result in (single, distributed):
        model = task.build()
        model.load_state_dict({k: torch.from_numpy(v) for k, v in result["weights"].items()})
        model.eval()
        emb.append(encode_texts(torch, model, docs))
    # Weights are not compared: the attention's key biases and the one-key cross-attention
    # have zero gradient in exact arithmetic, and Adam turns their rounding noise into steps
    # of size lr that do not change the function. The embeddings (scale ~3) agree to 2e-3.
    np.testing.assert_allclose(emb[1], emb[0], rtol=0, atol=2e-3)


def test_constraint_warm_up_schedules_beta_by_epoch():
    """β rises linearly over warmup_epochs epochs: the first epoch's loss is T-LASER's, the
    full β applies from epoch warmup_epochs on, and each epoch records its β."""
    task = _task(beta=0.5)
    task.warmup_epochs = 2
    plain = _task(beta=0.0)
    assert [task.begin_epoch(e)["beta"] for e in range(4)] == [0.0, 0.25, 0.5, 0.5]
    assert plain.begin_epoch(0) == {}  # T-LASER records no β
    torch.manual_seed(0)
    model = task.build()
    items = np.arange(task.n_items)
    draws = task.draw(np.random.default_rng(0))
    task.begin_epoch(0)
    warm = float(task.loss(model, items, draws, items))
    assert warm == pytest.approx(float(plain.loss(model, items, draws, items)), rel=1e-6)
    task.begin_epoch(2)
    full = float(task.loss(model, items, draws, items))
    task.warmup_epochs = 0
    task.begin_epoch(0)
    assert full == pytest.approx(float(task.loss(model, items, draws, items)), rel=1e-6)
    assert full > warm  # the constraint adds a positive term


def _parallel_setup(spark, tmp_path, *sets: str):
    """A two-language training-text set (3 documents each, concepts 0..2) and a parallel
    corpus file: concepts p1, p2 in en and de (p2 twice in de), p3 in en only."""
    from types import SimpleNamespace

    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipeline.config import load_config
    from tests.conftest import REPO

    en, de = _corpus(3)
    training = {
        lang: pa.table({"concept_index": np.arange(3, dtype=np.int64), "text": texts})
        for lang, texts in (("en", en), ("de", de))
    }
    rows = [
        ("en:p1", "p1", "en", "red house"), ("de:p1", "p1", "de", "rot haus"),
        ("en:p2", "p2", "en", "old tree"), ("de:p2", "p2", "de", "alt baum"),
        ("de:p2b", "p2", "de", "zzz"), ("en:p3", "p3", "en", "new river"),
        ("fr:p1", "p1", "fr", "rouge maison"),
    ]  # fmt: skip
    cols = ["doc_id", "concept_id", "lang", "text"]
    table = pa.table({c: [r[i] for r in rows] for i, c in enumerate(cols)})
    table = table.append_column("title", pa.array(["t"] * len(rows)))
    pq.write_table(table, tmp_path / "parallel.parquet")
    cfg = load_config(
        [REPO / "conf" / "local.yaml"],
        [
            "train.ctlaser.vocab_size=60",
            "train.ctlaser.max_tokens=16",
            f"train.ctlaser.parallel_corpus={tmp_path / 'parallel.parquet'}",
            "train.method=ctlaser",
            *sets,
        ],
    )
    data = SimpleNamespace(
        backend=SimpleNamespace(languages=["en", "de"]),
        texts={"training": training, "validation": None},
        rows=SimpleNamespace(spark=spark),
    )
    return cfg.train, data


@pytest.mark.slow
def test_a_parallel_corpus_adds_pairs_and_parallel_only_keeps_just_its_own(spark, tmp_path):
    """The corpus's concepts in two training languages become pairs (one document per concept
    and language, the first by doc_id; p3 and the French row train nothing); the training
    rows' documents remain the distractor pool; parallel_only drops their pairs."""
    from pipeline.errors import ConfigError
    from pipeline.methods.tlaser import _encoder_task

    t, data = _parallel_setup(spark, tmp_path)
    task, proto = _encoder_task(t, data, t.params_of("ctlaser"))
    assert [len(ids) for ids in task.ids] == [3 + 2, 3 + 2]
    assert SubwordVocabulary(proto).sp.decode(task.ids[1][4].tolist()) == "alt baum"
    # concepts: the rows' 0..2, then the corpus's p1, p2 at 3, 4 (p2's de: "alt baum")
    assert task.concepts[0].tolist() == [0, 1, 2, 3, 4]
    assert task.n_items == 5 and task.distractor_pool == [3, 3]
    vocab_row = task.ids[1][4]  # the same vocabulary: it learns on the same texts
    t2, data2 = _parallel_setup(spark, tmp_path, "train.ctlaser.parallel_only=true")
    only, _ = _encoder_task(t2, data2, t2.params_of("ctlaser"))
    assert only.n_items == 2
    assert sorted(only.pairs[:, 1].tolist()) == [3, 4]  # the corpus's rows only
    assert only.ids[1][4].tolist() == vocab_row.tolist()
    t3, data3 = _parallel_setup(
        spark, tmp_path, "train.ctlaser.parallel_max_concepts=1", "train.seed=3"
    )
    one, _ = _encoder_task(t3, data3, t3.params_of("ctlaser"))
    assert one.n_items == 3 + 1 and [len(ids) for ids in one.ids] == [4, 4]
    bad = t.with_params("ctlaser", parallel_only=True, parallel_corpus=None)
    with pytest.raises(ConfigError, match="parallel_corpus"):
        _encoder_task(bad, data, bad.params_of("ctlaser"))
