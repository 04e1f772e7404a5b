"""XCNN (Gupta, Banchs and Rosso 2017): a crosslingual composition network.

Each term t of language l goes through one tanh layer, h_t = tanh(W_l[t] + b_l) (d values);
a document's vector is the sum of its terms' h_t weighted by its TF-IDF row x,
v = Σ_t x_t h_t. Training sees parallel pairs (documents of two languages about the same
concept) and, for each, a random document of the positive's language about another concept
(noise-contrastive estimation with one noise sample): with s the scaled cosine,

    loss = softplus(-s·cos(v_q, v_p)) + softplus(s·cos(v_q, v_n)),

averaged over the pairs of a batch in both directions (each side the query once).

Because the composition is a sum of per-term outputs, the trained encoder *is* a linear map
of the TF-IDF row, with the matrix H_l = tanh(W_l + b_l) (p_l × d): the model directory
stores H_l as the language's map, like Cr5's Φ_lᵀ, and it embeds through the same path.
The paper's optional monolingual pre-initialisation is not done here (docs/neural.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from pipeline.neural.loop import import_torch, model_device
from pipeline.neural.validation import distractor_rows

__all__ = ["XcnnTask", "nce_loss", "parallel_pairs"]


def parallel_pairs(concepts: dict[str, np.ndarray], langs: list[str]) -> np.ndarray:
    """Every pair of documents of two different languages with the same concept.

    Returns
    -------
    ndarray of int64, shape (n_pairs, 4)
        (language a, row in a, language b, row in b), languages as indices into ``langs``,
        a < b; sorted.
    """
    out = []
    for a in range(len(langs)):
        for b in range(a + 1, len(langs)):
            ca, cb = concepts[langs[a]], concepts[langs[b]]
            _, ia, ib = np.intersect1d(ca, cb, assume_unique=False, return_indices=True)
            if ia.size:
                block = np.empty((ia.size, 4), dtype=np.int64)
                block[:, 0], block[:, 1], block[:, 2], block[:, 3] = a, ia, b, ib
                out.append(block)
    return np.concatenate(out) if out else np.zeros((0, 4), dtype=np.int64)


def nce_loss(torch: Any, q: Any, p: Any, n: Any, scale: float) -> Any:
    """Mean of softplus(-s·cos(q, p)) + softplus(s·cos(q, n)) over the rows (tensors (m, d))."""
    f = torch.nn.functional
    pos = f.cosine_similarity(q, p, dim=1, eps=1e-8)
    neg = f.cosine_similarity(q, n, dim=1, eps=1e-8)
    return (f.softplus(-scale * pos) + f.softplus(scale * neg)).mean()


def _module(torch: Any, sizes: list[int], dim: int) -> Any:
    nn = torch.nn

    class Xcnn(nn.Module):
        """Per language: W_l (p_l, d) and b_l (d,); :meth:`forward` embeds CSR rows."""

        def __init__(self) -> None:
            super().__init__()
            self.w = nn.ParameterList(
                [nn.Parameter(torch.randn(p, dim, dtype=torch.float32) * 0.1) for p in sizes]
            )
            self.b = nn.ParameterList(
                [nn.Parameter(torch.zeros(dim, dtype=torch.float32)) for _ in sizes]
            )

        def forward(self, lang: int, indices: Any, offsets: Any, weights: Any) -> Any:
            # only the batch's terms go through the tanh layer
            terms, inverse = torch.unique(indices, return_inverse=True)
            h = torch.tanh(self.w[lang][terms] + self.b[lang])
            return nn.functional.embedding_bag(
                inverse, h, offsets, mode="sum", per_sample_weights=weights
            )

    return Xcnn()


@dataclass
class XcnnTask:
    """XCNN on the TF-IDF rows of the training languages (a :class:`~pipeline.neural.loop.Task`).

    Attributes
    ----------
    langs : list of str
    rows : list of csr_matrix of shape (n_l, p_l), float32, one per language
    concepts : list of ndarray of shape (n_l,)
        Concept index of each row.
    dim, scale : the ``train.xcnn.*`` settings
    term_dropout : float
        Fraction of each training row's nonzeros dropped in every step (the rest scaled by
        1 / (1 - fraction)); never at validation or export.
    center : bool
        Score the validation with each language's mean training embedding subtracted (what
        the exported model does with ``train.xcnn.center``, :meth:`offsets`).
    validation : ValidationSet or None
        Held-out documents (:class:`pipeline.linalg.monitor.ValidationSet`) scored each epoch.
    distractors : int
        Training documents per language (a seeded sample) added to the validation
        candidates (:mod:`pipeline.neural.validation`).
    """

    langs: list[str]
    rows: list[sp.csr_matrix]
    concepts: list[np.ndarray]
    dim: int
    scale: float
    validation: Any = None
    distractors: int = 0
    term_dropout: float = 0.0
    center: bool = False

    def __post_init__(self) -> None:
        self.pairs = parallel_pairs(dict(zip(self.langs, self.concepts)), self.langs)
        # per language, the mean of the training rows that have a term (for offsets)
        self.mean_rows = [
            np.asarray(x[np.diff(x.indptr) > 0].mean(axis=0), dtype=np.float64).ravel()
            for x in self.rows
        ]
        self.n_items = int(self.pairs.shape[0])
        self.distractor_rows = [
            distractor_rows(x.shape[0], self.distractors, seed=i) for i, x in enumerate(self.rows)
        ]

    def build(self) -> Any:
        torch = import_torch()
        return _module(torch, [x.shape[1] for x in self.rows], self.dim)

    def begin_epoch(self, epoch: int) -> dict[str, Any]:
        """Nothing varies by epoch."""
        return {}

    def offsets(self, maps: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Per language, the mean embedding x @ H_l of its training rows that have a term:
        float64 (d,), for the maps ``maps``.

        XCNN's embeddings of one language share a common vector (the bias b_l and the
        frequent terms put it there; the loss, whose negatives are of the positive's
        language, never pushes it away); subtracting it leaves what tells the documents
        apart, which cosine otherwise ranks below it.
        """
        return {
            lang: self.mean_rows[i] @ np.asarray(maps[lang], dtype=np.float64)
            for i, lang in enumerate(self.langs)
        }

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        """For each pair and side, a random row of that side's language about another
        concept: (n_items, 2) rows (negatives for the b side's query, then the a side's)."""
        out = np.empty((self.n_items, 2), dtype=np.int64)
        for col, (lang_col, row_col) in enumerate(((2, 3), (0, 1))):
            lang = self.pairs[:, lang_col]
            for li in np.unique(lang):
                sel = np.flatnonzero(lang == li)
                n = self.rows[li].shape[0]
                neg = rng.integers(0, n, size=sel.size)
                same = self.concepts[li][neg] == self.concepts[li][self.pairs[sel, row_col]]
                neg[same] = (neg[same] + 1) % n  # the next row: another concept (rows unique)
                out[sel, col] = neg
        return out

    def _embed(self, torch: Any, model: Any, lang: int, rows: np.ndarray) -> Any:
        x = self.rows[lang][rows]
        device = model_device(model)
        weights = torch.from_numpy(x.data.astype(np.float32)).to(device)
        if self.term_dropout > 0 and model.training:
            # torch's generator, seeded by the loop: the same drops in a rerun
            keep = torch.rand(weights.shape, device=device) >= self.term_dropout
            weights = weights * keep / (1.0 - self.term_dropout)
        return model(
            lang,
            torch.from_numpy(x.indices.astype(np.int64)).to(device),
            torch.from_numpy(x.indptr[:-1].astype(np.int64)).to(device),
            weights,
        )

    def loss(
        self, model: Any, items: np.ndarray, draws: np.ndarray, batch: np.ndarray | None = None
    ) -> Any:
        """Mean loss over ``items``: with equal slices, the mean of the W processes' means is
        the global batch's mean, so ``batch`` is not needed (see
        :class:`~pipeline.neural.loop.Task`)."""
        torch = import_torch()
        pairs = self.pairs[items]
        losses = []
        for la in np.unique(pairs[:, 0]):
            for lb in np.unique(pairs[pairs[:, 0] == la, 2]):
                sel = np.flatnonzero((pairs[:, 0] == la) & (pairs[:, 2] == lb))
                va = self._embed(torch, model, la, pairs[sel, 1])
                vb = self._embed(torch, model, lb, pairs[sel, 3])
                nb = self._embed(torch, model, lb, draws[items[sel], 0])
                na = self._embed(torch, model, la, draws[items[sel], 1])
                # weighted by the group's share so the batch mean is over all pairs
                w = sel.size / items.size
                losses.append(w * 0.5 * nce_loss(torch, va, vb, nb, self.scale))
                losses.append(w * 0.5 * nce_loss(torch, vb, va, na, self.scale))
        return torch.stack(losses).sum()

    def maps(self, model: Any) -> dict[str, np.ndarray]:
        """H_l = tanh(W_l + b_l), float32 (p_l, d), per language."""
        torch = import_torch()
        inner = getattr(model, "module", model)
        with torch.no_grad():
            return {
                lang: torch.tanh(inner.w[i] + inner.b[i]).cpu().numpy().astype(np.float32)
                for i, lang in enumerate(self.langs)
            }

    def score(self, model: Any) -> float | None:
        """Validation P@1 (cosine), the training-document distractors among the candidates."""
        if self.validation is None:
            return None
        maps = {k: v.astype(np.float64) for k, v in self.maps(model).items()}
        shift = self.offsets(maps) if self.center else {}

        def embed(lang: str, x: sp.csr_matrix) -> np.ndarray:
            e = np.asarray(x @ maps[lang])
            if lang in shift:
                e[np.diff(x.indptr) > 0] -= shift[lang]
            return e

        emb = {lang: embed(lang, x) for lang, x in self.validation.rows.items()}
        extra = {
            lang: embed(lang, self.rows[i][self.distractor_rows[i]])
            for i, lang in enumerate(self.langs)
            if lang in emb and self.distractor_rows[i].size
        }
        if not self.validation.directions:
            return None
        return self.validation.p_at_1_of(emb, "cosine", extra)[0]

    def export(self, model: Any) -> dict[str, np.ndarray]:
        return self.maps(model)
