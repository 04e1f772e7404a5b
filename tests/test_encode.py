"""``model.encode`` (sentence-transformers' convention) for every kind of model: a dense Cr5
map, a selection model (untranslated, sparse ``embed``), a topic model (JPLSA, folded-in
distributions) and a T-LASER encoder. Each is checked against its own ``embed`` rows,
densified and normalised here in float64 (no Spark)."""

from __future__ import annotations

import io
import sys

import numpy as np
import pyarrow as pa
import pytest
import scipy.sparse as sp

from pipeline.errors import ModelError
from pipeline.model import Cr5Model
from pipeline.model.encode import (
    DEFAULT_BATCH_SIZE,
    PROGRESS_LINE_SECONDS,
    PROGRESS_MIN_BATCHES,
    EncodeProgress,
)
from pipeline.model.encoder_model import EncoderModel
from pipeline.model.loading import load_model
from tests.test_model import make_model, make_selection_model
from tests.test_model_topics import make_topic_model

#: English words of every test model's vocabulary (cat/dog/house/tree: Cr5 and JPLSA; cat,
#: hotel, tree: untranslated; the encoder's subwords come from ENCODER_EN), an unknown-only
#: text, and two texts that embed as the zero vector (empty, None) in every model.
TEXTS = [
    "Cat cat DOG!",
    "the house and the tree, the cat",
    "hotel cat",
    "red house by the river",
    "unknown words only",
    "",
    None,
    "tree tree",
    "green old tree",
]
ZERO_ROWS = [5, 6]

ENCODER_EN = ["red", "green", "blue", "house", "tree", "river", "small", "large", "old", "new"]
ENCODER_DE = ["rot", "gruen", "blau", "haus", "baum", "fluss", "klein", "gross", "alt", "neu"]


