"""The parallel corpus builder from Debian's gettext catalogs (scripts/build_parallel_corpus.py):
.mo reading, cleaning, alignment across packages and domains, the output contract.

No network and no Spark: the packages are small extracted trees (and one real .deb built with
dpkg-deb) holding .mo files written here."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.conftest import REPO, SAMPLE

_spec = importlib.util.spec_from_file_location(
    "build_parallel_corpus", REPO / "scripts" / "build_parallel_corpus.py"
)
assert _spec is not None and _spec.loader is not None
build = importlib.util.module_from_spec(_spec)
sys.modules["build_parallel_corpus"] = build  # dataclasses look their module up
_spec.loader.exec_module(build)

HEADER = (
    "Project-Id-Version: test 1.0\n"
    "Content-Type: text/plain; charset={charset}\n"
    "Plural-Forms: nplurals=2; plural=(n != 1);\n"
)
Entries = dict[str, str]


def mo_bytes(entries: Entries, *, charset: str = "UTF-8", header: str | None = None) -> bytes:
    """A GNU .mo file (little-endian, revision 0, no hash table) with ``entries`` and a header.

    A plural entry is ``{"singular\\0plural": "form0\\0form1"}``; a context ``"ctx\\x04msgid"``.
    """
    header = HEADER.format(charset=charset) if header is None else header
    items = sorted({"": header, **entries}.items(), key=lambda kv: kv[0].encode(charset))
    strings = [k.encode(charset) for k, _ in items] + [v.encode(charset) for _, v in items]
    n = len(items)
    offset = 28 + 16 * n  # header (7 words), then the two (length, offset) tables
    table, blob = b"", b""
    for data in strings:
        table += struct.pack("<2I", len(data), offset + len(blob))
        blob += data + b"\0"
    return struct.pack("<7I", 0x950412DE, 0, n, 28, 28 + 8 * n, 0, 0) + table + blob


def make_tree(root: Path, package: str, catalogs: dict[tuple[str, str], bytes | Entries]) -> Path:
    """An extracted package ``root/<package>_1.0_all`` with ``{(lang dir, domain): .mo}``."""
    tree = root / f"{package}_1.0_all"
    for (lang, domain), content in catalogs.items():
        path = tree / "usr" / "share" / "locale" / lang / "LC_MESSAGES" / f"{domain}.mo"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else mo_bytes(content))
    control = tree / "DEBIAN" / "control"
    control.parent.mkdir(parents=True, exist_ok=True)
    control.write_text(
        f"Package: {package}\nVersion: 1.0\nArchitecture: all\n"
        "Maintainer: Test <test@example.org>\nDescription: test package\n"
    )
    doc = tree / "usr" / "share" / "doc" / package / "copyright"
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text("Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n"
                   "\nFiles: *\nCopyright: 2026 Test\nLicense: GPL-3+\n")  # fmt: skip
    return tree


def run_build(debs: Path, out: Path, *extra: str) -> dict[str, object]:
    """Run the script's main on ``debs``; return its manifest."""
    assert build.main(["--debs", str(debs), "--out", str(out), *extra]) == 0
    return json.loads(Path(f"{out}.manifest.json").read_text())


def rows(path: Path) -> dict[tuple[str, str], dict[str, str]]:
    """``{(English text, lang): row}`` of an output file (the English row's text as key)."""
    table = pq.read_table(path).to_pylist()
    english = {r["concept_id"]: r["text"] for r in table if r["lang"] == "en"}
    return {(english.get(r["concept_id"], r["concept_id"]), r["lang"]): r for r in table}


# --------------------------------------------------------------------------- cleaning


