r"""The maths of the PLSA topic models (JPLSA, CPLSA): E-step, M-step, posterior
regularisation, deterministic start and folding-in. numpy and scipy only.

Notation. T topics; the stacked vocabulary of all languages, p words (``TermLayout``); a
*unit* u is what owns a topic distribution θ_u (T,): a concept for JPLSA (the union of its
documents' tokens), a document for CPLSA. ``n(u, w)`` are term counts. The topic-word
matrix is kept transposed, ``B`` of shape (p, T), ``B[w, t] = β_t(w)``: for JPLSA each
column sums to 1 over all p words (one distribution over the union of the vocabularies);
for CPLSA each column sums to 1 over each language's words (one distribution per language
and topic).

**E-step.** For every nonzero ``(u, w)``: ``den(u, w) = Σ_t θ_u(t) β_t(w)``, the posterior
of a token of w in u is ``q(t) = θ_u(t) β_t(w) / den(u, w)``, and with ``R = n / den``
(sparse, the pattern of the counts) the expected counts are

.. math::  n_u(t) = θ_u(t)\,(R B)_{ut}, \qquad n_t(w) = β_t(w)\,(R^T Θ)_{wt},

two sparse-dense products; the log-likelihood is ``Σ n(u, w) log den(u, w)``.

**M-step (MAP, Dirichlet priors α_θ, α_β >= 1).** ``θ_u(t) ∝ n_u(t) + α_θ − 1`` and
``β_t(w) ∝ n_t(w) + α_β − 1``, normalised over the topics, resp. over the union (JPLSA) or
each language (CPLSA). EM increases the log posterior

.. math::  L = Σ_{u,w} n(u,w) \log den(u,w) + (α_θ − 1) Σ_{u,t} \log θ_u(t)
              + (α_β − 1) Σ_{t,w} \log β_t(w).

**Posterior regularisation (CPLSA).** The documents d = 0..G−1 of a concept (d = 0 the one of
the first language) must agree on their expected topic fractions
``f_d(t) = Σ_w n(d,w) q_{d,w}(t) / N_d`` (N_d the document's token count): the E-step's
posterior is replaced by its KL projection onto ``{q : |f_d(t) − f_0(t)| <= ε, d >= 1}``.
With the features ``φ_{d,t} = f_d(t) − f_0(t)`` the projection is ``q ∝ p · exp(−λ·φ)``
with λ = λ⁺ − λ⁻ maximising the concave dual ``−log Z(λ) − ε Σ(λ⁺ + λ⁻)`` over λ± >= 0;
its gradient is ``±E_q[φ] − ε``. The tokens are independent, so the projected posterior of a
token of document d is the posterior under the *tilted* topic distribution
``θ̃_d = θ_d ⊙ exp(a_d)``, with ``a_d = −λ_d / N_d`` (d >= 1) and
``a_0 = Σ_{d>=1} λ_d / N_0``. Projected gradient ascent with step ``1 / (2 L_g)``, where
``L_g = max_{d>=1} 1/N_d + (G − 1)/N_0`` bounds the dual's curvature in λ (the covariance of
the fractions), runs per concept until no constraint is violated by more than ``tol`` or
``maxiter`` steps; λ is kept between EM iterations. The expected counts then come from θ̃,
the log-likelihood from θ.

**Start.** θ uniform. Each language's words are sorted by training frequency (ties by term
index) and dealt to the topics in turn (rank i to topic i mod T); topic t starts as
``(1 − mix)`` x uniform over its dealt words + ``mix`` x uniform over all words, each language
scaled to its share of the corpus' tokens (JPLSA) or to 1 (CPLSA).

**Folding-in.** A document of language l is embedded by ``steps`` EM steps on its θ alone,
from the uniform θ, with ``B_l`` the language's rows of B normalised per topic (for JPLSA the
topic's distribution conditioned on language l); one step from uniform gives
``θ(t) ∝ Σ_w n(w) β_t(w) / Σ_s β_s(w) + α_θ − 1``. A document with no known term embeds as
the zero vector.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from pipeline.linalg.backend import TermLayout

__all__ = [
    "EStep",
    "PrResult",
    "e_step",
    "fold_in",
    "initial_topics",
    "log_prior",
    "m_step_theta",
    "m_step_words",
    "normalise_words",
    "project_posterior",
    "row_dens",
]

#: Nonzeros per chunk of rows in :func:`row_dens`: each chunk is one dense product over the
#: distinct terms of its rows, which BLAS runs several times faster than gathering
#: ``θ_u`` and ``β(w)`` for every nonzero, although it computes more products.
CHUNK_NNZ = 2048


def row_dens(x: sp.csr_matrix, theta: np.ndarray, words: np.ndarray) -> np.ndarray:
    """``den(u, w) = Σ_t θ_u(t) β_t(w)`` at the nonzeros of ``x``.

    Rows are taken in chunks of about :data:`CHUNK_NNZ` nonzeros; a chunk's values are read
    off ``θ_chunk @ B[terms]ᵀ`` over the distinct terms of its rows.

    Parameters
    ----------
    x : csr_matrix of shape (u, m)
        Counts (only the pattern is used), indices sorted within rows.
    theta : ndarray of shape (u, T)
    words : ndarray of shape (m, T)
        ``B`` restricted to the columns of ``x``.

    Returns
    -------
    ndarray of float64, shape (nnz,)
    """
    n = x.shape[0]
    out = np.empty(x.nnz, dtype=np.float64)
    if n == 0 or x.nnz == 0:
        return out
    step = int(np.clip(CHUNK_NNZ * n // x.nnz, 4, 256))
    lengths = np.diff(x.indptr)
    for lo in range(0, n, step):
        hi = min(lo + step, n)
        s, e = x.indptr[lo], x.indptr[hi]
        if e == s:
            continue
        terms, local = np.unique(x.indices[s:e], return_inverse=True)
        block = theta[lo:hi] @ words[terms].T
        rows = np.repeat(np.arange(hi - lo), lengths[lo:hi])
        out[s:e] = block[rows, local]
    return out


def _ratio(x: sp.csr_matrix, den: np.ndarray) -> sp.csr_matrix:
    """``R = n / den`` on the pattern of ``x`` (0 where den is 0: a word no topic has)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(den > 0, x.data / np.where(den > 0, den, 1.0), 0.0)
    return sp.csr_matrix((r, x.indices, x.indptr), shape=x.shape)


