"""Sparse products in cache-sized column chunks (pipeline/linalg/sparse_products.py)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

from pipeline.linalg import sparse_products
from pipeline.linalg.sparse_products import column_chunks, gram, summed_rows, transposed


@pytest.mark.parametrize(
    ("rows", "width", "budget", "widths"),
    [
        (200_000, 25, 24 * 2**20, [25]),  # the default block on a 200k vocabulary: one product
        (200_000, 50, 24 * 2**20, [25, 25]),
        (200_000, 100, 24 * 2**20, [25, 25, 25, 25]),
        (50_000, 100, 24 * 2**20, [100]),  # a smaller vocabulary fits wider blocks
        (10, 7, 1, [1] * 7),  # never narrower than a column
        (10, 0, 1, [0]),
    ],
)
def test_column_chunks_are_equal_and_as_few_as_the_budget_allows(rows, width, budget, widths):
    chunks = column_chunks(rows, width, 4, budget)
    assert [s.stop - s.start for s in chunks] == widths
    assert chunks[0].start == 0 and chunks[-1].stop == width
    assert all(a.stop == b.start for a, b in itertools.pairwise(chunks))


def test_chunked_products_equal_the_whole_products_bit_for_bit(monkeypatch):
    """Each column of a CSR x dense product is the same sum in the same order whatever the
    block's width, so the chunked results equal scipy's whole products exactly; and they
    match a dense computation. A 64-byte budget forces 4 to 10 chunks."""
    rng = np.random.default_rng(0)
    x = sp.random(300, 40, density=0.1, format="csr", dtype=np.float32, random_state=1)
    concepts = rng.integers(0, 17, size=300)
    yt = sp.csr_matrix((np.ones(300, np.float32), (concepts, np.arange(300))), shape=(17, 300))
    v = rng.standard_normal((40, 10)).astype(np.float32)
    z = rng.standard_normal((300, 10)).astype(np.float32)
    whole = (x.T @ (x @ v), x.T @ z, yt @ (x @ v))
    monkeypatch.setattr(sparse_products, "DENSE_CHUNK_BYTES", 64)
    assert len(column_chunks(40, 10, 4)) > 3
    chunked = (gram(x, v), transposed(x, z), summed_rows(yt, x, v))
    xt = x.T.tocsr()
    stored = (gram(x, v, xt), transposed(x, z, xt))
    for got, want in zip(chunked, whole, strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    for got, want in zip(stored, whole, strict=False):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    dense = x.toarray().astype(np.float64)
    np.testing.assert_allclose(chunked[0], dense.T @ (dense @ v), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(chunked[2], yt.toarray() @ (dense @ v), rtol=1e-5, atol=1e-5)


def test_the_local_backend_gives_the_same_passes_in_chunks(monkeypatch):
    """The backend's three products through the chunked path (a 64-byte budget) equal the
    whole-block ones exactly, for both ways of storing Xᵀ."""
    from pipeline.backends.local import LocalCorpusBackend

    rng = np.random.default_rng(2)
    x = sp.random(200, 30, density=0.1, format="csr", dtype=np.float32, random_state=3)
    data = {"xx": (x, rng.integers(0, 12, size=200))}
    v = rng.standard_normal((30, 9))
    p = rng.standard_normal((12, 9))
    for transpose in ("implicit", "csr"):
        be = LocalCorpusBackend(data, 12, transpose=transpose)
        whole = (be.gram("xx", v), be.xt_gather("xx", p), be.x_scatter("xx", v))
        with monkeypatch.context() as m:
            m.setattr(sparse_products, "DENSE_CHUNK_BYTES", 64)
            chunked = (be.gram("xx", v), be.xt_gather("xx", p), be.x_scatter("xx", v))
        for got, want in zip(chunked, whole, strict=True):
            np.testing.assert_array_equal(got, want)
