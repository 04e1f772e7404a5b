r"""S2Net (Yih, Toutanova, Platt and Meek 2011): a linear projection of TF-IDF vectors trained
as a siamese network on related and unrelated document pairs, from OPCA's projection.

Model: one map W (p, r) over the stacked vocabularies (``W_l``, its rows of language l, maps
a TF-IDF row of language l as ``u = x W_l``). For a *related* pair (a, b) (two documents of
one concept in different languages) and an *unrelated* pair (a, n) (n a document in b's
language of another concept), with ``Δ = cos(u_a, u_b) − cos(u_a, u_n)``, the loss is

.. math::  ℓ = \log(1 + e^{-γΔ}),\qquad
           \frac{∂ℓ}{∂Δ} = \frac{-γ}{1 + e^{γΔ}},\qquad
           \frac{∂\cos(u, v)}{∂u} = \frac{v}{‖u‖‖v‖} − \cos(u, v)\frac{u}{‖u‖^2},

and the gradient with respect to ``W_l`` is ``X_lᵀ G_l``, G holding each document's
``∂ℓ/∂u`` summed over the triples it is in (a zero vector has cosine 0 and no gradient).

Training (mini-batch gradient descent on a :class:`~pipeline.linalg.groups.GroupedCorpus` of
TF-IDF rows):

* every epoch the training concepts are shuffled (seeded by ``seed`` and the epoch) into
  mini-batches of ``batch_concepts``; each ordered pair of a batch concept's documents is a
  related pair, with ``negatives`` unrelated pairs drawn from the batch's other concepts in
  the same block (seeded by seed, epoch, batch and block, so every engine draws the same);
* one step = one pass over the blocks: each block computes the loss and the gradient of its
  share of the batch (a compact partial over the terms its batch documents use), the driver
  adds them and moves W by ``−rate × mean gradient``;
* W starts from OPCA's map scaled by one number so that training documents project to unit
  median norm (cosines do not change; the learning rate then means the same on any corpus);
* each learning rate of ``learning_rates`` runs from that start for ``max(epochs)`` epochs,
  scored on the validation documents (P@1, cosine) after each epoch of ``epochs`` (0: the
  start itself); the best (rate, epochs) is the model. A single candidate needs no
  validation documents. The candidates of that P@1 include ``distractors`` training
  documents per language (a seeded sample, :meth:`GroupedCorpus.sample_rows`), as the
  evaluation's pool does: among the validation documents alone, a map that learns its
  training documents looks better than the evaluation will find it.

Checkpoints (a :class:`~pipeline.linalg.checkpoint.CheckpointStore`): W, the best W so far and
the position (rate, epoch), after every epoch; a rerun resumes at the next epoch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from pipeline.baselines.common import BaselineResult, check_params, stacked_components
from pipeline.baselines.params import S2NET_DEFAULTS as _S
from pipeline.baselines.params import S2NetParams
from pipeline.errors import ConfigError
from pipeline.linalg.checkpoint import CheckpointStore, array_digest
from pipeline.linalg.groups import GroupBlock, GroupedCorpus
from pipeline.linalg.monitor import ValidationSet
from pipeline.linalg.params import CR5_DEFAULTS as _D

__all__ = ["batch_loss", "batch_pairs", "fit_s2net", "triplet_loss"]

logger = logging.getLogger(__name__)

STATE = "s2net"
#: Norms below this count as zero vectors (cosine 0, no gradient).
_TINY = 1e-12


def triplet_loss(
    u_a: np.ndarray, u_b: np.ndarray, u_n: np.ndarray, gamma: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """S2Net's loss of triples (anchor, related, unrelated) and its gradients.

    Parameters
    ----------
    u_a, u_b, u_n : ndarray of shape (k, r)
        Projected anchors, related and unrelated documents.
    gamma : float

    Returns
    -------
    loss : ndarray of shape (k,)
        ``log(1 + exp(−γ(cos(a, b) − cos(a, n))))``.
    g_a, g_b, g_n : ndarray of shape (k, r)
        Its gradient with respect to each of the three vectors.
    """
    na = np.linalg.norm(u_a, axis=1)
    nb = np.linalg.norm(u_b, axis=1)
    nn = np.linalg.norm(u_n, axis=1)

    def cos_and_grads(u, v, nu, nv):
        ok = (nu > _TINY) & (nv > _TINY)
        inv = np.where(ok, 1.0 / np.where(ok, nu * nv, 1.0), 0.0)
        c = np.einsum("ij,ij->i", u, v) * inv
        inv_u2 = np.where(ok, 1.0 / np.where(ok, nu * nu, 1.0), 0.0)
        inv_v2 = np.where(ok, 1.0 / np.where(ok, nv * nv, 1.0), 0.0)
        du = v * inv[:, None] - (c * inv_u2)[:, None] * u
        dv = u * inv[:, None] - (c * inv_v2)[:, None] * v
        return c, du, dv

    c_ab, da_ab, db = cos_and_grads(u_a, u_b, na, nb)
    c_an, da_an, dn = cos_and_grads(u_a, u_n, na, nn)
    delta = c_ab - c_an
    loss = np.logaddexp(0.0, -gamma * delta)
    dl = -gamma / (1.0 + np.exp(np.clip(gamma * delta, -700.0, 700.0)))
    return loss, dl[:, None] * (da_ab - da_an), dl[:, None] * db, -dl[:, None] * dn


def batch_pairs(
    doc_group: np.ndarray, doc_lang: np.ndarray, negatives: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The triples of a batch's documents (sorted by group): every ordered pair (a, b) of one
    group's documents, ``negatives`` times, each with a document n of b's language from
    another group drawn uniformly; pairs whose language has no other document are dropped.

    Returns
    -------
    a, b, n : ndarray of int64, shape (k,)
        Positions in the batch's documents.
    """
    m = doc_group.size
    firsts, seconds = [], []
    for off in range(1, m):
        i = np.arange(m - off)
        same = doc_group[i] == doc_group[i + off]
        if not same.any():
            break
        firsts.append(i[same])
        seconds.append(i[same] + off)
    if not firsts:
        e = np.zeros(0, dtype=np.int64)
        return e, e, e
    a = np.concatenate(firsts + seconds)
    b = np.concatenate(seconds + firsts)
    a, b = np.repeat(a, negatives), np.repeat(b, negatives)
    order = np.argsort(doc_lang, kind="stable")
    lang_sorted = doc_lang[order]
    rank = np.empty(m, dtype=np.int64)
    rank[order] = np.arange(m)
    lo = np.searchsorted(lang_sorted, doc_lang[b], side="left")
    count = np.searchsorted(lang_sorted, doc_lang[b], side="right") - lo
    keep = count >= 2
    a, b, lo, count = a[keep], b[keep], lo[keep], count[keep]
    draw = rng.integers(0, np.maximum(count - 1, 1))
    pos_b = rank[b] - lo
    draw = draw + (draw >= pos_b)
    return a, b, order[lo + draw]


