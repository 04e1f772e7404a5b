"""Lexicon parsing (located errors) and the seeded split by source word."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from pipeline.errors import InputDataError
from pipeline.text.tokenizer import Tokenizer
from pipeline.wordmap.lexicon import Lexicon, parse_lexicon_lines, read_lexicon, split_lexicon


def test_parse_several_translations_comments_and_duplicates():
    lex = parse_lexicon_lines(["# header\n", "dog\thund\n", "\n", "dog\trüde\n", "dog\thund\n"])
    assert lex.pairs == (("dog", "hund"), ("dog", "rüde"))
    assert lex.translations() == {"dog": ["hund", "rüde"]}


def test_muse_and_tab_formats_parse_to_the_same_pairs(tmp_path: Path):
    """MUSE's dictionaries (en-de.txt: one 'source target' per line, a space or a tab) and
    ours (tab-separated) give one lexicon; a file may mix them, line by line."""
    pairs = [("dog", "hund"), ("dog", "rüde"), ("the", "die"), ("日本", "にほん"), ("ça", "das")]
    ours = tmp_path / "ours.tsv"
    ours.write_text("# ours\n" + "".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    muse = tmp_path / "en-de.txt"
    muse.write_bytes(
        b"\xef\xbb\xbf"  # a byte-order mark is ignored
        + "".join(f"{s} {t}\r\n" for s, t in pairs).encode("utf-8")
        + b"dog   hund\n\n"  # a repeated pair, a run of spaces, a blank line
    )
    mixed = tmp_path / "mixed.txt"
    mixed.write_text(
        "".join(f"{s}\t{t}\n" if i % 2 else f" {s} {t} \n" for i, (s, t) in enumerate(pairs)),
        encoding="utf-8",
    )
    expected = tuple(sorted(pairs))
    assert read_lexicon(ours).pairs == expected
    assert read_lexicon(muse) == read_lexicon(ours) == read_lexicon(mixed)


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("dog", "1 word and no tab"),
        ("hot dog würstchen", "3 space-separated words and no tab"),
        ("dog\thund\textra", "3 tab-separated field"),
        ("dog\t", "empty field"),
        ("hot dog\twürstchen", "inner whitespace"),
    ],
)
def test_malformed_line_is_located(tmp_path: Path, line: str, problem: str):
    path = tmp_path / "lex.tsv"
    path.write_text(f"cat\tkatze\n{line}\n", encoding="utf-8")
    with pytest.raises(InputDataError) as err:
        read_lexicon(path)
    msg = str(err.value)
    assert str(path) in msg and "line 2" in msg and repr(line) in msg and problem in msg
    assert "source_word<TAB>target_word" in msg and "'source_word target_word' (MUSE's)" in msg
    assert "multi-word entries are not supported" in msg


def test_empty_and_missing_files(tmp_path: Path):
    (tmp_path / "e.tsv").write_text("# nothing\n", encoding="utf-8")
    with pytest.raises(InputDataError, match="no word pairs"):
        read_lexicon(tmp_path / "e.tsv")
    with pytest.raises(InputDataError, match="cannot read lexicon"):
        read_lexicon(tmp_path / "missing.tsv")


def test_split_is_by_source_word_seeded_and_complete():
    pairs = tuple(sorted((f"w{i:03d}", f"t{i}{j}") for i in range(100) for j in range(i % 3 + 1)))
    lex = Lexicon(pairs)
    a = split_lexicon(lex, n_test=20, n_validation=10, seed=3)
    b = split_lexicon(lex, n_test=20, n_validation=10, seed=3)
    c = split_lexicon(lex, n_test=20, n_validation=10, seed=4)
    assert a == b and a.test != c.test
    words = [set(p.source_words) for p in (a.train, a.validation, a.test)]
    assert [len(w) for w in words] == [70, 10, 20]
    assert not (words[0] & words[1] or words[0] & words[2] or words[1] & words[2])
    assert sorted(a.train.pairs + a.validation.pairs + a.test.pairs) == list(pairs)


def test_build_lexicon_parses_ding_entries():
    spec = importlib.util.spec_from_file_location(
        "build_lexicon", Path(__file__).parents[1] / "scripts" / "build_lexicon.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    line = "Hund {m} [zool.] | Hunde {pl}; Köter :: dog; hot dog | dogs\n"
    assert sorted(mod.entry_pairs(line)) == [("Hund", "dog"), ("Hunde", "dogs"), ("Köter", "dogs")]
    assert mod.entry_pairs("aas fressen {vi} :: to scavenge\n") == []
    assert mod.entry_pairs("fressen {vt} :: to eat\n") == [("fressen", "eat")]
    assert mod.entry_pairs("a | b :: c\n") == []  # misaligned parts are skipped
    assert mod.tokenised_words(["Hund", "K-9", "Straße"], Tokenizer()) == {
        "Hund": "hund",
        "Straße": "straße",
    }