@dataclass
class EStep:
    """Expected counts of one E-step on a set of units.

    Attributes
    ----------
    unit_counts : ndarray of shape (u, T)
        ``n_u(t)``.
    word_counts : ndarray of shape (m, T)
        ``n_t(w)`` at the columns of the units' rows (transposed, like ``B``).
    log_likelihood : float
        ``Σ n log den`` under the untilted θ.
    """

    unit_counts: np.ndarray
    word_counts: np.ndarray
    log_likelihood: float


def e_step(
    x: sp.csr_matrix, theta: np.ndarray, words: np.ndarray, tilted: np.ndarray | None = None
) -> EStep:
    """One E-step on units ``x`` (u, m) with topic distributions ``theta`` (u, T) and the
    topic-word rows ``words`` (m, T) of their columns. ``tilted`` (u, T): the projected
    posterior's θ̃ (CPLSA), used for the expected counts; the log-likelihood is ``theta``'s.
    """
    den = row_dens(x, theta, words)
    with np.errstate(divide="ignore"):
        ll = float(x.data @ np.where(den > 0, np.log(np.where(den > 0, den, 1.0)), 0.0))
    q_theta = theta
    if tilted is not None:
        q_theta = tilted
        den = row_dens(x, tilted, words)
    r = _ratio(x, den)
    unit = q_theta * np.asarray(r @ words)
    word = words * np.asarray(r.T @ q_theta)
    return EStep(unit, word, ll)


def m_step_theta(unit_counts: np.ndarray, topic_prior: float) -> np.ndarray:
    """``θ_u(t) ∝ n_u(t) + α_θ − 1`` (rows sum to 1; a unit without tokens at α_θ = 1 gets
    the uniform distribution)."""
    a = unit_counts + (topic_prior - 1.0)
    s = a.sum(axis=1, keepdims=True)
    t = a.shape[1]
    return np.where(s > 0, a / np.where(s > 0, s, 1.0), 1.0 / t)


