"""JPLSA and CPLSA (Platt, Toutanova and Yih 2010): topic models of the training concepts,
fitted by MAP EM distributed over a :class:`~pipeline.linalg.groups.GroupedCorpus`.

* **JPLSA** gives each concept one topic distribution over the union of its documents'
  tokens; a topic is one distribution over the union of the languages' vocabularies.
* **CPLSA** gives each document its own topic distribution and a topic one distribution per
  language; the documents of a concept are coupled by posterior regularisation (their
  expected topic fractions must agree within ε), the E-step's posterior being projected onto
  that set before the M-step.

The maths is :mod:`pipeline.baselines.topics`. One EM iteration is one step over the blocks:

* on each block (where it lives: the driver, or a Spark executor): the E-step of its units
  with the broadcast topic-word matrix B (p, T) and the block's own topic distributions
  (kept with the block between iterations), CPLSA's projection first; the M-step of the
  block's topic distributions; its expected word counts as a compact partial over the terms
  it uses, and its log-likelihood;
* on the driver: the partials summed by term, the M-step of B, the log posterior.

The start is deterministic (:func:`~pipeline.baselines.topics.initial_topics`), so the same
corpus and settings give the same trajectory on any engine. EM stops after ``maxiter``
iterations, when the log posterior rises by less than ``tol`` times its magnitude, or
(``stop_rule="validation"``) when P@1 of held-out validation documents, folded in and
compared by L1 distance, has not improved for ``patience`` iterations, in which case the
best iteration's B is the model.

Checkpoints (a :class:`~pipeline.linalg.checkpoint.CheckpointStore` from the caller): B, every
unit's topic distribution and CPLSA's dual variables, the best B and the history, at most every
``checkpoint_seconds`` (and after the last iteration); a rerun resumes after the saved
iteration and continues the same trajectory.

The model: per language l the topic-word matrix ``B_l`` (p_l, T), each topic normalised over
the language's words (for JPLSA the topic's distribution conditioned on language l). A
document embeds as its topic distribution by folding-in
(:func:`~pipeline.baselines.topics.fold_in`) and documents are compared by the L1 distance of
their topic distributions.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipeline.baselines.common import BaselineResult, check_params
from pipeline.baselines.params import CPLSA_DEFAULTS as _P
from pipeline.baselines.params import CplsaParams, PlsaParams
from pipeline.baselines.topics import (
    e_step,
    fold_in,
    initial_topics,
    log_prior,
    m_step_theta,
    m_step_words,
    normalise_words,
    project_posterior,
)
from pipeline.errors import ConfigError
from pipeline.linalg.backend import TermLayout
from pipeline.linalg.checkpoint import (
    CheckpointCadence,
    CheckpointMismatchError,
    CheckpointStore,
    array_digest,
)
from pipeline.linalg.groups import GroupBlock, GroupedCorpus
from pipeline.linalg.monitor import ValidationSet
from pipeline.linalg.params import CR5_DEFAULTS as _D

__all__ = ["fit_cplsa", "fit_jplsa", "language_words"]

logger = logging.getLogger(__name__)

#: Name of the EM state in the checkpoint store.
STATE = "em"


def language_words(words: np.ndarray, layout: TermLayout) -> dict[str, np.ndarray]:
    """Per language, the rows of ``words`` (p, T) normalised per topic: (p_l, T) float64."""
    return layout.split(normalise_words(words, layout, joint=False))


# --- tasks run on every block ----------------------------------------------------------------


def _frequency_task(block: GroupBlock, state: Any, shared: Any) -> tuple[Any, Any, Any]:
    """Token counts per term (compact partial of width 1) and the block's sizes."""
    freq = np.asarray(block.x.sum(axis=0)).ravel()
    return state, (block.cols, freq[:, None]), {"docs": block.n_docs, "groups": block.n_groups}


def _units(block: GroupBlock, joint: bool) -> tuple[Any, np.ndarray]:
    """The block's units and their keys: concepts (JPLSA) or documents (CPLSA)."""
    if joint:
        return block.group_rows(), block.concepts
    return block.x, block.doc_key


