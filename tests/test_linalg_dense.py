"""Row-chunked tall products against numpy's one-call products."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from pipeline.linalg import dense


@pytest.mark.parametrize("n", [7, 40_000, 150_001])
def test_tall_products_equal_numpy(n):
    rng = np.random.default_rng(n)
    a, b, w = (
        rng.standard_normal((n, 12)),
        rng.standard_normal((12, 5)),
        rng.standard_normal((n, 5)),
    )
    if dense._threads() > 1:  # one chunk below 2 x MIN_ROWS rows, several above
        assert (len(dense._chunks(n)) == 1) == (n < 2 * dense.MIN_ROWS)
    # the larger sizes run several steps per chunk, the last one shorter than STEP_ROWS
    assert n < dense.STEP_ROWS or n % dense.STEP_ROWS
    np.testing.assert_allclose(dense.tall_matmul(a, b), a @ b, rtol=1e-12, atol=1e-12)
    out = w.copy()
    assert dense.tall_matmul(a, b, out=out, subtract=True) is out
    np.testing.assert_allclose(out, w - a @ b, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dense.tall_t_matmul(a, w), a.T @ w, rtol=1e-10, atol=1e-9)
    blocks = [a[:, :4].astype(np.float32), a[:, 4:].astype(np.float32)]
    got = dense.tall_matmul_blocks(blocks, b)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)
    a32, w32 = a.astype(np.float32), w.astype(np.float32)
    gram = dense.tall_t_matmul(a32, w32, dtype=np.float64)
    assert gram.dtype == np.float64
    want = a32.astype(np.float64).T @ w32.astype(np.float64)
    np.testing.assert_allclose(gram, want, rtol=1e-10, atol=1e-9)


def test_in_place_product_into_the_leading_columns_of_its_own_buffer():
    """A thick restart writes V[:, :m] @ S over V[:, :keep] in the same buffer."""
    rng = np.random.default_rng(0)
    buf = rng.standard_normal((100_000, 9))
    coef = rng.standard_normal((9, 4))
    want = buf @ coef
    dense.tall_matmul(buf[:, :9], coef, out=buf[:, :4])
    np.testing.assert_allclose(buf[:, :4], want, rtol=1e-12, atol=1e-12)


def test_chunks_cover_the_rows_and_bound_their_height():
    for n in (1, 16_383, 32_768, 1_000_000):
        chunks = dense._chunks(n)
        assert chunks[0].start == 0 and chunks[-1].stop == n
        assert all(c.stop == d.start for c, d in itertools.pairwise(chunks))
        assert all(c.stop - c.start <= dense.MAX_ROWS for c in chunks) or len(chunks) == 1
