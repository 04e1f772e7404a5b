"""JPLSA and CPLSA: the distributed EM against an exact single-process reference written with
plain loops, CPLSA's projection against its constraints and a general-purpose solver,
folding-in, checkpoint/resume in-process, and parameter checks before any work.

(The resume of a real killed training job and the evaluation are in
tests/test_classic_methods.py.)
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import scipy.optimize
import scipy.sparse as sp

from pipeline.backends.local_groups import LocalGroupedCorpus
from pipeline.baselines import fit_cplsa, fit_jplsa
from pipeline.baselines.topics import fold_in, project_posterior
from pipeline.errors import ConfigError
from pipeline.io.checkpoints import CheckpointDirectory
from pipeline.linalg.groups import GroupedCorpus, build_blocks

LANGS = ("en", "de", "fr")
VOCAB = {"en": 7, "de": 6, "fr": 5}


def tiny_corpus(seed: int = 0) -> dict[str, tuple[sp.csr_matrix, np.ndarray]]:
    """Three languages, 12 concepts: most in en and de, some in fr too (groups of 3), two in
    one language only; counts from 2 planted topics."""
    rng = np.random.default_rng(seed)
    topics = {lang: rng.dirichlet(np.full(p, 0.3), size=2) for lang, p in VOCAB.items()}
    mix = rng.dirichlet([0.5, 0.5], size=12)
    members = {
        "en": [k for k in range(12) if k != 11],
        "de": [k for k in range(12) if k != 10],
        "fr": [0, 3, 4, 7, 9],
    }
    out = {}
    for lang, concepts in members.items():
        rows = []
        for k in concepts:
            z = rng.choice(2, size=int(rng.integers(6, 15)), p=mix[k])
            words = [rng.choice(VOCAB[lang], p=topics[lang][t]) for t in z]
            rows.append(np.bincount(words, minlength=VOCAB[lang]).astype(float))
        out[lang] = (sp.csr_matrix(np.array(rows)), np.array(concepts))
    return out


# --- the reference: one process, plain loops ---------------------------------------------------


class Reference:
    """MAP EM of JPLSA / CPLSA exactly as pipeline/baselines/topics.py specifies it, written
    with loops over units, words and topics (no sparse products, no blocks)."""

    def __init__(self, data, n_topics, *, joint, topic_prior, word_prior, init_mix, pr):
        self.t = n_topics
        self.joint = joint
        self.a_theta, self.a_beta = topic_prior, word_prior
        self.pr = pr  # (epsilon, maxiter, tol)
        self.offsets, off = {}, 0
        for lang in LANGS:
            self.offsets[lang] = off
            off += VOCAB[lang]
        self.p = off
        # documents: (lang, concept, {global word: count})
        self.docs = []
        for lang in LANGS:
            x, concepts = data[lang]
            for i, k in enumerate(concepts):
                row = x.getrow(i)
                counts = {
                    self.offsets[lang] + int(j): float(v)
                    for j, v in zip(row.indices, row.data, strict=True)
                }
                self.docs.append((lang, int(k), counts))
        self.concepts = sorted({k for _, k, _ in self.docs})
        self.groups = {
            k: sorted(
                (d for d in range(len(self.docs)) if self.docs[d][1] == k),
                key=lambda d: LANGS.index(self.docs[d][0]),
            )
            for k in self.concepts
        }
        self.beta = self.initial(init_mix)  # beta[t][w]
        units = self.concepts if joint else range(len(self.docs))
        self.theta = {u: [1.0 / self.t] * self.t for u in units}
        self.lam = {d: ([0.0] * self.t, [0.0] * self.t) for d in range(len(self.docs))}
        self.eta = {k: 1.0 for k in self.concepts}

    def lang_words(self, lang):
        return range(self.offsets[lang], self.offsets[lang] + VOCAB[lang])

    def initial(self, mix):
        freq = [0.0] * self.p
        for _, _, counts in self.docs:
            for w, c in counts.items():
                freq[w] += c
        total = sum(freq)
        beta = [[0.0] * self.p for _ in range(self.t)]
        for lang in LANGS:
            words = list(self.lang_words(lang))
            ranked = sorted(words, key=lambda w: (-freq[w], w))
            dealt = {w: i % self.t for i, w in enumerate(ranked)}
            share = sum(freq[w] for w in words) / total if self.joint else 1.0
            for t in range(self.t):
                mine = [w for w in words if dealt[w] == t]
                for w in words:
                    own = (1.0 - mix) / len(mine) if w in mine else 0.0
                    beta[t][w] = (own + mix / len(words)) * share
        return self.normalised(beta)

    def normalised(self, beta):
        for t in range(self.t):
            parts = [range(self.p)] if self.joint else [self.lang_words(lg) for lg in LANGS]
            for part in parts:
                s = sum(beta[t][w] for w in part)
                for w in part:
                    beta[t][w] /= s
        return beta

    def unit_counts(self, u):
        if self.joint:
            merged = {}
            for d in self.groups[u]:
                merged.update(self.docs[d][2])
            return merged
        return self.docs[u][2]

    # --- CPLSA's projection of one concept ------------------------------------------------
    def tilted(self, k, lam):
        docs = self.groups[k]
        first = docs[0]
        n = {d: sum(self.docs[d][2].values()) for d in docs}
        out = {}
        for d in docs:
            if d == first:
                a = [sum((lam[e][0][t] - lam[e][1][t]) / n[first] for e in docs[1:]) for t in
                     range(self.t)]  # fmt: skip
            else:
                a = [-(lam[d][0][t] - lam[d][1][t]) / n[d] for t in range(self.t)]
            top = max(a)
            raw = [self.theta[d][t] * math.exp(a[t] - top) for t in range(self.t)]
            s = sum(raw)
            out[d] = ([v / s for v in raw], math.log(s) + top)
        return out

    def dual(self, k, lam):
        """(θ̃, φ, h, D, violation) of concept k at λ."""
        eps = self.pr[0]
        docs = self.groups[k]
        tilt = self.tilted(k, lam)
        frac, var, ll = {}, {}, 0.0
        for d in docs:
            th, log_norm = tilt[d]
            counts = self.docs[d][2]
            n_d = sum(counts.values())
            f, v = [0.0] * self.t, [0.0] * self.t
            for w, c in counts.items():
                den = sum(th[t] * self.beta[t][w] for t in range(self.t))
                ll += c * math.log(den)
                for t in range(self.t):
                    q = th[t] * self.beta[t][w] / den
                    f[t] += c * q / n_d
                    v[t] += c * q * (1 - q) / n_d**2
            ll += n_d * log_norm
            frac[d], var[d] = f, v
        first = docs[0]
        phi = {d: [frac[d][t] - frac[first][t] for t in range(self.t)] for d in docs[1:]}
        h = {d: [max(var[d][t] + var[first][t], 1e-12) for t in range(self.t)] for d in docs[1:]}
        penalty = eps * sum(sum(lam[d][0]) + sum(lam[d][1]) for d in docs)
        viol = max((abs(x) - eps for d in docs[1:] for x in phi[d]), default=-eps)
        return {d: tilt[d][0] for d in docs}, phi, h, -ll - penalty, viol

    def project(self, k):
        eps, maxiter, tol = self.pr
        docs = self.groups[k]
        lam = {d: (list(self.lam[d][0]), list(self.lam[d][1])) for d in docs}
        tilted, phi, h, obj, viol = self.dual(k, lam)
        steps = 0
        while steps < maxiter and viol > tol:
            eta = self.eta[k]
            new = {docs[0]: lam[docs[0]]}
            lin = quad = 0.0
            for d in docs[1:]:
                lp, ln = [], []
                for t in range(self.t):
                    gp, gn = phi[d][t] - eps, -phi[d][t] - eps
                    p_new = max(0.0, lam[d][0][t] + eta * gp / h[d][t])
                    n_new = max(0.0, lam[d][1][t] + eta * gn / h[d][t])
                    dp, dn = p_new - lam[d][0][t], n_new - lam[d][1][t]
                    lin += gp * dp + gn * dn
                    quad += h[d][t] * (dp * dp + dn * dn)
                    lp.append(p_new)
                    ln.append(n_new)
                new[d] = (lp, ln)
            t2, phi2, h2, obj2, viol2 = self.dual(k, new)
            if obj2 >= obj + lin - quad / (2 * eta) - 1e-12 * abs(obj):
                lam, tilted, phi, h, obj, viol = new, t2, phi2, h2, obj2, viol2
                self.eta[k] = min(1.0, 2 * eta)
            else:
                self.eta[k] = eta / 2
            steps += 1
        for d in docs:
            self.lam[d] = lam[d]
        return tilted

    # --- one EM iteration -------------------------------------------------------------------
    def iterate(self):
        if self.joint:
            q_theta = self.theta
        else:
            q_theta = {}
            for k in self.concepts:
                q_theta.update(self.project(k))
        word_counts = [[0.0] * self.p for _ in range(self.t)]
        ll = 0.0
        new_theta = {}
        for u, theta in self.theta.items():
            counts = self.unit_counts(u)
            n_u = [0.0] * self.t
            for w, c in counts.items():
                ll += c * math.log(sum(theta[t] * self.beta[t][w] for t in range(self.t)))
                den = sum(q_theta[u][t] * self.beta[t][w] for t in range(self.t))
                for t in range(self.t):
                    q = q_theta[u][t] * self.beta[t][w] / den
                    n_u[t] += c * q
                    word_counts[t][w] += c * q
            a = [n + self.a_theta - 1 for n in n_u]
            new_theta[u] = [v / sum(a) for v in a]
        prior = (self.a_theta - 1) * sum(math.log(v) for th in self.theta.values() for v in th)
        prior += (self.a_beta - 1) * sum(math.log(v) for row in self.beta for v in row)
        self.theta = new_theta
        self.beta = self.normalised(
            [[word_counts[t][w] + self.a_beta - 1 for w in range(self.p)] for t in range(self.t)]
        )
        return ll, ll + prior

    def language_words(self, lang):
        words = list(self.lang_words(lang))
        out = np.array([[self.beta[t][w] for t in range(self.t)] for w in words])
        return out / out.sum(axis=0)


PARAMS = {"topic_prior": 1.2, "word_prior": 1.05, "init_mix": 0.4}
PR = {"pr_epsilon": 0.02, "pr_maxiter": 6, "pr_tol": 1e-3}


def local_corpus(data, n_blocks=3):
    return LocalGroupedCorpus.from_matrices(data, 12, n_blocks=n_blocks, weighting="counts")


@pytest.mark.parametrize("method", ["jplsa", "cplsa"])
def test_distributed_em_follows_the_exact_reference(method):
    """Same log-likelihood and log-posterior trajectory and the same topic-word matrices as
    the loop-by-loop reference, with the corpus cut in 3 blocks (the per-block E-step, the
    driver's M-step) and in 1."""
    data = tiny_corpus()
    joint = method == "jplsa"
    pr = (PR["pr_epsilon"], PR["pr_maxiter"], PR["pr_tol"])
    ref = Reference(data, 3, joint=joint, **PARAMS, pr=pr)
    expected = [ref.iterate() for _ in range(6)]
    fit = fit_jplsa if joint else fit_cplsa
    extra = {} if joint else PR
    for n_blocks in (3, 1):
        res = fit(local_corpus(data, n_blocks), r=3, maxiter=6, tol=0.0, **PARAMS, **extra)
        recs = res.history["iterations"]
        got = [(r["log_likelihood"], r["log_posterior"]) for r in recs]
        np.testing.assert_allclose(got, expected, rtol=1e-10)
        for lang in LANGS:
            np.testing.assert_allclose(res.components[lang], ref.language_words(lang), atol=1e-6)
        assert res.similarity == "l1" and res.folding_in == {"steps": 1, "topic_prior": 1.2}
    if joint:  # MAP EM never lowers the log posterior
        post = [e[1] for e in expected]
        assert all(b >= a - 1e-9 for a, b in itertools.pairwise(post))
    else:  # the projection did work: some concepts needed steps
        assert max(r["pr_steps"] for r in recs) > 0


def test_em_stops_on_the_tolerance_and_records_why():
    data = tiny_corpus()
    res = fit_jplsa(local_corpus(data), r=2, maxiter=500, tol=1e-6)
    stop = res.history["stopping"]
    assert stop["stopped_by"] == "tolerance" and res.history["n_iter"] < 500
    post = [r["log_posterior"] for r in res.history["iterations"]]
    assert abs(post[-1] - post[-2]) <= 1e-6 * abs(post[-1])


# --- posterior regularisation ------------------------------------------------------------------


def projection_problem(seed=1, n_topics=3):
    """One concept with three documents (first one is the reference), random θ and β."""
    rng = np.random.default_rng(seed)
    x = sp.csr_matrix(rng.integers(0, 4, size=(3, 8)).astype(float))
    x[0, 0] += 1  # no empty document
    x.eliminate_zeros()
    theta = rng.dirichlet(np.ones(n_topics), size=3)
    words = rng.dirichlet(np.ones(8), size=n_topics).T.copy()  # (m, T), columns sum to 1
    return x, np.zeros(3, dtype=np.int64), theta, words


def posteriors(x, tilted, words):
    """q[(d, w)] of every nonzero: the posterior over topics under θ̃."""
    out = {}
    for d in range(x.shape[0]):
        row = x.getrow(d)
        for w in row.indices:
            q = tilted[d] * words[w]
            out[(d, int(w))] = q / q.sum()
    return out


def fractions(x, q, n_topics):
    f = np.zeros((x.shape[0], n_topics))
    for (d, w), qq in q.items():
        f[d] += x[d, w] * qq
    return f / np.asarray(x.sum(axis=1))


def test_projection_meets_its_constraints_and_is_a_distribution():
    x, group, theta, words = projection_problem()
    eps, tol = 0.01, 1e-7
    zeros = np.zeros_like(theta)
    before = fractions(x, posteriors(x, theta, words), 3)
    assert np.abs(before[1:] - before[0]).max() > 5 * eps  # the constraint binds
    pr = project_posterior(x, group, theta, words, zeros, zeros, epsilon=eps, maxiter=500, tol=tol)
    q = posteriors(x, pr.tilted, words)
    for qq in q.values():
        assert np.all(qq >= 0) and abs(qq.sum() - 1) < 1e-12
    f = fractions(x, q, 3)
    assert np.abs(f[1:] - f[0]).max() <= eps + tol
    assert pr.max_violation <= tol and np.all(pr.lam_pos >= 0) and np.all(pr.lam_neg >= 0)
    assert np.all(pr.lam_pos[0] == 0) and np.all(pr.lam_neg[0] == 0)


def test_projection_is_the_kl_projection():
    """The projected posterior minimises Σ n KL(q || p) over the feasible set: compare with
    SLSQP on the posteriors themselves (an independent, generic solver)."""
    x, group, theta, words = projection_problem(seed=3, n_topics=2)
    eps = 0.02
    zeros = np.zeros_like(theta)
    pr = project_posterior(
        x, group, theta, words, zeros, zeros, epsilon=eps, maxiter=2000, tol=1e-9
    )
    p = posteriors(x, theta, words)
    keys = sorted(p)
    n_t = 2
    counts = np.array([x[d, w] for d, w in keys])
    tokens = np.asarray(x.sum(axis=1)).ravel()

    def unpack(z):
        return z.reshape(len(keys), n_t)

    def kl(z):
        q = np.clip(unpack(z), 1e-300, None)
        pp = np.array([p[k] for k in keys])
        return float(np.sum(counts[:, None] * q * np.log(q / pp)))

    def frac(z):
        q = unpack(z)
        f = np.zeros((3, n_t))
        for i, (d, _) in enumerate(keys):
            f[d] += counts[i] * q[i]
        return f / tokens[:, None]

    cons = [
        {"type": "eq", "fun": lambda z: unpack(z).sum(axis=1) - 1},
        {"type": "ineq", "fun": lambda z: eps - (frac(z)[1:] - frac(z)[0]).ravel()},
        {"type": "ineq", "fun": lambda z: eps + (frac(z)[1:] - frac(z)[0]).ravel()},
    ]
    z0 = np.array([p[k] for k in keys]).ravel()
    opt = scipy.optimize.minimize(
        kl, z0, method="SLSQP", bounds=[(0, 1)] * z0.size, constraints=cons,
        options={"ftol": 1e-14, "maxiter": 1000},
    )  # fmt: skip
    assert opt.success, opt.message
    ours = posteriors(x, pr.tilted, words)
    np.testing.assert_allclose(np.array([ours[k] for k in keys]), unpack(opt.x), atol=2e-4)
    # the same minimum (SLSQP meets the constraints only to its own tolerance, so its value
    # may lie a hair below the exact one)
    assert abs(kl(np.array([ours[k] for k in keys]).ravel()) - opt.fun) <= 1e-4 * opt.fun


def test_projection_does_not_depend_on_the_other_concepts_of_a_block():
    """Concepts are projected independently: alone or side by side, the same answer."""
    x1, _, th1, words = projection_problem(seed=4)
    x2, _, th2, _ = projection_problem(seed=5)
    kw = {"epsilon": 0.01, "maxiter": 7, "tol": 1e-4}
    z = np.zeros((3, 3))
    a = project_posterior(x1, np.zeros(3, np.int64), th1, words, z, z, **kw)
    b = project_posterior(x2, np.zeros(3, np.int64), th2, words, z, z, **kw)
    both = project_posterior(
        sp.vstack([x1, x2], format="csr"),
        np.repeat([0, 1], 3),
        np.vstack([th1, th2]),
        words,
        np.zeros((6, 3)),
        np.zeros((6, 3)),
        **kw,
    )
    np.testing.assert_allclose(both.tilted, np.vstack([a.tilted, b.tilted]), rtol=1e-12)


# --- folding-in --------------------------------------------------------------------------------


def test_one_folding_in_step_is_the_closed_form_and_more_steps_are_em():
    rng = np.random.default_rng(0)
    words = rng.dirichlet(np.ones(9), size=4).T.copy()  # (9, 4)
    dense = rng.integers(0, 3, size=(5, 9)).astype(float)
    dense[4] = 0  # a document with no known term
    x = sp.csr_matrix(dense)
    prior = 1.3
    one = fold_in(x, words, steps=1, topic_prior=prior)
    post = words / words.sum(axis=1, keepdims=True)  # p(t | w) under a uniform θ
    closed = x.toarray() @ post + (prior - 1)
    closed /= closed.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(one[:4], closed[:4], rtol=1e-12)
    assert np.all(one[4] == 0)
    theta = np.full(4, 0.25)
    counts = x.toarray()[1]
    for _ in range(3):  # EM on θ alone, by hand
        q = theta[None, :] * words
        q /= q.sum(axis=1, keepdims=True)
        n_t = counts @ q + prior - 1
        theta = n_t / n_t.sum()
    np.testing.assert_allclose(fold_in(x, words, steps=3, topic_prior=prior)[1], theta, rtol=1e-12)


def test_the_model_embeds_by_folding_in_with_its_language_matrix():
    data = tiny_corpus()
    res = fit_jplsa(local_corpus(data), r=3, maxiter=4, tol=0.0, fold_in_steps=2)
    x = data["de"][0]
    emb = fold_in(x, res.components["de"].astype(np.float64), steps=2, topic_prior=1.1)
    assert np.allclose(emb.sum(axis=1), 1) and np.all(emb >= 0)
    for lang in LANGS:  # each topic one distribution over the language's words
        np.testing.assert_allclose(res.components[lang].sum(axis=0), 1, atol=1e-5)


# --- checkpoints -------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["jplsa", "cplsa"])
def test_resume_from_a_checkpoint_continues_the_same_trajectory(tmp_path, method):
    data = tiny_corpus()
    fit = fit_jplsa if method == "jplsa" else fit_cplsa
    kw = {"r": 3, "tol": 0.0, "checkpoint_seconds": 0.0, **PARAMS}
    full = fit(local_corpus(data), maxiter=7, **kw)
    store = tmp_path / "ck"
    fit(local_corpus(data), maxiter=3, checkpoint=CheckpointDirectory(store), **kw)
    resumed = fit(local_corpus(data), maxiter=7, checkpoint=CheckpointDirectory(store), **kw)
    assert resumed.history["resumed_from_iteration"] == 3
    assert [r["log_posterior"] for r in resumed.history["iterations"]] == [
        r["log_posterior"] for r in full.history["iterations"]
    ]
    for lang in LANGS:
        np.testing.assert_array_equal(resumed.components[lang], full.components[lang])


# --- parameters are checked before any work ----------------------------------------------------


class UntouchableCorpus(GroupedCorpus):
    def __init__(self, weighting="counts"):
        from pipeline.linalg.backend import TermLayout

        super().__init__(TermLayout(["en"], [5]), {"en": 3}, 3, 1, weighting, 9)

    def _run(self, *args, **kwargs):
        raise AssertionError("the corpus was used before the parameters were checked")


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"topic_prior": 0.5}, "train.jplsa.topic_prior"),
        ({"word_prior": -1.0}, "train.jplsa.word_prior"),
        ({"init_mix": 1.0}, "train.jplsa.init_mix"),
        ({"maxiter": 0}, "train.jplsa.maxiter"),
        ({"stop_rule": "eigen"}, "train.jplsa.stop_rule"),
        ({"r": 0}, "'r'"),
        ({"stop_rule": "validation"}, "needs validation documents"),
    ],
)
def test_bad_parameters_are_rejected_before_the_corpus_is_touched(kwargs, needle):
    with pytest.raises((ConfigError, ValueError), match=needle):
        fit_jplsa(UntouchableCorpus(), **kwargs)


