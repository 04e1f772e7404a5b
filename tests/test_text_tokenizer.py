"""The one tokeniser on several scripts; batch and single-text paths agree."""

from __future__ import annotations

import unicodedata

import numpy as np
import pyarrow as pa
import pytest

from pipeline.text.tokenizer import Tokenizer, distinct_tokens_per_doc

TOK = Tokenizer()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The Quick, brown fox's DEN!", ["the", "quick", "brown", "fox", "s", "den"]),
        ("Crème brûlée à l'école", ["crème", "brûlée", "à", "l", "école"]),
        ("Straße ÜBER Öl", ["straße", "über", "öl"]),
        ("Москва — столица России.", ["москва", "столица", "россии"]),
        ("ΣΟΦΟΣ σοφός Ελληνικά", ["σοφοσ", "σοφόσ", "ελληνικά"]),
        ("中文分词", ["中", "文", "分", "词"]),
        ("東京はカタカナ", ["東", "京", "は", "カ", "タ", "カ", "ナ"]),
        ("한국어 문장", ["한국어", "문장"]),
        ("नमस्ते दुनिया", ["नमस्ते", "दुनिया"]),
        ("مرحبا بالعالم", ["مرحبا", "بالعالم"]),
        ("version 2.0_beta, ＡＢＣ１２３", ["version", "2", "0", "beta", "abc123"]),
        ("", []),
        ("  ... !!! ", []),
    ],
)
def test_scripts(text, expected):
    assert TOK.tokenize(text) == expected


def test_composed_and_decomposed_accents_are_one_word():
    nfc = unicodedata.normalize("NFC", "café résumé")
    nfd = unicodedata.normalize("NFD", "café résumé")
    assert nfc != nfd
    assert TOK.tokenize(nfc) == TOK.tokenize(nfd) == ["café", "résumé"]


def test_greek_final_sigma_folds():
    assert TOK.tokenize("ΛΟΓΟΣ")[0] == TOK.tokenize("λογος")[0] == TOK.tokenize("λογοσ")[0]


def test_options():
    assert Tokenizer(lowercase=False).tokenize("Ab CD") == ["Ab", "CD"]
    assert Tokenizer(split_cjk=False).tokenize("中文 分词") == ["中文", "分词"]
    assert Tokenizer(min_token_length=3).tokenize("a ab abc abcd") == ["abc", "abcd"]


def test_batch_equals_single_text_path_and_handles_nulls():
    texts = ["Hello world", None, "", "Привет, мир", "中文 text"]
    batch = TOK.tokenize_arrow(pa.array(texts, pa.string())).to_pylist()
    assert batch == [TOK.tokenize(t or "") for t in texts]
    flat, doc_of = TOK.flat_tokens(pa.array(texts, pa.string()))
    assert doc_of.tolist() == [0, 0, 3, 3, 4, 4, 4]
    assert flat.to_pylist() == ["hello", "world", "привет", "мир", "中", "文", "text"]


def test_distinct_tokens_per_doc_matches_python_sets():
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(20)]
    texts = [" ".join(rng.choice(words, size=rng.integers(0, 30))) for _ in range(50)]
    flat, doc_of = TOK.flat_tokens(pa.array(texts))
    distinct, docs, n_unique = distinct_tokens_per_doc(flat, doc_of, len(texts))
    for d, text in enumerate(texts):
        expected = set(text.split())
        got = {t for t, dd in zip(distinct.to_pylist(), docs) if dd == d}
        assert got == expected
        assert n_unique[d] == len(expected)