@pytest.mark.parametrize(
    ("raw", "vocabulary", "clean"),
    [
        ("_File", (), "File"),
        ("&Open", (), "Open"),
        ("Save _As…", (), "Save As…"),
        ("Fi&le", (), "File"),
        ("E_xit now", ("exit",), "Exit now"),
        ("E_xit now", (), "E_xit now"),  # not a known word: could be an identifier
        ("size_t is too small", ("size", "small"), "size_t is too small"),
        ("set LC_ALL first", ("set", "first"), "set LC_ALL first"),
        ("XDG_DATA_DIRS is empty", ("empty",), "XDG_DATA_DIRS is empty"),
        ("use AT&T syntax", (), "use AT&T syntax"),
        ("cmd1 && cmd2", (), "cmd1 && cmd2"),
        ("drag &amp; drop", (), "drag & drop"),
        ("<b>Bold</b> and <i>italic</i>", (), "Bold and italic"),
        ("<para>One</para><para>Two</para>", (), "One Two"),
        ("Usage: cmp <file> <file>", (), "Usage: cmp <file> <file>"),
        ("  two\n\tlines  ", (), "two lines"),
        ("a&nbsp;b &#233;t&#xE9;", (), "a b été"),
    ],
)
def test_clean_text(raw: str, vocabulary: tuple[str, ...], clean: str) -> None:
    assert build.clean_text(raw, frozenset(vocabulary)) == clean


def test_translation_of_a_marked_msgid_loses_its_lone_mid_word_underscore() -> None:
    assert build.clean_text("B_eenden", frozenset(), mnemonic=True) == "Beenden"
    assert build.clean_text("B_eenden", frozenset()) == "B_eenden"
    # two candidates: no telling which one is the marker
    assert build.clean_text("B_e time_t", frozenset(), mnemonic=True) == "B_e time_t"


def test_placeholders_are_kept_but_do_not_count_as_words() -> None:
    assert build.words("%s: %s") == []
    assert build.words("%1$s of %(name)s in {dir} at %1") == ["of", "in", "at"]
    assert build.clean_text("Cannot open %s: %m", frozenset()) == "Cannot open %s: %m"


# --------------------------------------------------------------------------- reading .mo


def test_read_catalog_skips_header_plurals_copies_empties_and_credits() -> None:
    data = mo_bytes(
        {
            "Open the file": "Datei öffnen",
            "%d file deleted\0%d files deleted": "%d Datei gelöscht\0%d Dateien gelöscht",
            "menu\x04Close the window": "Fenster schließen",
            "Left as it is": "Left as it is",
            "Not translated yet": "",
            "translator-credits": "Erika Mustermann",
            "NAME OF TRANSLATORS\x04Your names": "Erika Mustermann",
        }
    )
    pairs = dict(build.read_catalog(data, "x.mo"))
    assert pairs == {
        "Open the file": "Datei öffnen",
        "%d file deleted": "%d Datei gelöscht",
        "Close the window": "Fenster schließen",
    }


def test_latin1_header_is_read_with_its_charset() -> None:
    header = HEADER.format(charset="ISO-8859-1") + "Last-Translator: Martin von Löwis\n"
    data = mo_bytes({"Open the file": "Datei öffnen"}, charset="ISO-8859-1", header=header)
    assert dict(build.read_catalog(data, "m4.mo")) == {"Open the file": "Datei öffnen"}


@pytest.mark.parametrize(
    "data",
    [
        b"this is not a catalog",
        mo_bytes({"Open the file": "Datei öffnen"})[:40],  # truncated: strings past the end
        mo_bytes({"Open the file": "x"}, header="Plural-Forms: nplurals=2; plural=n +;\n"),
        # the body is Latin-1, the header says UTF-8
        mo_bytes({"Ouvrir": "Öffnen"}, charset="ISO-8859-1", header=HEADER.format(charset="UTF-8")),
    ],
    ids=["bad magic", "truncated", "bad plural formula", "wrong charset"],
)
def test_unreadable_catalog_error_names_the_file(data: bytes) -> None:
    with pytest.raises(build.CatalogError, match=r"pkg_1\.0_all\.deb:.*/de/LC_MESSAGES/d\.mo"):
        build.read_catalog(data, "pkg_1.0_all.deb:usr/share/locale/de/LC_MESSAGES/d.mo")


