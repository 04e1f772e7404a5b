"""MUSE interop: fastText/MUSE ``.vec`` files imported with ``python -m pipeline import-vec``,
then mapped and scored by the translate_words stage on a MUSE-format lexicon; the ``.vec``
reader's located errors, duplicates, ``max_vocab`` and gzip."""

from __future__ import annotations

import gzip
import json
import logging
from pathlib import Path

import numpy as np
import pytest

from pipeline.cli import main
from pipeline.config import load_config
from pipeline.errors import InputDataError
from pipeline.stages import get_stage
from pipeline.wordmap.lexicon import read_lexicon, split_lexicon
from pipeline.wordmap.mapping import normalize_embeddings, procrustes
from pipeline.wordmap.store import read_word_vectors
from pipeline.wordmap.translation import translate_words
from pipeline.wordmap.vecfile import MUSE_MAX_VOCAB, read_vec
from tests.conftest import REPO


def _write_vec(path: Path, words: list[str], vectors: np.ndarray, *, header: int | None = None):
    """fastText's layout: header, then 'word v1 ... vd ' (with its trailing space)."""
    n = len(words) if header is None else header
    lines = [f"{n} {vectors.shape[1]}\n"]
    for w, v in zip(words, vectors, strict=True):
        lines.append(w + " " + " ".join(f"{x:.9g}" for x in v) + " \n")
    path.write_text("".join(lines), encoding="utf-8")


def _csls_top1(q: np.ndarray, c: np.ndarray, k: int) -> np.ndarray:
    """Brute-force CSLS nearest row of ``c`` for each row of ``q`` (unit rows; r_T over
    ``c``, r_S over ``q``: the whole source vocabulary, as MUSE and the stage do)."""
    s = q @ c.T
    r_t = np.sort(s, axis=1)[:, -k:].mean(axis=1)
    r_s = np.sort(s.T, axis=1)[:, -k:].mean(axis=1)
    return np.argmax(2 * s - r_t[:, None] - r_s[None, :], axis=1)