def batch_loss(
    block: GroupBlock, shared: Mapping[str, Any]
) -> tuple[float, int, np.ndarray, np.ndarray]:
    """The loss and gradient of a block's share of one mini-batch.

    Parameters
    ----------
    block : GroupBlock
        TF-IDF rows.
    shared : mapping
        ``w`` (p, r) the map, ``batch_of`` (K,) each concept's batch this epoch, ``batch``,
        ``epoch``, ``seed``, ``gamma``, ``negatives``.

    Returns
    -------
    loss : float
        Sum over the block's triples.
    triples : int
    ids : ndarray of int64, shape (m',)
        The stacked term ids the batch's documents use.
    gradient : ndarray of shape (m', r)
        The loss sum's gradient with respect to those rows of w.
    """
    groups = np.flatnonzero(shared["batch_of"][block.concepts] == shared["batch"])
    docs = np.flatnonzero(np.isin(block.doc_group, groups))
    rng = np.random.default_rng(
        [shared["seed"], shared["epoch"], shared["batch"], block.index, 20110523]
    )
    a, b, n = batch_pairs(block.doc_group[docs], block.doc_lang[docs], shared["negatives"], rng)
    if a.size == 0:
        return 0.0, 0, np.zeros(0, dtype=np.int64), np.zeros((0, shared["w"].shape[1]))
    xb = block.x[docs]
    used, local = np.unique(xb.indices, return_inverse=True)
    xs = sp.csr_matrix((xb.data, local.astype(np.int64), xb.indptr), shape=(docs.size, used.size))
    w = np.asarray(shared["w"][block.cols[used]], dtype=np.float64)
    u = np.asarray(xs @ w)
    loss, g_a, g_b, g_n = triplet_loss(u[a], u[b], u[n], shared["gamma"])
    g = np.zeros_like(u)
    np.add.at(g, a, g_a)
    np.add.at(g, b, g_b)
    np.add.at(g, n, g_n)
    return float(loss.sum()), int(a.size), block.cols[used], np.asarray(xs.T @ g)


