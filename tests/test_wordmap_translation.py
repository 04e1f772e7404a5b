"""Word translation P@k against a brute-force cosine / CSLS computation."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.errors import InputDataError
from pipeline.text.tokenizer import Tokenizer
from pipeline.wordmap.lexicon import Lexicon
from pipeline.wordmap.translation import translate_words, word_translation


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _brute_force(lex, sw, sv, tw, tv, similarity, n_c, k=10):
    s, t = _unit(sv.astype(np.float64)), _unit(tv[:n_c].astype(np.float64))
    cos = s @ t.T
    if similarity == "csls":
        r_t = np.sort(cos, axis=1)[:, -k:].mean(axis=1)
        r_s = np.sort(t @ s[:n_c].T, axis=1)[:, -k:].mean(axis=1)
        score = 2 * cos - r_t[:, None] - r_s[None, :]
    else:
        score = cos
    ranks = {}
    for word, trans in lex.translations().items():
        if word not in sw:
            continue
        i = sw.index(word)
        js = [tw.index(x) for x in trans if x in tw[:n_c]]
        if js:
            # pessimistic rank: 1 + other candidates scoring >= the target
            ranks[word] = min(int(np.sum(score[i] >= score[i, j])) for j in js)
    return ranks


@pytest.mark.parametrize("similarity", ["cosine", "csls"])
def test_word_translation_equals_brute_force(similarity):
    rng = np.random.default_rng(0)
    n_s, n_t, d = 60, 80, 8
    sw = [f"s{i}" for i in range(n_s)]
    tw = [f"t{i}" for i in range(n_t)]
    tv = rng.standard_normal((n_t, d))
    # source word i is close to target word i, with noise: ranks are spread out
    sv = tv[:n_s] + 1.2 * rng.standard_normal((n_s, d))
    pairs = [(f"s{i}", f"t{i}") for i in range(0, 50)] + [(f"s{i}", f"t{i + 3}") for i in range(40)]
    pairs += [("s55", "t75"), ("nope", "t1")]  # t75 is outside 70 candidates; nope is OOV
    lex = Lexicon(tuple(sorted(pairs)))
    n_c = 70
    res = word_translation(
        lex, sw, sv, tw, tv, similarity=similarity, max_candidates=n_c, block_q=7, block_c=9
    )
    ref = _brute_force(lex, sw, sv, tw, tv, similarity, n_c)
    assert res.query_words == sorted(ref)
    np.testing.assert_array_equal(res.ranks, [ref[w] for w in res.query_words])
    assert res.n_oov == 1 and res.n_unreachable == 1 and res.n_candidates == n_c
    for k in (1, 5, 10):
        assert res.precision[k] == pytest.approx(np.mean([r <= k for r in ref.values()]))
    assert 0 < res.precision[1] < res.precision[10] < 1


def test_translate_words_returns_the_nearest_target():
    tv = np.eye(4, dtype=np.float32)
    sv = tv[[2, 0]] + 0.01
    out = translate_words(
        ["a", "b", "zz"], ["a", "b"], sv, list("wxyz"), tv, k=2, similarity="cosine"
    )
    assert [w for w, _ in out["a"]] == ["y", "w"] and out["b"][0][0] == "w" and "zz" not in out


def test_unscorable_lexicon_and_shape_mismatch():
    v = np.eye(3, dtype=np.float32)
    with pytest.raises(InputDataError, match="no lexicon word is scorable"):
        word_translation(Lexicon((("q", "r"),)), ["a", "b", "c"], v, ["a", "b", "c"], v)
    with pytest.raises(InputDataError, match="one row per word"):
        word_translation(Lexicon((("a", "b"),)), ["a", "b"], v, ["a", "b", "c"], v)


def test_lexicon_tokenized_through_a_model_tokenizer():
    lex = Lexicon((("Dog", "HUND"), ("hot-dog", "würstchen"), ("ＡＢＣ", "abc")))
    assert lex.tokenized(Tokenizer()).pairs == (("abc", "abc"), ("dog", "hund"))