def test_cplsa_parameters_and_the_corpus_kind_are_checked():
    with pytest.raises(ConfigError, match="train.cplsa.pr_epsilon"):
        fit_cplsa(UntouchableCorpus(), pr_epsilon=-0.1)
    with pytest.raises(ConfigError, match="train.cplsa.pr_maxiter"):
        fit_cplsa(UntouchableCorpus(), pr_maxiter=0)
    with pytest.raises(ValueError, match="term counts"):
        fit_cplsa(UntouchableCorpus("tfidf"), r=2)


def test_blocks_cut_by_concept_are_the_same_whatever_the_arrival_order():
    data = tiny_corpus()
    corpus = local_corpus(data, n_blocks=3)
    shuffled = np.random.default_rng(0).permutation(sum(x.shape[0] for x, _ in data.values()))
    lang = np.concatenate([np.full(data[lg][0].shape[0], i) for i, lg in enumerate(LANGS)])
    row = np.concatenate([np.arange(data[lg][0].shape[0]) for lg in LANGS])
    concept = np.concatenate([data[lg][1] for lg in LANGS])
    width = max(VOCAB.values())  # per-language term indices, side by side
    stacked = sp.vstack(
        [sp.csr_matrix(data[lg][0], shape=(data[lg][0].shape[0], width)) for lg in LANGS],
        format="csr",
    )[shuffled]
    blocks = build_blocks(
        lang=lang[shuffled],
        row=row[shuffled],
        concept=concept[shuffled],
        indptr=stacked.indptr,
        indices=stacked.indices,
        values=stacked.data,
        layout=corpus.layout,
        doc_offsets=corpus.doc_offsets(),
        n_blocks=3,
    )
    for a, b in zip(corpus.blocks, blocks, strict=True):
        assert a.index == b.index
        np.testing.assert_array_equal(a.doc_key, b.doc_key)
        np.testing.assert_array_equal(a.cols, b.cols)
        assert (a.x != b.x).nnz == 0
        assert set(a.concepts % 3) == {a.index}