# --------------------------------------------------------------------------- alignment


@pytest.fixture
def debs(tmp_path: Path) -> Path:
    """Three packages; one concept is in three domains, one only in German, one too short."""
    root = tmp_path / "debs"
    make_tree(root, "alpha", {
        ("de", "alpha"): {
            "_Open the selected file": "Die gewählte Datei ö_ffnen",
            "Close all open windows": "Alle offenen Fenster schließen",
            "Open file": "Datei öffnen",  # two words: too short
            "%s: %s": "%s: %s (de)",  # format only
            "Only German has this one": "Nur Deutsch hat diesen",
        },
        ("fr", "alpha"): {
            "_Open the selected file": "_Ouvrir le fichier choisi",
            "Close all open windows": "Close all open windows",  # untranslated copy
        },
        ("es", "alpha"): {"Close all open windows": "Cerrar todas las ventanas"},
    })  # fmt: skip
    make_tree(root, "beta", {
        ("de", "beta"): {"Open the selected file": "Gewählte Datei öffnen"},
        ("de_DE", "beta"): {"Open the selected file": "Nicht diese"},  # de wins over de_DE
        ("fr_FR", "beta"): {"Open the selected file": "Ouvrir le fichier sélectionné"},
        ("es", "beta"): {"Open the selected file": "Abrir el archivo elegido"},
    })  # fmt: skip
    make_tree(root, "gamma", {
        ("de", "gamma"): {"Open the &selected file": "Gewählte Datei öffnen"},
        ("es", "gamma"): {"Open the &selected file": "Abrir el fichero seleccionado"},
    })  # fmt: skip
    return root


