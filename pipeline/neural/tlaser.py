"""T-LASER and cT-LASER (Li and Mak): a transformer encoder-decoder trained as multilingual
translation, whose encoder output at a leading start tag is the document embedding.

- One subword vocabulary for all languages, learned by sentencepiece (BPE) on the training
  documents; ids 0..3 are pad, unk, bos, eos, and every language l has a tag ``<2l>``.
- Encoder input: the start tag (bos) then the document's first ``max_tokens`` subwords, with
  learned positions. The first ``layers - 1`` encoder layers are standard self-attention
  layers; the last one refines only the start position (its query is that position alone),
  and its output is the embedding e (d values).
- Decoder: one transformer decoder layer whose memory is e alone (so everything the decoder
  knows about the source passes through the embedding), input ``<2target>`` then the
  target's subwords, predicting the target's subwords then eos; translation loss = token
  cross-entropy. Each parallel pair trains both directions.
- cT-LASER adds the distance constraint (:func:`distance_constraint`) on the pair's
  embeddings and a randomly drawn unrelated document's, weighted by β:
  loss = translation + β · constraint. T-LASER is β = 0.

No dropout, so a distributed run takes the steps a single process takes
(:mod:`pipeline.neural.loop`).
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipeline.errors import ConfigError
from pipeline.neural.loop import all_sum, import_torch, model_device
from pipeline.neural.validation import distractor_rows, validation_p_at_1
from pipeline.neural.xcnn import parallel_pairs

__all__ = [
    "PAD",
    "EncoderSizes",
    "SubwordVocabulary",
    "TLaserTask",
    "build_module",
    "distance_constraint",
    "encode_texts",
]

PAD, UNK, BOS, EOS = 0, 1, 2, 3


@dataclass(frozen=True)
class EncoderSizes:
    """The network's sizes (the ``train.tlaser.*`` or ``train.ctlaser.*`` keys) and its
    vocabulary size."""

    vocab: int
    dim: int
    heads: int
    layers: int
    ff: int
    max_tokens: int

    def to_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


class SubwordVocabulary:
    """A sentencepiece BPE model shared by all languages, with a tag ``<2l>`` per language."""

    def __init__(self, proto: bytes) -> None:
        try:
            import sentencepiece as spm
        except ImportError:
            raise ConfigError(
                "train.method tlaser/ctlaser needs sentencepiece (the neural extra): pip "
                "install 'cr5-on-spark[neural]'"
            ) from None
        self.proto = proto
        self.sp = spm.SentencePieceProcessor(model_proto=proto)

    @classmethod
    def train(cls, texts: list[str], langs: list[str], size: int) -> SubwordVocabulary:
        """Learn a BPE vocabulary of up to ``size`` pieces on ``texts`` (one thread, so the
        result depends on the texts alone)."""
        try:
            import sentencepiece as spm
        except ImportError:
            raise ConfigError(
                "train.method tlaser/ctlaser needs sentencepiece (the neural extra): pip "
                "install 'cr5-on-spark[neural]'"
            ) from None
        out = io.BytesIO()
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter([_clean(t) for t in texts if t]),
            model_writer=out,
            model_type="bpe",
            vocab_size=size,
            hard_vocab_limit=False,
            pad_id=PAD,
            unk_id=UNK,
            bos_id=BOS,
            eos_id=EOS,
            user_defined_symbols=[f"<2{lang}>" for lang in langs],
            character_coverage=1.0,
            num_threads=1,
            max_sentence_length=1 << 16,
            minloglevel=2,
        )
        return cls(out.getvalue())

    def __len__(self) -> int:
        return int(self.sp.get_piece_size())

    def tag(self, lang: str) -> int:
        i = int(self.sp.piece_to_id(f"<2{lang}>"))
        if i == UNK:
            raise ConfigError(f"the subword vocabulary has no tag for language {lang!r}")
        return i

    def encode(self, texts: list[str | None], max_tokens: int) -> list[np.ndarray]:
        """The subword ids of each text (at most ``max_tokens``; None or empty: none)."""
        ids = self.sp.encode([_clean(t or "") for t in texts])
        return [np.asarray(x[:max_tokens], dtype=np.int64) for x in ids]


def _clean(text: str) -> str:
    return " ".join(text.split())


def _pad(torch: Any, seqs: list[np.ndarray]) -> Any:
    width = max(1, max(len(s) for s in seqs))
    out = np.zeros((len(seqs), width), dtype=np.int64)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = s
    return torch.from_numpy(out)


def build_module(sizes: EncoderSizes) -> Any:
    """The encoder-decoder (a ``torch.nn.Module``) of the given sizes."""
    torch = import_torch()
    nn = torch.nn
    if sizes.dim % sizes.heads:
        raise ConfigError(
            f"the attention heads (train.<method>.heads={sizes.heads}) must divide the width "
            f"(train.<method>.dim={sizes.dim})"
        )

    class TLaser(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            d = sizes.dim
            self.tok = nn.Embedding(sizes.vocab, d, padding_idx=PAD)
            self.pos = nn.Embedding(sizes.max_tokens + 2, d)
            self.encoder = nn.ModuleList(
                nn.TransformerEncoderLayer(d, sizes.heads, sizes.ff, dropout=0.0, batch_first=True)
                for _ in range(sizes.layers - 1)
            )
            self.last_attn = nn.MultiheadAttention(d, sizes.heads, dropout=0.0, batch_first=True)
            self.last_ff = nn.Sequential(nn.Linear(d, sizes.ff), nn.ReLU(), nn.Linear(sizes.ff, d))
            self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.decoder = nn.TransformerDecoderLayer(
                d, sizes.heads, sizes.ff, dropout=0.0, batch_first=True
            )
            self.out = nn.Linear(d, sizes.vocab)

        def _embed_tokens(self, ids: Any) -> Any:
            positions = torch.arange(ids.shape[1], device=ids.device)
            return self.tok(ids) * math.sqrt(sizes.dim) + self.pos(positions)

        def encode(self, src: Any) -> Any:
            """(B, T) ids starting with bos -> (B, d) embeddings."""
            mask = src == PAD
            x = self._embed_tokens(src)
            for layer in self.encoder:
                x = layer(x, src_key_padding_mask=mask)
            q = x[:, :1]
            a, _ = self.last_attn(q, x, x, key_padding_mask=mask, need_weights=False)
            h = self.norm1(q + a)
            return self.norm2(h + self.last_ff(h))[:, 0]

        def translation_loss(
            self, emb: Any, tgt_in: Any, tgt_out: Any, reduction: str = "mean"
        ) -> Any:
            """Token cross-entropy of the targets given the embeddings (``reduction``:
            ``"mean"`` over the non-pad target tokens, or their ``"sum"``)."""
            y = self._embed_tokens(tgt_in)
            t = tgt_in.shape[1]
            causal = torch.triu(torch.ones(t, t, dtype=torch.bool, device=y.device), diagonal=1)
            y = self.decoder(
                y, emb[:, None, :], tgt_mask=causal, tgt_key_padding_mask=tgt_in == PAD,
                tgt_is_causal=True,
            )  # fmt: skip
            logits = self.out(y)
            return nn.functional.cross_entropy(
                logits.reshape(-1, sizes.vocab),
                tgt_out.reshape(-1),
                ignore_index=PAD,
                reduction=reduction,
            )

        def forward(self, src: Any) -> Any:
            return self.encode(src)

    return TLaser()


def distance_constraint(
    torch: Any, ea: Any, eb: Any, en: Any, margin: float, m: Any = None, center: bool = False
) -> Any:
    """cT-LASER's distance-constraint loss for (B, d) embeddings of the pairs' two sides
    (ea, eb) and of unrelated documents (en).

    With m the batch's mean vector norm (over ea, eb and en together; given, when the batch
    is split over processes, as the whole batch's),

        mean_i ‖ea_i − eb_i‖ / m  +  mean_i max(0, margin − ‖ea_i − en_i‖ / m):

    pull translations together and push unrelated documents at least ``margin`` mean norms
    away; dividing by m keeps the network from shrinking every vector to win the first term.

    ``center`` measures m on the vectors less their batch mean. The paper's uncentred m
    can be inflated by adding one large vector to every embedding (every distance over m
    shrinks; the hinge then costs at most ``margin``), a state the encoder's final LayerNorm
    bias reaches easily; distances do not change with centring, only m.
    """
    if m is None:
        m = _mean_norm(torch, torch.cat([ea, eb, en]), center)
    pos = (ea - eb).norm(dim=1) / m
    neg = (ea - en).norm(dim=1) / m
    return pos.mean() + torch.relu(margin - neg).mean()


def _mean_norm(torch: Any, e: Any, center: bool, total: int | None = None) -> Any:
    """Mean vector norm of the (n, d) rows ``e``, less their mean if ``center``; ``total``
    (with the sums over processes by :func:`all_sum`): the whole batch's, of ``total`` rows."""
    count = e.shape[0] if total is None else total
    add = (lambda x: x) if total is None else all_sum
    if center:
        e = e - add(e.sum(dim=0)) / count
    return add(e.norm(dim=1).sum()) / count