def _step_task(block: GroupBlock, state: Any, shared: Mapping[str, Any]) -> tuple:
    loss, k, ids, grad = batch_loss(block, shared)
    return state, (ids, grad) if k else None, {"loss": loss, "triples": k}


def _norms_task(block: GroupBlock, state: Any, shared: Mapping[str, Any]) -> tuple:
    """Norms of the block's projected documents, and its concepts."""
    u = np.asarray(block.x @ np.asarray(shared["w"][block.cols], dtype=np.float64))
    return state, None, {"norms": np.linalg.norm(u, axis=1), "concepts": block.concepts}


def _check(params: dict[str, Any], corpus: Any, validation: Any, init: Any) -> None:
    declared = {
        "r": params["r"],
        "learning_rates": params["learning_rates"],
        "epochs": params["epochs"],
        "batch_concepts": params["batch_concepts"],
        "scale": params["gamma"],
        "negatives": params["negatives"],
        "seed": params["seed"],
    }
    check_params("s2net", declared, own=S2NetParams)
    if params["distractors"] < 0:
        raise ConfigError(f"s2net: distractors must be >= 0; got {params['distractors']}")
    if not params["learning_rates"] or not params["epochs"]:
        raise ConfigError("s2net: learning_rates and epochs must each name at least one value")
    if not isinstance(corpus, GroupedCorpus) or corpus.weighting != "tfidf":
        raise ValueError("s2net: corpus must be a GroupedCorpus of TF-IDF rows")
    if len(params["learning_rates"]) * len(set(params["epochs"])) > 1 and validation is None:
        raise ConfigError(
            "s2net: choosing among several learning rates / epochs needs validation documents; "
            "set features.heldout_concepts: splits, or give one train.s2net.learning_rates value "
            "and one train.s2net.epochs value"
        )
    langs = list(corpus.languages)
    if list(init) != langs:
        raise ValueError(f"s2net: init has languages {list(init)}, the corpus {langs}")
    for lang in langs:
        shape = (corpus.layout.sizes[langs.index(lang)], params["r"])
        if np.shape(init[lang]) != shape:
            raise ValueError(f"s2net: init[{lang!r}] has shape {np.shape(init[lang])}, not {shape}")