def make_encoder_model(path):
    """A tiny untrained T-LASER encoder directory (d = 16), seeded."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("sentencepiece")
    from pipeline.model.encoder_model import SUBWORDS
    from pipeline.model.format import save_encoder_model
    from pipeline.neural.tlaser import EncoderSizes, SubwordVocabulary, build_module

    rng = np.random.default_rng(0)
    en, de = [], []
    for _ in range(12):
        w = rng.choice(len(ENCODER_EN), size=3, replace=False)
        en.append(" ".join(ENCODER_EN[i] for i in w))
        de.append(" ".join(ENCODER_DE[i] for i in w))
    vocab = SubwordVocabulary.train(en + de, ["en", "de"], 60)
    sizes = EncoderSizes(len(vocab), dim=16, heads=2, layers=1, ff=32, max_tokens=16)
    torch.manual_seed(0)
    net = build_module(sizes).eval()
    weights = {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}
    meta = {"method": "tlaser", "r": 16, "lam": 0.0, "languages": ["en", "de"],
            "encoder": {"sizes": sizes.to_dict(), "threads": 1, "batch_rows": 3}}  # fmt: skip
    save_encoder_model(path, meta, weights, {SUBWORDS: vocab.proto})


BUILDERS = {
    "cr5": make_model,
    "untranslated": make_selection_model,
    "jplsa": make_topic_model,
    "tlaser": make_encoder_model,
}


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def model(request, tmp_path_factory):
    """One loaded model of each kind (through the common loader, as users get them)."""
    path = tmp_path_factory.mktemp(request.param) / "model"
    BUILDERS[request.param](path)
    return load_model(path)


def _dense(rows) -> np.ndarray:
    """``embed``'s rows as a float64 ndarray (a sparse model's densified)."""
    return (rows.toarray() if sp.issparse(rows) else np.asarray(rows)).astype(np.float64)


def _assert_same_rows(model, got: np.ndarray, want: np.ndarray) -> None:
    """Equal rows from two batchings: bit for bit for a linear model (each row is computed
    alone), to float32 rounding for an encoder (it pads each batch to its longest text)."""
    if isinstance(model, EncoderModel):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    else:
        np.testing.assert_array_equal(got, want)


def test_the_fixture_covers_every_model_kind(model):
    method = model.meta.get("method", "cr5")  # make_model's Cr5 model names no method
    assert method in BUILDERS
    embedded = model.embed(TEXTS, "en")
    assert sp.issparse(embedded) == (method == "untranslated") == model.is_sparse
    assert getattr(model, "is_topic_model", False) == (method == "jplsa")
    # the texts give each model nonzero rows besides the zero ones
    assert np.count_nonzero(np.abs(_dense(embedded)).sum(axis=1)) >= 3


def test_one_text_gives_one_dense_float32_vector_equal_to_embed(model):
    text = "the house and the tree, the cat"
    got = model.encode(text, "en")
    assert isinstance(got, np.ndarray) and got.dtype == np.float32
    assert got.shape == (model.dim,)
    want = _dense(model.embed([text], "en"))[0]
    np.testing.assert_array_equal(got, want.astype(np.float32))
    assert np.abs(got).sum() > 0


def test_texts_with_normalisation_give_unit_rows_and_zero_rows_stay_zero(model):
    got = model.encode(TEXTS, "en", normalize_embeddings=True)
    assert isinstance(got, np.ndarray) and got.dtype == np.float32
    assert got.shape == (len(TEXTS), model.dim)
    raw = _dense(model.embed(TEXTS, "en"))
    norms = np.sqrt((raw**2).sum(axis=1))
    want = np.zeros_like(raw)
    nonzero = norms > 0
    want[nonzero] = raw[nonzero] / norms[nonzero, None]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    lengths = np.linalg.norm(got.astype(np.float64), axis=1)
    np.testing.assert_allclose(lengths[nonzero], 1.0, rtol=1e-5)
    assert not got[ZERO_ROWS].any() and not nonzero[ZERO_ROWS].any()
    # without normalisation: embed's rows as they are (a topic model's sum to 1)
    plain = model.encode(TEXTS, "en")
    np.testing.assert_array_equal(plain, raw.astype(np.float32))
    if getattr(model, "is_topic_model", False):
        np.testing.assert_allclose(plain[nonzero].sum(axis=1), 1.0, rtol=1e-5)


def test_small_batches_give_the_one_batch_result_and_call_embed_per_batch(model, monkeypatch):
    whole = model.encode(TEXTS, "en", batch_size=len(TEXTS))
    sizes = []
    embed = model.embed

    def counting_embed(texts, lang):
        sizes.append(len(texts))
        return embed(texts, lang)

    monkeypatch.setattr(model, "embed", counting_embed)
    batched = model.encode(TEXTS, "en", batch_size=2)
    assert sizes == [2, 2, 2, 2, 1]
    _assert_same_rows(model, batched, whole)
    sizes.clear()
    model.encode(TEXTS, "en")
    assert sizes == [len(TEXTS)] and len(TEXTS) <= DEFAULT_BATCH_SIZE


def test_sequences_of_any_kind_and_the_empty_input(model):
    want = model.encode(TEXTS, "en")
    for texts in (tuple(TEXTS), pa.array(TEXTS, type=pa.string()), iter(TEXTS)):
        _assert_same_rows(model, model.encode(texts, "EN ", batch_size=4), want)
    empty = model.encode([], "en")
    assert empty.shape == (0, model.dim) and empty.dtype == np.float32
    assert model.encode([], "en", normalize_embeddings=True).shape == (0, model.dim)
    with pytest.raises(ModelError, match="'xx' is not in this model"):
        model.encode([], "xx")
    with pytest.raises(ModelError, match="'xx' is not in this model"):
        model.encode("cat", "xx")


def test_convert_to_list_torch_and_bad_arguments(tmp_path, monkeypatch):
    make_model(tmp_path / "m")
    model = Cr5Model.load(tmp_path / "m")
    want = model.encode(TEXTS, "en")
    as_list = model.encode(TEXTS, "en", convert_to="list")
    assert isinstance(as_list, list) and isinstance(as_list[0][0], float)
    np.testing.assert_array_equal(np.array(as_list, dtype=np.float32), want)
    one = model.encode("cat", "en", convert_to="list")
    assert isinstance(one, list) and len(one) == model.dim and isinstance(one[0], float)
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="batch_size must be an integer >= 1"):
            model.encode(TEXTS, "en", batch_size=bad)
    with pytest.raises(ValueError, match="convert_to must be one of 'numpy', 'torch', 'list'"):
        model.encode(TEXTS, "en", convert_to="tensor")
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
        with pytest.raises(ImportError, match=r"convert_to='torch'\) needs PyTorch"):
            model.encode(TEXTS, "en", convert_to="torch")
    torch = pytest.importorskip("torch")
    tensor = model.encode(TEXTS, "en", convert_to="torch")
    assert isinstance(tensor, torch.Tensor) and tensor.dtype == torch.float32
    assert tuple(tensor.shape) == (len(TEXTS), model.dim)
    np.testing.assert_array_equal(tensor.numpy(), want)
    assert tuple(model.encode("cat", "en", convert_to="torch").shape) == (model.dim,)


class _Terminal(io.StringIO):
    """A standard error that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_progress_shows_by_default_only_for_long_input_on_a_terminal(tmp_path, monkeypatch):
    make_model(tmp_path / "m")
    model = Cr5Model.load(tmp_path / "m")
    many = TEXTS * 2  # 18 texts: 18 batches of 1, more than PROGRESS_MIN_BATCHES
    assert 3 <= PROGRESS_MIN_BATCHES < 5  # the batch counts below: 18, 5, 3
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    model.encode(many, "en", batch_size=1)
    out = terminal.getvalue()
    assert out.count("\r") == len(many) and out.endswith("\n")
    assert "encode: 18/18 texts (100%)" in out and "encode: 1/18 texts (5%)" in out
    terminal.seek(0)
    terminal.truncate()
    model.encode(TEXTS, "en", batch_size=2)  # 5 batches: still more than 4
    assert terminal.getvalue().count("\r") == 5
    terminal.seek(0)
    terminal.truncate()
    model.encode(TEXTS, "en", batch_size=3)  # 3 batches: quiet
    model.encode(many, "en", batch_size=1, show_progress_bar=False)
    assert terminal.getvalue() == ""
    log = io.StringIO()  # not a terminal: quiet unless asked; asked, whole lines
    monkeypatch.setattr(sys, "stderr", log)
    model.encode(many, "en", batch_size=1)
    assert log.getvalue() == ""
    model.encode(many, "en", batch_size=1, show_progress_bar=True)
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and lines[-1].startswith("encode: 18/18 texts (100%)")
    assert len(lines) == 2  # the first and the last: the rest fall within 10 s


def test_progress_lines_rate_eta_and_throttling():
    now = [100.0]
    log = io.StringIO()
    progress = EncodeProgress(1000, log, clock=lambda: now[0])
    assert progress.text(0) == ("encode: 0/1,000 texts (0%), rate unknown, ETA ?, elapsed 0.0s")
    now[0] += 5.0
    progress.update(250)  # 50 texts/s; 750 left: 15 s
    now[0] += PROGRESS_LINE_SECONDS / 2
    progress.update(400)  # within the interval: no line
    now[0] += PROGRESS_LINE_SECONDS / 2
    progress.update(700)
    now[0] = 120.0
    progress.update(1000)
    assert log.getvalue().splitlines() == [
        "encode: 250/1,000 texts (25%), 50 texts/s, ETA 15.0s, elapsed 5.0s",
        "encode: 700/1,000 texts (70%), 47 texts/s, ETA 6.4s, elapsed 15.0s",
        "encode: 1,000/1,000 texts (100%), 50 texts/s, ETA 0.0s, elapsed 20.0s",
    ]