def normalise_words(b: np.ndarray, layout: TermLayout, joint: bool) -> np.ndarray:
    """Columns of ``b`` (p, T) normalised over all rows (``joint``) or per language block."""
    b = np.array(b, dtype=np.float64, copy=True)
    blocks = [slice(0, layout.n_terms)] if joint else list(layout.slices.values())
    for s in blocks:
        tot = b[s].sum(axis=0, keepdims=True)
        b[s] /= np.where(tot > 0, tot, 1.0)
    return b


def m_step_words(
    word_counts: np.ndarray, layout: TermLayout, word_prior: float, joint: bool
) -> np.ndarray:
    """``β_t(w) ∝ n_t(w) + α_β − 1`` from the summed expected counts (p, T)."""
    return normalise_words(word_counts + (word_prior - 1.0), layout, joint)


def log_prior(probs: np.ndarray, prior: float) -> float:
    """``(α − 1) Σ log probs`` (0 at α = 1, where zero probabilities are allowed)."""
    if prior == 1.0:
        return 0.0
    return float((prior - 1.0) * np.sum(np.log(probs)))


def initial_topics(
    frequencies: np.ndarray, layout: TermLayout, n_topics: int, mix: float, joint: bool
) -> np.ndarray:
    """The deterministic start ``B`` (p, T) (module docstring).

    Parameters
    ----------
    frequencies : ndarray of shape (p,)
        Training token count of every word of the stacked vocabulary.
    layout : TermLayout
    n_topics : int
    mix : float
        Weight of the uniform part, in [0, 1).
    joint : bool
        JPLSA (one distribution over the union) or CPLSA (one per language).
    """
    freq = np.asarray(frequencies, dtype=np.float64)
    b = np.zeros((layout.n_terms, n_topics))
    total = float(freq.sum()) or 1.0
    for s in layout.slices.values():
        f = freq[s]
        p_l = f.size
        if p_l == 0:
            continue
        order = np.lexsort((np.arange(p_l), -f))  # by frequency, ties by term index
        topic = np.empty(p_l, dtype=np.int64)
        topic[order] = np.arange(p_l) % n_topics
        dealt = np.zeros((p_l, n_topics))
        dealt[np.arange(p_l), topic] = 1.0
        sizes = dealt.sum(axis=0)
        dealt /= np.where(sizes > 0, sizes, 1.0)
        block = (1.0 - mix) * dealt + mix / p_l
        block[:, sizes == 0] = 1.0 / p_l  # more topics than words: uniform
        weight = float(f.sum()) / total if joint else 1.0
        b[s] = block * weight
    return normalise_words(b, layout, joint)


def fold_in(x: sp.csr_matrix, words: np.ndarray, *, steps: int, topic_prior: float) -> np.ndarray:
    """Topic distributions of documents of one language by ``steps`` folding-in EM steps.

    Parameters
    ----------
    x : csr_matrix of shape (n, p_l)
        Term counts.
    words : ndarray of shape (p_l, T)
        The language's topic-word matrix, each column summing to 1.
    steps : int
    topic_prior : float
        α_θ.

    Returns
    -------
    ndarray of float64, shape (n, T)
        Rows sum to 1; zero rows for documents without a term.
    """
    x = sp.csr_matrix(x, dtype=np.float64)
    x.sort_indices()
    n, t = x.shape[0], words.shape[1]
    words = np.asarray(words, dtype=np.float64)
    theta = np.full((n, t), 1.0 / t)
    for _ in range(steps):
        r = _ratio(x, row_dens(x, theta, words))
        theta = m_step_theta(theta * np.asarray(r @ words), topic_prior)
    theta[np.diff(x.indptr) == 0] = 0.0
    return theta


@dataclass
class PrResult:
    """The posterior-regularisation projection of one block's concepts.

    Attributes
    ----------
    tilted : ndarray of shape (n, T)
        θ̃ of every document (rows sum to 1).
    lam_pos, lam_neg : ndarray of shape (n, T)
        λ⁺ and λ⁻ (rows of each concept's first document are 0).
    step_sizes : ndarray of shape (n,)
        Each document's concept's step size η at the end (for the next projection).
    steps : int
        Projected-gradient steps taken (the most any concept needed).
    max_violation : float
        The largest ``|f_d(t) − f_0(t)| − ε`` left, or 0 when every constraint holds.
    """

    tilted: np.ndarray
    lam_pos: np.ndarray
    lam_neg: np.ndarray
    step_sizes: np.ndarray
    steps: int
    max_violation: float


