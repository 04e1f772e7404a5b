"""Untranslated TF-IDF cosine: union vocabulary and selection maps vs a dict-based reference."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from pipeline.backends.local import LocalCorpusBackend
from pipeline.baselines.untranslated import fit_untranslated, union_vocabulary
from tests.problems import PROBLEMS


def vocabularies(problem, shared=0.4, seed=0):
    """Per-language term strings: a fraction of the terms share a spelling across languages."""
    rng = np.random.default_rng(seed)
    out = {}
    for lang, (_, p) in problem.sizes.items():
        words = [f"w{i}" if rng.random() < shared else f"{lang}_{i}" for i in range(p)]
        out[lang] = words
    return out


def reference_cosines(corpus, terms, a, b):
    """Cosine of every (doc in a, doc in b) pair over identical strings, by dictionaries."""
    rows = {}
    for lang in (a, b):
        x = corpus[lang][0].tocsr()
        rows[lang] = [
            {terms[lang][j]: float(v) for j, v in zip(x[i].indices, x[i].data)}
            for i in range(x.shape[0])
        ]
    out = np.zeros((len(rows[a]), len(rows[b])))
    for i, da in enumerate(rows[a]):
        na = np.sqrt(sum(v * v for v in da.values()))
        for j, db in enumerate(rows[b]):
            nb = np.sqrt(sum(v * v for v in db.values()))
            dot = sum(v * db.get(t, 0.0) for t, v in da.items())
            out[i, j] = dot / (na * nb) if na > 0 and nb > 0 else 0.0
    return out


@pytest.mark.parametrize("name", ["three_uneven", "steep_zipf"])
def test_untranslated_cosines_match_reference(name):
    problem = PROBLEMS[name]
    corpus = problem.corpus()
    terms = vocabularies(problem)
    be = LocalCorpusBackend(corpus, problem.n_concepts, dtype="float64")
    res = fit_untranslated(be, terms=terms)
    union = res.history["union_terms"]
    assert len(union) == len(set(union)) == res.history["n_union_terms"]
    langs = list(problem.sizes)
    for lang in langs:
        phi = res.components[lang]
        assert sp.issparse(phi) and phi.shape == (problem.sizes[lang][1], len(union))
        assert phi.dtype == np.float32
        np.testing.assert_array_equal(phi.getnnz(axis=1), 1)
        for i in range(0, phi.shape[0], 7):
            assert union[phi.indices[i]] == terms[lang][i]
    a, b = langs[0], langs[1]
    ea = (corpus[a][0] @ res.components[a]).astype(np.float64)
    eb = (corpus[b][0] @ res.components[b]).astype(np.float64)
    na = np.sqrt(np.asarray(ea.multiply(ea).sum(axis=1))).ravel()
    nb = np.sqrt(np.asarray(eb.multiply(eb).sum(axis=1))).ravel()
    got = (ea @ eb.T).toarray() / np.outer(na, nb)
    want = reference_cosines(corpus, terms, a, b)
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert np.count_nonzero(want) > 0
    # the selection keeps norms: rows were L2-normalised, so they still are
    np.testing.assert_allclose(na, 1.0, rtol=1e-5)


def test_union_vocabulary_order_and_errors():
    union, index = union_vocabulary({"en": ["a", "b", "c"], "de": ["c", "d", "a"]})
    assert union == ["a", "b", "c", "d"]
    np.testing.assert_array_equal(index["en"], [0, 1, 2])
    np.testing.assert_array_equal(index["de"], [2, 3, 0])
    with pytest.raises(ValueError, match="repeats term 'x'"):
        union_vocabulary({"en": ["x", "y", "x"]})


def test_untranslated_checks_backend_sizes():
    problem = PROBLEMS["tiny_language"]
    be = LocalCorpusBackend(problem.corpus(), problem.n_concepts)
    terms = vocabularies(problem)
    terms["xx"] = terms["xx"][:-1]
    with pytest.raises(ValueError, match="'xx' has 7 terms"):
        fit_untranslated(be, terms=terms)
    with pytest.raises(ValueError, match="same order"):
        fit_untranslated(be, terms=dict(reversed(list(vocabularies(problem).items()))))