def encode_texts(torch: Any, model: Any, ids: list[np.ndarray], batch: int = 64) -> np.ndarray:
    """Embeddings (n, d) float32 of documents given as subword ids (the start tag is added)."""
    out = []
    device = model_device(model)
    with torch.no_grad():
        for i in range(0, len(ids), batch):
            chunk = [np.concatenate([[BOS], x]) for x in ids[i : i + batch]]
            out.append(model.encode(_pad(torch, chunk).to(device)).cpu().numpy())
    d = model.out.in_features
    return np.concatenate(out).astype(np.float32) if out else np.zeros((0, d), np.float32)


@dataclass
class TLaserTask:
    """T-LASER (β = 0) or cT-LASER on subword-encoded training documents
    (a :class:`~pipeline.neural.loop.Task`).

    Attributes
    ----------
    langs : list of str
    ids : list of list of ndarray
        Per language, each training document's subword ids.
    concepts : list of ndarray of shape (n_l,)
    tags : list of int
        The ``<2l>`` tag id of each language.
    sizes : EncoderSizes
    beta, margin : the cT-LASER constraint's weight and margin (β = 0: T-LASER)
    center : whether the constraint's mean norm is measured on batch-centred vectors
        (:func:`distance_constraint`)
    warmup_epochs : int
        The constraint's weight rises linearly over the first epochs: epoch e (0-based)
        trains with β · min(1, e / warmup_epochs), so the first epoch is T-LASER's and the
        full β applies from epoch ``warmup_epochs`` on; 0: β from the start (the paper's).
    validation : dict of str to (list of ndarray, ndarray) or None
        Per language, validation documents' ids and concept ids.
    distractors : int
        Training documents per language (a seeded sample) added to the validation
        candidates (:mod:`pipeline.neural.validation`).
    distractor_pool : list of int or None
        Per language, draw the distractors from the first that many documents only (the
        training rows' documents, before a parallel corpus's segments); None: from all.
    """

    langs: list[str]
    ids: list[list[np.ndarray]]
    concepts: list[np.ndarray]
    tags: list[int]
    sizes: EncoderSizes
    beta: float = 0.0
    margin: float = 1.0
    center: bool = False
    warmup_epochs: int = 0
    validation: dict[str, tuple[list[np.ndarray], np.ndarray]] | None = None
    distractors: int = 0
    distractor_pool: list[int] | None = None
    pairs: np.ndarray = field(init=False)
    beta_now: float = field(init=False)

    def __post_init__(self) -> None:
        self.pairs = parallel_pairs(dict(zip(self.langs, self.concepts)), self.langs)
        self.n_items = int(self.pairs.shape[0])
        pool = self.distractor_pool or [len(ids) for ids in self.ids]
        self.distractor_rows = [
            distractor_rows(n, self.distractors, seed=i) for i, n in enumerate(pool)
        ]
        self.beta_now = self.beta

    def build(self) -> Any:
        return build_module(self.sizes)

    def begin_epoch(self, epoch: int) -> dict[str, Any]:
        """The constraint's weight for epoch ``epoch`` (the warm-up schedule); recorded in
        the epoch's history for cT-LASER."""
        ramp = 1.0 if self.warmup_epochs == 0 else min(1.0, epoch / self.warmup_epochs)
        self.beta_now = self.beta * ramp
        return {"beta": self.beta_now} if self.beta > 0 else {}

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        """An unrelated document of language b for each pair: (n_items,) rows."""
        out = np.empty(self.n_items, dtype=np.int64)
        for li in np.unique(self.pairs[:, 2]):
            sel = np.flatnonzero(self.pairs[:, 2] == li)
            n = len(self.ids[li])
            neg = rng.integers(0, n, size=sel.size)
            same = self.concepts[li][neg] == self.concepts[li][self.pairs[sel, 3]]
            neg[same] = (neg[same] + 1) % n
            out[sel] = neg
        return out

    def _src(self, torch: Any, lang: np.ndarray, rows: np.ndarray, device: Any) -> Any:
        seqs = [np.concatenate([[BOS], self.ids[li][r]]) for li, r in zip(lang, rows)]
        return _pad(torch, seqs).to(device)

    def _target_tokens(self, items: np.ndarray) -> int:
        """Target tokens (subwords + eos) of ``items``' two translation directions."""
        p = self.pairs[items]
        lengths = [len(self.ids[li][r]) + 1 for li, r in zip(p[:, 0], p[:, 1])]
        lengths += [len(self.ids[li][r]) + 1 for li, r in zip(p[:, 2], p[:, 3])]
        return int(sum(lengths))

    def loss(
        self, model: Any, items: np.ndarray, draws: np.ndarray, batch: np.ndarray | None = None
    ) -> Any:
        """This process's share of the global ``batch``'s loss (:class:`~pipeline.neural.loop.
        Task`): the token cross-entropy summed here and divided by the whole batch's token
        count, times the W processes; cT-LASER's m is the whole batch's mean norm."""
        torch = import_torch()
        batch = items if batch is None else batch
        world = len(batch) / len(items)
        p = self.pairs[items]
        la, ra, lb, rb = p[:, 0], p[:, 1], p[:, 2], p[:, 3]
        # both directions in one batch: sources a then b, targets b then a
        device = model_device(model)
        src = self._src(torch, np.concatenate([la, lb]), np.concatenate([ra, rb]), device)
        emb = model(src)
        tgt_lang, tgt_rows = np.concatenate([lb, la]), np.concatenate([rb, ra])
        targets = [self.ids[li][r] for li, r in zip(tgt_lang, tgt_rows)]
        tgt_in = _pad(
            torch, [np.concatenate([[self.tags[li]], t]) for li, t in zip(tgt_lang, targets)]
        ).to(device)
        tgt_out = _pad(torch, [np.concatenate([t, [EOS]]) for t in targets]).to(device)
        inner = getattr(model, "module", model)
        ce = inner.translation_loss(emb, tgt_in, tgt_out, reduction="sum")
        loss = ce * (world / self._target_tokens(batch))
        if self.beta_now > 0:
            n = len(items)
            en = model(self._src(torch, lb, draws[items], device))
            # the slices are equal, so the slice's mean terms average to the batch's; only m
            # (and the centre), means over the whole batch, need the other processes' vectors
            m = _mean_norm(torch, torch.cat([emb, en]), self.center, total=3 * len(batch))
            loss = loss + self.beta_now * distance_constraint(
                torch, emb[:n], emb[n:], en, self.margin, m=m
            )
        return loss

    def score(self, model: Any) -> float | None:
        """Mean P@1 (cosine) over the ordered pairs of validation languages, the
        training-document distractors among the candidates."""
        if not self.validation:
            return None
        torch = import_torch()
        emb, concepts, extra = {}, {}, {}
        for lang, (ids, conc) in self.validation.items():
            emb[lang] = encode_texts(torch, model, ids)
            concepts[lang] = np.asarray(conc)
        for i, lang in enumerate(self.langs):
            if lang in emb and self.distractor_rows[i].size:
                extra[lang] = encode_texts(
                    torch, model, [self.ids[i][r] for r in self.distractor_rows[i]]
                )
        return validation_p_at_1(emb, concepts, extra)

    def export(self, model: Any) -> dict[str, np.ndarray]:
        return {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}