def _first_docs(doc_group: np.ndarray) -> np.ndarray:
    """For documents sorted by group: the position of each document's group's first one."""
    starts = np.r_[0, np.flatnonzero(np.diff(doc_group)) + 1]
    return np.repeat(starts, np.diff(np.r_[starts, doc_group.size]))


def _tilt(
    theta: np.ndarray,
    lam: np.ndarray,
    tokens: np.ndarray,
    first: np.ndarray,
    is_first: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """θ̃ = θ ⊙ exp(a) with rows normalised, and the log of each row's normaliser
    (module docstring)."""
    a = -lam / tokens[:, None]
    up = np.zeros_like(lam)
    np.add.at(up, first, lam / tokens[first][:, None])
    a = np.where(is_first[:, None], up, a)
    top = a.max(axis=1, keepdims=True)
    t = theta * np.exp(a - top)
    s = t.sum(axis=1, keepdims=True)
    return t / s, (np.log(s) + top).ravel()


@dataclass
class _Dual:
    """The dual at one point: θ̃, the constraint features φ, the diagonal of the dual's
    curvature (the variances of the fractions; for the first documents unused), the dual
    objective per concept (up to a constant) and the largest violation per concept."""

    tilted: np.ndarray
    phi: np.ndarray
    curvature: np.ndarray
    objective: np.ndarray
    violation: np.ndarray


#: Floor of a curvature entry (a topic no token of the document can be in has variance 0).
_MIN_CURVATURE = 1e-12


class _Projection:
    """The per-concept dual problem of :func:`project_posterior` on some whole concepts."""

    def __init__(self, x, doc_group, theta, words, epsilon) -> None:
        self.x, self.theta, self.words = x, theta, words
        self.words_sq = words * words
        self.epsilon = epsilon
        # concepts renumbered 0..g-1 in order (the documents of one concept are contiguous)
        self.doc_group = np.cumsum(np.r_[0, np.diff(doc_group) != 0]).astype(np.int64)
        tokens = np.asarray(x.sum(axis=1)).ravel()
        self.tokens = np.where(tokens > 0, tokens, 1.0)
        self.first = _first_docs(self.doc_group)
        self.is_first = self.first == np.arange(self.first.size)
        self.n_groups = int(self.doc_group[-1]) + 1 if doc_group.size else 0

    def per_group(self, values: np.ndarray) -> np.ndarray:
        return np.bincount(self.doc_group, weights=values, minlength=self.n_groups)

    def evaluate(self, lp: np.ndarray, ln: np.ndarray) -> _Dual:
        tilted, log_norm = _tilt(self.theta, lp - ln, self.tokens, self.first, self.is_first)
        den = row_dens(self.x, tilted, self.words)
        r = _ratio(self.x, den)
        n_q = tilted * np.asarray(r @ self.words)  # Σ_w n q(t)
        r2 = _ratio(sp.csr_matrix((r.data, r.indices, r.indptr), shape=r.shape), den)
        n_q2 = tilted * tilted * np.asarray(r2 @ self.words_sq)  # Σ_w n q(t)²
        n2 = self.tokens[:, None] ** 2
        frac = n_q / self.tokens[:, None]
        var = np.maximum(n_q - n_q2, 0.0) / n2
        phi = np.where(self.is_first[:, None], 0.0, frac - frac[self.first])
        curv = np.maximum(var + var[self.first], _MIN_CURVATURE)
        with np.errstate(divide="ignore"):
            logs = np.where(den > 0, np.log(np.where(den > 0, den, 1.0)), 0.0)
        rows = np.repeat(np.arange(self.x.shape[0]), np.diff(self.x.indptr))
        doc_ll = np.bincount(rows, weights=self.x.data * logs, minlength=self.x.shape[0])
        doc_ll += np.asarray(self.x.sum(axis=1)).ravel() * log_norm
        penalty = self.epsilon * (lp + ln).sum(axis=1)
        excess = (np.abs(phi) - self.epsilon).max(axis=1, initial=-np.inf)
        viol = np.full(self.n_groups, -np.inf)
        np.maximum.at(viol, self.doc_group, excess)
        return _Dual(tilted, phi, curv, -self.per_group(doc_ll + penalty), viol)


def project_posterior(
    x: sp.csr_matrix,
    doc_group: np.ndarray,
    theta: np.ndarray,
    words: np.ndarray,
    lam_pos: np.ndarray,
    lam_neg: np.ndarray,
    *,
    epsilon: float,
    maxiter: int,
    tol: float,
    step_sizes: np.ndarray | None = None,
) -> PrResult:
    """KL projection of the documents' posteriors onto the agreement set of their concepts
    (module docstring), by projected gradient ascent on the dual from ``lam_pos``/``lam_neg``.

    The gradient is scaled by the diagonal of the dual's curvature, ``h = Var f_d(t) +
    Var f_0(t)`` under the current projection (a topic few tokens can be in needs a far larger
    step than one many are in), and each concept has a step size η <= 1 on top, starting at
    ``step_sizes`` (a previous projection's) or 1: a step
    ``λ± ← max(0, λ± + η (±φ − ε) / h)`` is accepted when the dual objective D rose enough,
    ``D(λ') >= D(λ) + ∇D·Δ − Σ h Δ² / (2η)``, and then η doubles (up to 1); otherwise the
    concept keeps λ and halves η. A concept stops when no constraint of it is violated by
    more than ``tol``; all stop after ``maxiter`` steps. Each step evaluates the dual only on
    the documents of the concepts still going, so the concepts are independent: the result
    does not depend on which concepts share a block.

    Parameters
    ----------
    x : csr_matrix of shape (n, m)
        The documents' counts, sorted by concept (``doc_group`` ascending).
    doc_group : ndarray of shape (n,)
    theta : ndarray of shape (n, T)
    words : ndarray of shape (m, T)
    lam_pos, lam_neg : ndarray of shape (n, T)
        Start of the dual variables (>= 0).
    epsilon, maxiter, tol
        ε of the constraints, step cap and violation tolerance.
    step_sizes : ndarray of shape (n,), optional
        Start of each concept's η (read at its first document); 0 or None: 1.
    """
    full = _Projection(x, doc_group, theta, words, epsilon)
    group = full.doc_group
    lp, ln = lam_pos.copy(), lam_neg.copy()
    cur = full.evaluate(lp, ln)
    eta = np.ones(full.n_groups)
    if step_sizes is not None and eta.size:
        starts = np.r_[0, np.flatnonzero(np.diff(group)) + 1]
        given = np.asarray(step_sizes, dtype=np.float64)[starts]
        eta = np.where(given > 0, given, eta)
    active = cur.violation > tol
    steps = 0
    while steps < maxiter and active.any():
        docs = np.flatnonzero(active[group])
        gs = np.flatnonzero(active)
        sub = _Projection(x[docs], group[docs], theta[docs], words, epsilon)
        d_phi, h = cur.phi[docs], cur.curvature[docs]
        step = eta[gs][sub.doc_group][:, None] / h
        movable = (~sub.is_first)[:, None]
        grad_p, grad_n = d_phi - epsilon, -d_phi - epsilon
        lp_new = np.where(movable, np.maximum(0.0, lp[docs] + step * grad_p), lp[docs])
        ln_new = np.where(movable, np.maximum(0.0, ln[docs] + step * grad_n), ln[docs])
        new = sub.evaluate(lp_new, ln_new)
        dp, dn = lp_new - lp[docs], ln_new - ln[docs]
        lin = sub.per_group((grad_p * dp + grad_n * dn).sum(axis=1))
        quad = sub.per_group((h * (dp * dp + dn * dn)).sum(axis=1))
        old = cur.objective[gs]
        bound = old + lin - quad / (2.0 * eta[gs])
        ok = new.objective >= bound - 1e-12 * np.abs(old)
        take = ok[sub.doc_group]
        at = docs[take]
        lp[at], ln[at] = lp_new[take], ln_new[take]
        cur.tilted[at], cur.phi[at] = new.tilted[take], new.phi[take]
        cur.curvature[at] = new.curvature[take]
        cur.objective[gs[ok]] = new.objective[ok]
        cur.violation[gs[ok]] = new.violation[ok]
        eta[gs] = np.where(ok, np.minimum(1.0, 2.0 * eta[gs]), 0.5 * eta[gs])
        active &= cur.violation > tol
        steps += 1
    worst = max(float(cur.violation.max()), 0.0) if full.n_groups else 0.0
    return PrResult(cur.tilted, lp, ln, eta[group] if eta.size else eta, steps, worst)