class _S2NetFit:
    """The epochs of every learning rate, with scoring, selection and checkpoints."""

    def __init__(self, corpus, params, validation, store) -> None:
        self.corpus, self.p, self.validation, self.store = corpus, params, validation, store
        self.distractor_rows = None
        if validation is not None and params["distractors"]:
            self.distractor_rows = corpus.sample_rows(params["distractors"])
        self.records: list[dict[str, Any]] = []
        self.best: dict[str, Any] | None = None
        self.best_w: np.ndarray | None = None

    def score(self, w: np.ndarray) -> float | None:
        if self.validation is None:
            return None
        split = self.corpus.layout.split(w)
        return self.validation.p_at_1(split, distractor_rows=self.distractor_rows)[0]

    def consider(self, w: np.ndarray, rate_index: int, epoch: int, loss: float | None) -> None:
        candidate = epoch in self.p["epochs"]
        score = self.score(w) if candidate else None
        rec = {"rate": self.p["learning_rates"][rate_index], "epoch": epoch, "loss": loss}
        rec["validation_p_at_1"] = score
        self.records.append(rec)
        if candidate and (self.best is None or (score is not None and score > self.best["score"])):
            self.best = {"rate_index": rate_index, "epoch": epoch, "score": score}
            self.best_w = w.copy()
        logger.info(
            "s2net rate=%g epoch=%d loss=%s validation P@1=%s",
            rec["rate"],
            epoch,
            "-" if loss is None else f"{loss:.6g}",
            "-" if score is None else f"{score:.4f}",
        )

    def epoch(self, w: np.ndarray, rate: float, epoch: int, concepts: np.ndarray) -> float:
        """One epoch of mini-batch steps from ``w`` (in place); the mean loss."""
        p, corpus = self.p, self.corpus
        rng = np.random.default_rng([p["seed"], epoch, 2011])
        perm = rng.permutation(concepts.size)
        batch_of = np.full(corpus.n_concepts, -1, dtype=np.int64)
        batch_of[concepts[perm]] = np.arange(concepts.size) // p["batch_concepts"]
        n_batches = -(-concepts.size // p["batch_concepts"])
        losses, triples = 0.0, 0
        for b in range(n_batches):
            shared = {
                "w": w.astype(np.float32),
                "batch_of": batch_of,
                "batch": b,
                "epoch": epoch,
                "seed": p["seed"],
                "gamma": p["gamma"],
                "negatives": p["negatives"],
            }
            out = corpus.step(
                _step_task,
                shared,
                n_rows=corpus.n_terms,
                width=p["r"],
                description=f"s2net/epoch{epoch}/batch{b}",
            )
            k = sum(e["triples"] for e in out.extras)
            if k:
                w -= rate * out.total / k
            losses += sum(e["loss"] for e in out.extras)
            triples += k
        return losses / max(triples, 1)

    def save(self, w: np.ndarray, rate_index: int, epoch: int) -> None:
        if self.store is None:
            return
        arrays = {"w": w}
        if self.best_w is not None:
            arrays["best_w"] = self.best_w
        meta = {
            "rate_index": rate_index,
            "epoch": epoch,
            "records": self.records,
            "best": self.best,
        }
        self.store.save(STATE, arrays, meta)


def _start(corpus: GroupedCorpus, init: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """OPCA's map stacked and scaled to unit median norm of the projected training rows, and
    the training concepts."""
    w0 = corpus.layout.join({lang: np.asarray(init[lang], dtype=np.float64) for lang in init})
    out = corpus.step(_norms_task, {"w": w0.astype(np.float32)}, description="s2net/norms")
    norms = np.concatenate([e["norms"] for e in out.extras])
    concepts = np.unique(np.concatenate([e["concepts"] for e in out.extras]))
    med = float(np.median(norms[norms > 0])) if np.any(norms > 0) else 1.0
    return w0 / med, concepts


def fit_s2net(
    corpus: GroupedCorpus,
    init: Mapping[str, np.ndarray],
    *,
    r: int = _D.r,
    learning_rates: Sequence[float] = tuple(_S.learning_rates),
    epochs: Sequence[int] = tuple(_S.epochs),
    batch_concepts: int = _S.batch_concepts,
    gamma: float = _S.scale,
    negatives: int = _S.negatives,
    validation: ValidationSet | None = None,
    distractors: int = 0,
    checkpoint: CheckpointStore | None = None,
    seed: int = _D.seed,
) -> BaselineResult:
    """Fit S2Net from ``init`` (module docstring).

    Parameters
    ----------
    corpus : GroupedCorpus
        TF-IDF rows (``weighting == "tfidf"``) grouped by concept.
    init : mapping of str to ndarray of shape (p_l, r)
        The start, per language in the corpus' order (OPCA's components).
    r : int
        Embedding dimension (the columns of ``init``).
    learning_rates : sequence of float
    epochs : sequence of int
        Epoch counts compared on validation (0: the start).
    batch_concepts : int
        Concepts per mini-batch.
    gamma : float
        Loss scale γ.
    negatives : int
        Unrelated pairs per related pair.
    validation : ValidationSet, optional
        TF-IDF rows of held-out concepts' documents (needed for more than one candidate).
    distractors : int
        Training documents per language added to the validation P@1's candidates (0: the
        validation documents only).
    checkpoint : CheckpointStore, optional
    seed : int
        Seeds the mini-batches and the negatives.

    Returns
    -------
    BaselineResult
        ``components[l]``: ndarray of shape (p_l, r), float32; ``eigenvalues``: empty.
    """
    params = {
        "r": r,
        "learning_rates": [float(x) for x in learning_rates],
        "epochs": sorted({int(e) for e in epochs}),
        "batch_concepts": batch_concepts,
        "gamma": gamma,
        "negatives": negatives,
        "seed": seed,
        "distractors": int(distractors),
    }
    _check(params, corpus, validation, init)
    t_start = time.perf_counter()
    steps0 = corpus.steps
    w0, concepts = _start(corpus, init)
    store = None
    if checkpoint is not None:
        store = checkpoint.bind(
            {
                "method": "s2net",
                # the epochs scored do not change the iterates: a longer run may resume
                "params": {k: v for k, v in params.items() if k != "epochs"},
                "languages": list(corpus.languages),
                "terms": list(corpus.layout.sizes),
                "documents": corpus.n_docs,
                "start": array_digest(w0),
            }
        )
    fit = _S2NetFit(corpus, params, validation, store)
    first_rate, first_epoch, w = 0, 0, None
    saved = store.load(STATE) if store is not None else None
    if saved is not None:
        arrays, meta = saved
        fit.records, fit.best, fit.best_w = meta["records"], meta["best"], arrays.get("best_w")
        if fit.best is not None and fit.best["epoch"] not in params["epochs"]:
            fit.best, fit.best_w = None, None  # scored for another epoch list: not a candidate
        first_rate, first_epoch, w = meta["rate_index"], meta["epoch"], arrays["w"]
        logger.info("s2net: resumed after rate %d, epoch %d", first_rate, first_epoch)
    last = max(params["epochs"])
    for ri in range(first_rate, len(params["learning_rates"])):
        rate = params["learning_rates"][ri]
        if w is None or ri != first_rate:
            w, first_epoch = w0.copy(), 0
            fit.consider(w, ri, 0, None)
        for epoch in range(first_epoch + 1, last + 1):
            loss = fit.epoch(w, rate, epoch, concepts)
            fit.consider(w, ri, epoch, loss)
            fit.save(w, ri, epoch)
        w = None
    best = fit.best
    seconds = round(time.perf_counter() - t_start, 4)
    history = {
        "method": "s2net",
        "params": params,
        "epochs_run": fit.records,
        "chosen": {
            "learning_rate": params["learning_rates"][best["rate_index"]],
            "epochs": best["epoch"],
            "validation_p_at_1": best["score"],
        },
        "training_concepts": int(concepts.size),
        "validation_distractors": {
            lang: int(x.shape[0]) for lang, x in (fit.distractor_rows or {}).items()
        },
        "blocks": corpus.n_blocks,
        "steps": corpus.steps - steps0,
        "timings": {"total": seconds},
    }
    logger.info(
        "s2net: chose rate %g after %d epochs (validation P@1 %s) in %.2fs",
        history["chosen"]["learning_rate"],
        best["epoch"],
        best["score"],
        seconds,
    )
    return BaselineResult(
        components=stacked_components(corpus.layout, fit.best_w),
        eigenvalues=np.zeros(0),
        history=history,
    )