def test_import_vec_then_the_mappings_recover_a_known_rotation(tmp_path, capsys, caplog):
    """Two languages' .vec files, the target an exact rotation of the source, and a MUSE
    lexicon: import-vec, then the translate_words stage's Procrustes (and RCSLS) and the
    library's translate_words find every translation (P@1 computed from the construction)."""
    n, d = 300, 20
    rng = np.random.default_rng(7)
    x = rng.standard_normal((n, d)).astype(np.float32)
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    y = (x @ q).astype(np.float32)  # target = source rotated: y_i = x_i Q
    en = [f"wörd{i}" for i in range(n - 2)] + ["日本", "ça"]  # non-ASCII words
    de = [f"слово{i}" for i in range(n - 2)] + ["にほん", "das"]
    # en's file repeats a word at its end, with another vector: the first one is kept.
    _write_vec(tmp_path / "en.vec", [*en, en[5]], np.vstack([x, -x[5:6]]))
    _write_vec(tmp_path / "de.vec", de, y)
    lexicon = tmp_path / "en-de.txt"  # MUSE's format: space-separated, no tab
    lexicon.write_text("".join(f"{s} {t}\n" for s, t in zip(en, de, strict=True)), "utf-8")

    root = tmp_path / "out" / "word_vectors"
    with caplog.at_level(logging.WARNING, logger="pipeline.wordmap.vecfile"):
        code = main(
            [
                "import-vec",
                "--out",
                str(root),
                "--lang",
                f"en={tmp_path / 'en.vec'}",
                "--lang",
                f"DE={tmp_path / 'de.vec'}",
                "--max-vocab",
                "-1",
            ]
        )
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["languages"]["en"]["duplicates_skipped"] == 1
    assert report["languages"]["en"]["words"] == n and report["languages"]["de"]["words"] == n
    assert "'wörd5' (line 302)" in caplog.text and "first vector" in caplog.text
    wv_en, wv_de = read_word_vectors(root, "en"), read_word_vectors(root, "de")
    assert wv_en.words == en and wv_de.words == de
    # '%.9g' round-trips float32 exactly; the duplicate's vector (-x_5) was dropped.
    assert np.array_equal(wv_en.vectors, x) and np.array_equal(wv_de.vectors, y)
    assert not wv_en.counts.any()

    cfg = load_config(
        [REPO / "conf/local.yaml"],
        [
            f"paths.root={tmp_path}/out",
            f"words.lexicon={lexicon}",
            "words.methods=[procrustes, rcsls]",
            "words.n_test=100",
            "words.n_validation=50",
            "words.rcsls_learning_rates=[1.0]",
            "words.rcsls_epochs=[0, 3]",
        ],
    )
    stage = get_stage("translate_words")(None, cfg)
    results = {(r["method"], r["measure"]): r for r in stage["results"]}

    # What the construction guarantees, computed: with the true map, normalising (renorm,
    # centre, renorm) commutes with the rotation, so each mapped source vector is its own
    # target; P@1 is the fraction of test words whose target beats every other by a margin.
    split = split_lexicon(read_lexicon(lexicon), n_test=100, n_validation=50, seed=cfg.words.seed)
    test_words = split.test.source_words
    rows = [en.index(w) for w in test_words]
    xs, yt = normalize_embeddings(x), normalize_embeddings(y)
    np.testing.assert_allclose(xs @ q, yt, atol=1e-5)
    sims = (xs[rows] @ q) @ yt.T  # cosines: unit rows
    own = sims[np.arange(len(rows)), rows]
    sims[np.arange(len(rows)), rows] = -np.inf
    margin = own - sims.max(axis=1)
    expected_cos = float(np.mean(margin > 1e-3))
    expected_csls = float(np.mean(_csls_top1(xs @ q, yt, cfg.words.csls_k)[rows] == rows))
    assert expected_cos == 1.0 and margin.min() > 0.05  # the construction's guarantee
    assert results[("procrustes", "cosine")]["precision_at"][1] == expected_cos
    assert results[("procrustes", "csls")]["precision_at"][1] == expected_csls
    assert results[("procrustes", "cosine")]["n_queries"] == len(test_words) == 100
    # RCSLS keeps, of its snapshots (epochs 0 and 3), the first with the best validation
    # P@1 (CSLS); epoch 0, the Procrustes start, already scores what the exact map scores.
    val_rows = [en.index(w) for w in split.validation.source_words]
    expected_val = float(np.mean(_csls_top1(xs @ q, yt, cfg.words.csls_k)[val_rows] == val_rows))
    assert stage["selection"]["rcsls"]["validation_p1_csls"] == expected_val == 1.0
    assert results[("rcsls", "csls")]["precision_at"][1] == expected_csls

    # The library's translate_words on the map fitted to the training pairs alone.
    train = split.train.pairs
    w = procrustes(xs[[en.index(s) for s, _ in train]], yt[[de.index(t) for _, t in train]])
    np.testing.assert_allclose(w, q, atol=1e-4)
    best = translate_words(test_words, en, xs @ w, de, yt, k=1, similarity="cosine")
    gold = split.test.translations()
    p1 = np.mean([best[s][0][0] in gold[s] for s in test_words])
    assert p1 == expected_cos