def _em_task(block: GroupBlock, state: Any, shared: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    """One EM iteration's work on a block: (new state, expected word counts, sums)."""
    joint = shared["joint"]
    words = np.ascontiguousarray(shared["words"][block.cols])
    n_topics = words.shape[1]
    x, _ = _units(block, joint)
    if state is None:
        state = {"theta": np.full((x.shape[0], n_topics), 1.0 / n_topics)}
    theta = state["theta"]
    extra: dict[str, Any] = {"theta_prior": log_prior(theta, shared["topic_prior"])}
    new_state: dict[str, Any] = {}
    tilted = None
    if not joint:
        zeros = np.zeros_like(theta)
        pr = project_posterior(
            x,
            block.doc_group,
            theta,
            words,
            state.get("lam_pos", zeros),
            state.get("lam_neg", zeros),
            epsilon=shared["pr_epsilon"],
            maxiter=shared["pr_maxiter"],
            tol=shared["pr_tol"],
            step_sizes=state.get("pr_step"),
        )
        tilted = pr.tilted
        new_state.update(lam_pos=pr.lam_pos, lam_neg=pr.lam_neg, pr_step=pr.step_sizes)
        extra.update(pr_steps=pr.steps, pr_violation=pr.max_violation)
    es = e_step(x, theta, words, tilted)
    new_state["theta"] = m_step_theta(es.unit_counts, shared["topic_prior"])
    extra["log_likelihood"] = es.log_likelihood
    return new_state, (block.cols, es.word_counts), extra


def _collect_task(block: GroupBlock, state: Any, shared: Mapping[str, Any]) -> tuple:
    """The block's state with its unit keys (for a checkpoint)."""
    _, keys = _units(block, shared["joint"])
    return state, None, {"keys": keys, **(state or {})}


def _restore_task(block: GroupBlock, state: Any, shared: Mapping[str, Any]) -> tuple:
    """The block's state taken from a checkpoint's arrays (rows by unit key)."""
    _, keys = _units(block, shared["joint"])
    pos = np.searchsorted(shared["keys"], keys)
    pos = np.minimum(pos, shared["keys"].size - 1)
    if keys.size and not np.array_equal(shared["keys"][pos], keys):
        raise CheckpointMismatchError(
            f"the checkpoint lacks units of block {block.index}; remove the checkpoint directory"
        )
    return {name: shared[name][pos] for name in shared["arrays"]}, None, None


# --- the driver ------------------------------------------------------------------------------


@dataclass
class _Em:
    """The driver's EM state: B, the iteration records, the best iteration."""

    words: np.ndarray
    iteration: int = 0
    records: list[dict[str, Any]] = field(default_factory=list)
    best_iteration: int | None = None
    best_score: float | None = None
    best_words: np.ndarray | None = None
    stopped_by: str | None = None
    resumed_from: int | None = None


def _check(method: str, params: dict[str, Any], corpus: Any, validation: Any) -> None:
    """Every parameter against its declaration, before any work on the corpus."""
    declared = {
        "r": params["r"],
        "topic_prior": params["topic_prior"],
        "word_prior": params["word_prior"],
        "init_mix": params["init_mix"],
        "maxiter": params["maxiter"],
        "tol": params["tol"],
        "stop_rule": params["stop_rule"],
        "patience": params["patience"],
        "pr_epsilon": params["pr_epsilon"],
        "pr_maxiter": params["pr_maxiter"],
        "pr_tol": params["pr_tol"],
        "fold_in_steps": params["fold_in_steps"],
        "checkpoint_every": params["checkpoint_every"],
        "checkpoint_seconds": params["checkpoint_seconds"],
    }
    check_params(method, declared, own=CplsaParams if method == "cplsa" else PlsaParams)
    if not isinstance(corpus, GroupedCorpus):
        raise ValueError(f"{method}: corpus must be a GroupedCorpus; got {type(corpus).__name__}")
    if corpus.weighting != "counts":
        raise ValueError(
            f"{method}: a topic model fits term counts; the corpus holds {corpus.weighting!r} rows"
        )
    if params["stop_rule"] == "validation" and validation is None:
        raise ConfigError(
            f"{method}: stop_rule=validation needs validation documents (term counts of "
            "held-out concepts); set features.heldout_concepts: splits, or use "
            f"train.{method}.stop_rule=likelihood"
        )
    if params["r"] > corpus.n_terms:
        raise ValueError(f"{method}: r (topics) must be <= p = {corpus.n_terms}; got {params['r']}")


def _fingerprint(method: str, params: dict[str, Any], corpus: GroupedCorpus, freq: np.ndarray):
    keep = (
        "r",
        "topic_prior",
        "word_prior",
        "init_mix",
        "pr_epsilon",
        "pr_maxiter",
        "pr_tol",
        "fold_in_steps",
    )
    return {
        "method": method,
        "params": {k: params[k] for k in keep if method == "cplsa" or not k.startswith("pr_")},
        "languages": list(corpus.languages),
        "terms": list(corpus.layout.sizes),
        "documents": corpus.n_docs,
        "concepts": corpus.n_concepts,
        "frequencies": array_digest(freq),
    }


class _TopicFit:
    """One fit of JPLSA or CPLSA on a corpus (the module docstring's loop)."""

    def __init__(
        self,
        method: str,
        corpus: GroupedCorpus,
        params: dict[str, Any],
        validation: ValidationSet | None,
        checkpoint: CheckpointStore | None,
    ) -> None:
        self.method, self.corpus, self.p = method, corpus, params
        self.joint = method == "jplsa"
        self.validation = validation
        self.checkpoint = checkpoint
        self.store: CheckpointStore | None = None
        # the first iteration is checkpointed; then at most one per checkpoint_seconds
        self.cadence = CheckpointCadence(params["checkpoint_seconds"], start=-np.inf)
        self.layout = corpus.layout

    def shared(self, words: np.ndarray) -> dict[str, Any]:
        p = self.p
        return {
            "joint": self.joint,
            "words": words,
            "topic_prior": p["topic_prior"],
            "pr_epsilon": p["pr_epsilon"],
            "pr_maxiter": p["pr_maxiter"],
            "pr_tol": p["pr_tol"],
        }

    def start(self) -> _Em:
        """The frequencies, the checkpoint's state if any, else the deterministic start."""
        corpus = self.corpus
        out = corpus.step(
            _frequency_task, None, n_rows=corpus.n_terms, width=1, description="plsa/frequencies"
        )
        freq = out.total[:, 0]
        if self.checkpoint is not None:
            self.store = self.checkpoint.bind(_fingerprint(self.method, self.p, corpus, freq))
            saved = self.store.load(STATE)
            if saved is not None:
                return self._resume(*saved)
        words = initial_topics(freq, self.layout, self.p["r"], self.p["init_mix"], self.joint)
        corpus.reset_state()
        return _Em(words=words)

    def _resume(self, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> _Em:
        names = [n for n in ("theta", "lam_pos", "lam_neg", "pr_step") if n in arrays]
        shared = {"joint": self.joint, "keys": arrays["keys"], "arrays": names}
        shared.update({n: arrays[n] for n in names})
        self.corpus.step(_restore_task, shared, update_state=True, description="plsa/resume")
        em = _Em(
            words=arrays["words"],
            iteration=int(meta["iteration"]),
            records=list(meta["records"]),
            best_iteration=meta.get("best_iteration"),
            best_score=meta.get("best_score"),
            best_words=arrays.get("best_words"),
            resumed_from=int(meta["iteration"]),
        )
        # the stopping settings may differ from the saved run's (a larger cap): ask again
        em.stopped_by = self.stop_rule_says(em) if em.iteration else None
        logger.info("%s: resumed after EM iteration %d", self.method, em.iteration)
        return em

    def save(self, em: _Em, *, due: bool) -> None:
        if self.store is None:
            return
        if not due and not self.cadence.due():
            return
        started = time.perf_counter()
        out = self.corpus.step(_collect_task, {"joint": self.joint}, description="plsa/collect")
        keys = np.concatenate([e["keys"] for e in out.extras])
        order = np.argsort(keys, kind="stable")
        arrays = {"words": em.words, "keys": keys[order]}
        for name in ("theta", "lam_pos", "lam_neg", "pr_step"):
            if out.extras and name in out.extras[0]:
                arrays[name] = np.concatenate([e[name] for e in out.extras])[order]
        if em.best_words is not None:
            arrays["best_words"] = em.best_words
        meta = {
            "iteration": em.iteration,
            "records": em.records,
            "best_iteration": em.best_iteration,
            "best_score": em.best_score,
        }
        self.store.save(STATE, arrays, meta)
        self.cadence.written(started)

    def iterate(self, em: _Em) -> dict[str, Any]:
        """One EM iteration: the step over the blocks, B's M-step, the record."""
        p, corpus = self.p, self.corpus
        t0 = time.perf_counter()
        out = corpus.step(
            _em_task,
            self.shared(em.words),
            n_rows=corpus.n_terms,
            width=p["r"],
            update_state=True,
            description=f"{self.method}/em{em.iteration + 1}",
        )
        ll = float(sum(e["log_likelihood"] for e in out.extras))
        objective = ll + sum(e["theta_prior"] for e in out.extras)
        objective += log_prior(em.words, p["word_prior"])
        em.words = m_step_words(out.total, self.layout, p["word_prior"], self.joint)
        em.iteration += 1
        rec: dict[str, Any] = {
            "iteration": em.iteration,
            "log_likelihood": ll,
            "log_posterior": float(objective),
        }
        if not self.joint:
            rec["pr_steps"] = int(max((e["pr_steps"] for e in out.extras), default=0))
            rec["pr_max_violation"] = float(max((e["pr_violation"] for e in out.extras), default=0))
        if self.validation is not None:
            rec["validation_p_at_1"] = self.score(em.words)
            if em.best_score is None or rec["validation_p_at_1"] > em.best_score:
                em.best_score, em.best_iteration = rec["validation_p_at_1"], em.iteration
                em.best_words = em.words.copy()
        rec["seconds"] = round(time.perf_counter() - t0, 4)
        em.records.append(rec)
        logger.info(
            "%s it=%d log posterior=%.8g%s (%.2fs)",
            self.method,
            em.iteration,
            objective,
            f" validation P@1={rec['validation_p_at_1']:.4f}" if "validation_p_at_1" in rec else "",
            rec["seconds"],
        )
        return rec

    def score(self, words: np.ndarray) -> float:
        """Validation P@1 (L1 on folded-in topic distributions) of the model ``words``."""
        per_lang = language_words(words, self.layout)
        emb = {
            lang: fold_in(
                x,
                per_lang[lang],
                steps=self.p["fold_in_steps"],
                topic_prior=self.p["topic_prior"],
            )
            for lang, x in self.validation.rows.items()
        }
        return self.validation.p_at_1_of(emb, "l1")[0]

    def stop_rule_says(self, em: _Em) -> str | None:
        """Which rule ends EM after the last iteration (None: go on)."""
        p, recs = self.p, em.records
        stalled = em.best_iteration is not None and em.iteration - em.best_iteration
        if p["stop_rule"] == "validation" and stalled and stalled >= p["patience"]:
            return "validation"
        if len(recs) >= 2:
            now, before = recs[-1]["log_posterior"], recs[-2]["log_posterior"]
            if abs(now - before) <= p["tol"] * abs(now):
                return "tolerance"
        if em.iteration >= p["maxiter"]:
            return "maxiter"
        return None


def _fit(
    method: str,
    corpus: GroupedCorpus,
    params: dict[str, Any],
    validation: ValidationSet | None,
    checkpoint: CheckpointStore | None,
) -> BaselineResult:
    _check(method, params, corpus, validation)
    t_start = time.perf_counter()
    steps0 = corpus.steps
    fit = _TopicFit(method, corpus, params, validation, checkpoint)
    em = fit.start()
    while em.stopped_by is None:
        fit.iterate(em)
        em.stopped_by = fit.stop_rule_says(em)
        due = em.stopped_by is not None or em.iteration % params["checkpoint_every"] == 0
        fit.save(em, due=due)
    use_best = params["stop_rule"] == "validation" and em.best_words is not None
    words = em.best_words if use_best else em.words
    returned = em.best_iteration if use_best else em.iteration
    seconds = round(time.perf_counter() - t_start, 4)
    stopping = {
        "rule": params["stop_rule"],
        "stopped_by": em.stopped_by,
        "returned_iteration": returned,
        "best_iteration": em.best_iteration,
        "best_validation_p_at_1": em.best_score,
    }
    history = {
        "method": method,
        "params": dict(params),
        "n_iter": em.iteration,
        "iterations": em.records,
        "stopping": stopping,
        "resumed_from_iteration": em.resumed_from,
        "blocks": corpus.n_blocks,
        "steps": corpus.steps - steps0,
        "timings": {"total": seconds},
    }
    logger.info(
        "%s: %d topics, %d EM iterations (stopped by %s), model of iteration %d, %.2fs",
        method,
        params["r"],
        em.iteration,
        em.stopped_by,
        returned,
        seconds,
    )
    comps = {
        lang: np.ascontiguousarray(b, dtype=np.float32)
        for lang, b in language_words(words, corpus.layout).items()
    }
    return BaselineResult(
        components=comps,
        eigenvalues=np.zeros(0),
        history=history,
        folding_in={"steps": params["fold_in_steps"], "topic_prior": params["topic_prior"]},
        similarity="l1",
    )


def fit_jplsa(
    corpus: GroupedCorpus,
    *,
    r: int = _D.r,
    topic_prior: float = _P.topic_prior,
    word_prior: float = _P.word_prior,
    init_mix: float = _P.init_mix,
    maxiter: int = _P.maxiter,
    tol: float = _P.tol,
    stop_rule: str = _P.stop_rule,
    patience: int = _P.patience,
    fold_in_steps: int = _P.fold_in_steps,
    validation: ValidationSet | None = None,
    checkpoint: CheckpointStore | None = None,
    checkpoint_every: int = _D.checkpoint_every,
    checkpoint_seconds: float = _D.checkpoint_seconds,
    seed: int = _D.seed,
) -> BaselineResult:
    """Fit JPLSA: one topic distribution per concept over the union of its tokens.

    Parameters
    ----------
    corpus : GroupedCorpus
        Term counts (``weighting == "counts"``) grouped by concept.
    r : int
        Number of topics T (the embedding dimension).
    topic_prior, word_prior : float
        Dirichlet parameters α_θ, α_β >= 1 (MAP EM).
    init_mix : float
        Weight of the uniform part of the deterministic start, in [0, 1).
    maxiter, tol : int, float
        EM iteration cap; relative rise of the log posterior below which EM stops.
    stop_rule : {"likelihood", "validation"}
        validation: also stop when validation P@1 has not improved for ``patience``
        iterations, and return the best iteration (needs ``validation``).
    patience : int
    fold_in_steps : int
        EM steps of folding-in (validation and the saved model).
    validation : ValidationSet, optional
        Term-count rows of held-out concepts' documents.
    checkpoint : CheckpointStore, optional
        Resumable state between iterations (module docstring).
    checkpoint_every, checkpoint_seconds : int, float
        Save after every ``checkpoint_every``-th iteration, at most once per
        ``checkpoint_seconds`` (the last iteration always).
    seed : int
        Unused (the start is deterministic); accepted for a uniform signature.

    Returns
    -------
    BaselineResult
        ``components[l]``: the topic-word matrix of language l, ndarray of shape (p_l, T),
        float32, columns summing to 1; ``folding_in``: the embedding settings;
        ``similarity``: ``"l1"``; ``eigenvalues``: empty.
    """
    del seed
    params = dict(
        r=r,
        topic_prior=topic_prior,
        word_prior=word_prior,
        init_mix=init_mix,
        maxiter=maxiter,
        tol=tol,
        stop_rule=stop_rule,
        patience=patience,
        pr_epsilon=_P.pr_epsilon,
        pr_maxiter=_P.pr_maxiter,
        pr_tol=_P.pr_tol,
        fold_in_steps=fold_in_steps,
        checkpoint_every=checkpoint_every,
        checkpoint_seconds=checkpoint_seconds,
    )
    return _fit("jplsa", corpus, params, validation, checkpoint)


def fit_cplsa(
    corpus: GroupedCorpus,
    *,
    r: int = _D.r,
    topic_prior: float = _P.topic_prior,
    word_prior: float = _P.word_prior,
    init_mix: float = _P.init_mix,
    maxiter: int = _P.maxiter,
    tol: float = _P.tol,
    stop_rule: str = _P.stop_rule,
    patience: int = _P.patience,
    pr_epsilon: float = _P.pr_epsilon,
    pr_maxiter: int = _P.pr_maxiter,
    pr_tol: float = _P.pr_tol,
    fold_in_steps: int = _P.fold_in_steps,
    validation: ValidationSet | None = None,
    checkpoint: CheckpointStore | None = None,
    checkpoint_every: int = _D.checkpoint_every,
    checkpoint_seconds: float = _D.checkpoint_seconds,
    seed: int = _D.seed,
) -> BaselineResult:
    """Fit CPLSA: one topic distribution per document, the documents of a concept coupled by
    posterior regularisation.

    Parameters are those of :func:`fit_jplsa`, and

    pr_epsilon : float
        ε: a document's expected topic fractions may differ from its concept's first
        document's by at most this, per topic.
    pr_maxiter, pr_tol : int, float
        Projected-gradient steps per EM iteration, and the violation at which a concept's
        projection stops.

    Returns
    -------
    BaselineResult
        As :func:`fit_jplsa` (each topic one distribution per language).
    """
    del seed
    params = dict(
        r=r,
        topic_prior=topic_prior,
        word_prior=word_prior,
        init_mix=init_mix,
        maxiter=maxiter,
        tol=tol,
        stop_rule=stop_rule,
        patience=patience,
        pr_epsilon=pr_epsilon,
        pr_maxiter=pr_maxiter,
        pr_tol=pr_tol,
        fold_in_steps=fold_in_steps,
        checkpoint_every=checkpoint_every,
        checkpoint_seconds=checkpoint_seconds,
    )
    return _fit("cplsa", corpus, params, validation, checkpoint)