def test_one_concept_per_english_text_across_packages_and_domains(
    debs: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out" / "corpus.parquet"
    manifest = run_build(debs, out)
    got = rows(out)
    english = "Open the selected file"
    assert {lang for text, lang in got if text == english} == {"en", "de", "fr", "es"}
    # de: 2 votes (beta, gamma) against 1 (alpha); title: the smallest source with that text
    assert got[(english, "de")]["text"] == "Gewählte Datei öffnen"
    assert got[(english, "de")]["title"] == "beta/beta"
    # fr: 1 vote each; the smallest string wins (alpha's: its "_" marker is gone)
    assert got[(english, "fr")]["text"] == "Ouvrir le fichier choisi"
    assert got[(english, "fr")]["title"] == "alpha/alpha"
    # es: 1 vote each; the smallest string wins
    assert got[(english, "es")]["text"] == "Abrir el archivo elegido"
    assert got[(english, "en")]["title"] == "alpha/alpha"
    cid = hashlib.sha1(english.encode()).hexdigest()
    assert got[(english, "de")]["concept_id"] == cid
    assert got[(english, "de")]["doc_id"] == f"de:{cid}"
    # the untranslated French copy is dropped; short and format-only strings are dropped
    assert ("Close all open windows", "fr") not in got
    assert {text for text, _ in got} == {
        english,
        "Close all open windows",
        "Only German has this one",
    }
    totals = manifest["totals"]
    assert totals["concepts"] == 3
    assert totals["rows_per_language"] == {"en": 3, "de": 3, "fr": 1, "es": 2}
    assert totals["concepts_with_all_languages"] == 1
    alpha = manifest["packages"][0]
    assert alpha["package"] == "alpha" and alpha["version"] == "1.0"
    assert alpha["segments_per_language"] == {"en": 3, "de": 3, "es": 1, "fr": 1}
    assert alpha["licenses"] == ["GPL-3+"]
    beta = manifest["packages"][1]  # fr from fr_FR (no fr), de from de (not de_DE)
    assert beta["segments_per_language"] == {"en": 1, "de": 1, "es": 1, "fr": 1}


def test_min_langs_and_min_words(debs: Path, tmp_path: Path) -> None:
    out = tmp_path / "corpus.parquet"
    manifest = run_build(debs, out, "--min-langs", "3")
    assert {text for text, _ in rows(out)} == {"Open the selected file", "Close all open windows"}
    assert manifest["totals"]["concepts_per_n_languages"] == {"3": 1, "4": 1}
    run_build(debs, out, "--min-words", "2")
    assert ("Open file", "de") in rows(out)


def test_langs_without_english_keep_the_english_pivot(debs: Path, tmp_path: Path) -> None:
    out = tmp_path / "corpus.parquet"
    run_build(debs, out, "--langs", "de,es")
    got = pq.read_table(out).to_pylist()
    assert {r["lang"] for r in got} == {"de", "es"}
    assert len({r["concept_id"] for r in got}) == 2  # Only German... has one language


def test_output_schema_is_the_document_contract(debs: Path, tmp_path: Path) -> None:
    out = tmp_path / "corpus.parquet"
    run_build(debs, out)
    assert pq.read_schema(out).equals(pq.read_schema(SAMPLE), check_metadata=True)


def test_reruns_are_byte_identical_and_sorted(debs: Path, tmp_path: Path) -> None:
    first, second = tmp_path / "a" / "c.parquet", tmp_path / "b" / "c.parquet"
    run_build(debs, first)
    run_build(debs, second, "--jobs", "1")  # the default reads packages in several threads
    assert first.read_bytes() == second.read_bytes()
    table = pq.read_table(first).to_pylist()
    keys = [(r["concept_id"], r["lang"]) for r in table]
    assert keys == sorted(keys)
    assert not list(first.parent.glob(".*partial"))


def test_corrupt_catalog_is_skipped_or_stops_the_build_with_strict(
    debs: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    make_tree(debs, "broken", {("de", "broken"): b"\xde\x12\x04\x95garbage"})
    out = tmp_path / "corpus.parquet"
    manifest = run_build(debs, out)
    broken = next(p for p in manifest["packages"] if p["package"] == "broken")
    assert broken["skipped_catalogs"][0]["file"].endswith("locale/de/LC_MESSAGES/broken.mo")
    assert manifest["totals"]["concepts"] == 3  # the other packages are still read
    with caplog.at_level(logging.ERROR):
        code = build.main(["--debs", str(debs), "--out", str(tmp_path / "x.parquet"), "--strict"])
    assert code == 1
    assert "broken_1.0_all:usr/share/locale/de/LC_MESSAGES/broken.mo" in caplog.text
    assert not (tmp_path / "x.parquet").exists()


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb")
def test_real_deb_reads_like_its_tree(debs: Path, tmp_path: Path) -> None:
    from_trees = tmp_path / "trees.parquet"
    run_build(debs, from_trees)
    packed = tmp_path / "packed"
    packed.mkdir()
    for tree in sorted(debs.iterdir()):
        deb = packed / f"{tree.name}.deb"
        cmd = ["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(tree), str(deb)]
        subprocess.run(cmd, check=True, capture_output=True)
    from_debs = tmp_path / "debs.parquet"
    manifest = run_build(packed, from_debs)
    assert from_debs.read_bytes() == from_trees.read_bytes()
    assert manifest["packages"][0]["file"] == "alpha_1.0_all.deb"
    assert len(manifest["packages"][0]["sha256"]) == 64


def test_packages_filter_and_bad_arguments(debs: Path, tmp_path: Path) -> None:
    out = tmp_path / "corpus.parquet"
    manifest = run_build(debs, out, "--packages", "gamma,missing")
    assert [p["package"] for p in manifest["packages"]] == ["gamma"]
    assert manifest["failed_packages"] == ["missing"]
    for bad in (["--langs", "en"], ["--min-langs", "5"], ["--min-words", "0"]):
        with pytest.raises(SystemExit):
            build.parse_args(["--out", str(out), *bad])