def test_max_vocab_gzip_and_cli_default(tmp_path, capsys):
    words = [f"w{i}" for i in range(10)]
    vectors = np.arange(30, dtype=np.float32).reshape(10, 3)
    _write_vec(tmp_path / "a.vec", words, vectors)
    raw = (tmp_path / "a.vec").read_bytes()
    (tmp_path / "a.vec.gz").write_bytes(gzip.compress(raw))
    full = read_vec(tmp_path / "a.vec.gz", max_vocab=None)
    assert full.vectors.words == words and np.array_equal(full.vectors.vectors, vectors)
    assert not full.stopped_at_max_vocab and full.lines_read == 10
    # max_vocab counts distinct words kept (MUSE): a duplicate does not use up the budget.
    _write_vec(tmp_path / "d.vec", ["a", "a", "b", "c", "d"], vectors[:5])
    part = read_vec(tmp_path / "d.vec", max_vocab=3, chunk_lines=2)
    assert part.vectors.words == ["a", "b", "c"] and part.stopped_at_max_vocab
    assert np.array_equal(part.vectors.vectors, vectors[[0, 2, 3]]) and part.duplicates == 1
    # A truncated file is an error only when the reading reaches its end.
    (tmp_path / "t.vec").write_bytes(raw.replace(b"10 3", b"99 3", 1))
    assert read_vec(tmp_path / "t.vec", max_vocab=4).vectors.words == words[:4]
    with pytest.raises(InputDataError, match="announces 99 words"):
        read_vec(tmp_path / "t.vec", max_vocab=None)
    # The CLI's default is MUSE's max_vocab, and --help says so.
    assert (
        main(["import-vec", "--out", str(tmp_path / "wv"), "--lang", f"xx={tmp_path / 'a.vec'}"])
        == 0
    )
    assert json.loads(capsys.readouterr().out)["max_vocab"] == MUSE_MAX_VOCAB
    with pytest.raises(SystemExit):
        main(["import-vec", "--help"])
    assert f"default: MUSE's, {MUSE_MAX_VOCAB}" in capsys.readouterr().out.replace("\n", " ")
    with pytest.raises(SystemExit) as exc:
        main(["import-vec", "--out", "o", "--lang", "xx=a.vec", "--max-vocab", "0"])
    assert exc.value.code == 2 and "-1 for every word" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "line", "problem"),
    [
        (b"300\n", 1, "is not a .vec header"),
        (b"2 0\n", 1, "must be at least 1"),
        (b"a 0.1 0.2\nb 0.3 0.4\n", 1, "headerless"),
        (b"3 2\na 0.1 0.2\nb 0.1\nc 1 2\n", 3, "1 numbers after the word"),
        (b"3 2\na 0.1 0.2\nb 0.1 0.2 0.3\nc 1 2\n", 3, "3 numbers after the word"),
        (b"3 2\na 0.1 0.2\nb 1 2\nc 0.1 x\n", 4, "value 2 ('x') is not a number"),
        (b"3 2\na 0.1 0.2\nb 1 2\nc nan 0.2\n", 4, "not finite"),
        (b"3 2\na 0.1 0.2\nb 1e39 2\nc 1 2\n", 3, "not finite"),
        (b"3 2\na 0.1 0.2\n\nc 0.1 0.2\n", 3, "the line is empty"),
        (b"3 2\na 0.1 0.2\nb 1 2\n", 3, "ends after 2 vector lines"),
        (b"1 2\na 0.1 0.2\n\nb 0.1 0.2\n", 4, "beyond the 1 words"),
        (b"2 2\na 0.1 0.2\n\xff\xfeb 0.1 0.2\n", 3, "not valid UTF-8"),
        (b"2 2\na 0.1 0.2\nword\n", 3, "has a word and no numbers"),
        (b"2 2\na 0.1 0.2\n 0.1 0.2\n", 3, "it has no word"),
    ],
)
@pytest.mark.parametrize("chunk_lines", [1, 2, 20_000])
def test_malformed_vec_names_file_line_and_fix(tmp_path, content, line, problem, chunk_lines):
    path = tmp_path / "bad.vec"
    path.write_bytes(content)
    with pytest.raises(InputDataError) as err:
        read_vec(path, max_vocab=None, chunk_lines=chunk_lines)
    msg = str(err.value)
    assert f"{path}, line {line}:" in msg and problem in msg and "Fix:" in msg, msg


def test_headerless_and_empty_files_say_how_to_fix(tmp_path, capsys):
    (tmp_path / "glove.txt").write_text("the 0.1 0.2 0.3\nof 0.4 0.5 0.6\n", "utf-8")
    (tmp_path / "empty.vec").write_bytes(b"")
    with pytest.raises(InputDataError, match=r"sed -i .*1i \$\(wc -l < FILE\) 3"):
        read_vec(tmp_path / "glove.txt")
    with pytest.raises(InputDataError, match="empty.vec is empty"):
        read_vec(tmp_path / "empty.vec")
    with pytest.raises(InputDataError, match="cannot read .*missing.vec"):
        read_vec(tmp_path / "missing.vec")
    # Through the CLI: exit 2, the message on stderr, nothing written.
    out = tmp_path / "wv"
    assert main(["import-vec", "--out", str(out), "--lang", f"en={tmp_path / 'glove.txt'}"]) == 2
    assert "glove.txt, line 1:" in capsys.readouterr().err and not out.exists()
    assert main(["import-vec", "--out", str(out), "--lang", f"../x={tmp_path / 'a.vec'}"]) == 2
    assert "is not a language code" in capsys.readouterr().err
