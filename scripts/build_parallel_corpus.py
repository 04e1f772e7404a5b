#!/usr/bin/env python3
"""Build a segment-level parallel corpus from the gettext translations Debian packages ship.

Why: the bundled DDTP sample is *comparable* (whole descriptions, translated loosely); the
user-interface strings of Debian's packages are *parallel*: every ``msgstr`` of a ``.mo``
catalog is a translation of its ``msgid``, the English original. Thousands of them in many
languages come with any Debian mirror, under the packages' free licences, with no web crawl.

Input: ``.deb`` files, downloaded with ``apt-get download`` into ``--cache`` (existing files
are reused) or read from ``--debs DIR`` (``.deb`` files and/or extracted package trees; no
network). Every ``<lang>/LC_MESSAGES/<domain>.mo`` a package holds is read (mostly under
``usr/share/locale``; a catalog of ``de_DE`` stands in for ``de`` when a package has no ``de``
one); symbolic links are skipped.

Parsing uses the standard library's ``gettext.GNUTranslations``. The header entry (empty
msgid) is skipped; a plural entry contributes its singular form only (index 0); ``msgctxt``
is dropped from the key; empty translations and translations equal to the msgid (copies) are
dropped. ``msgfmt`` leaves fuzzy entries out of ``.mo`` files unless asked, so there are none
to skip. A catalog whose header holds non-UTF-8 bytes (old Latin-1 catalogs; CPython decodes
the header as UTF-8) is read again with those bytes of the header replaced by ``?``. A
catalog that still cannot be read is skipped with a warning naming it (listed in the
manifest), or stops the build with ``--strict``.

Cleaning, the same for every language: gettext accelerator markers are removed (``_File`` and
``&Open`` become ``File`` and ``Open``; a ``_`` inside a word, as in ``E_xit``, only when the
word without it occurs elsewhere in that language's strings, or, in a translation of a msgid
that had a marker, when it is the translation's only candidate; so identifiers such as
``time_t``, ``LC_ALL`` or ``XDG_DATA_DIRS`` stay, and so do ``&&``, ``AT&T`` and entities).
Then markup tags go (a tag the string closes or writes self-closing: Pango's ``<b>...</b>``,
KDE's ``<para>``, ``<nl/>``; a lone ``<file>`` of a usage line stays), named and numeric
character references are decoded (``&amp;``, ``&nbsp;``, ``&#233;``) and whitespace is
collapsed. printf-style placeholders (``%s``, ``%1$d``, ``%(name)s``, ``%1``, ``{name}``) are
kept as they are: they are part of the segment, in every language. An English segment is
kept when it has at least ``--min-words`` words (runs of letters) once the placeholders are
set aside; a translation when it has a letter outside its placeholders and differs from the
English text. So format-only strings (``%s: %s``) go.

Alignment: one concept per normalised English text, whichever packages and domains it comes
from; ``concept_id`` is the SHA-1 of that text. Each language keeps its most frequent
translation of it among the catalogs (ties: the smallest string), and ``title`` names the
``package/domain`` it came from (for English: the smallest source among all). Concepts in
fewer than ``--min-langs`` of the requested languages are dropped.

Output: one zstd-compressed Parquet file with exactly the columns of the project's document
contract (``data/sample/ddtp_en_de_fr_es.parquet``): ``doc_id`` (``f"{lang}:{concept_id}"``),
``concept_id``, ``lang``, ``title``, ``text``, sorted by (``concept_id``, ``lang``), written
atomically, byte-identical across reruns on the same input; and a JSON manifest beside it:
per package the version, file, domains, segments per language and licences, the totals, the
command line and the date. ``--jobs`` packages are read at once (threads overlapping the
``dpkg-deb`` processes); the result does not depend on it. The run of bench/README.md ("A
parallel corpus from Debian's translations": 110,482 concepts, 77.8 s on 2 cores)::

    python scripts/build_parallel_corpus.py --langs en,de,fr,es \\
        --out /tmp/parallel/debian_l10n_en_de_fr_es.parquet --cache /tmp/parallel/debs
"""

from __future__ import annotations

import argparse
import datetime as dt
import gettext
import hashlib
import html.entities
import io
import json
import logging
import os
import re
import shlex
import struct
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq

logger = logging.getLogger("build_parallel_corpus")

DEFAULT_LANGS = "en,de,fr,es"
PIVOT = "en"  # the language of every msgid
DEFAULT_MIN_WORDS = 3
DEFAULT_MIN_LANGS = 2
COMPRESSION_LEVEL = 9  # zstd: 3 s for 408k rows (14.8 MB); level 19 took 85 s for 13.5 MB

# Debian bookworm (12) packages that ship .mo catalogs in German, French and Spanish: 149
# names, each checked with `apt-get download` on 2026-11-29 (all downloaded, 206 MB in all)
# and its catalogs listed with `dpkg-deb -c`; every one gives segments of >= 3 words. Where
# the catalogs live in a separate package, that one is listed (e2fsprogs-l10n,
# util-linux-locales, gnupg-l10n, libc-l10n, ...).
DEFAULT_PACKAGES: tuple[str, ...] = (
    # command-line tools and system libraries
    "apt", "aptitude-common", "apt-listchanges", "aspell", "bash", "binutils-common", "bison",
    "coreutils", "cpio", "cryptsetup-bin", "debconf-i18n", "dialog", "diffutils", "dpkg",
    "e2fsprogs-l10n", "findutils", "flex", "gawk", "gcc-12-locales", "gettext", "gettext-base",
    "git", "gnupg-l10n", "grep", "kbd", "libc-l10n", "libgnutls30", "libgpg-error-l10n",
    "libpam-runtime", "libparted-i18n", "libpopt0", "login", "lynx-common", "m4", "make",
    "man-db", "mc-data", "nano", "procps", "psmisc", "recode", "sed", "sudo", "systemd", "tar",
    "tasksel-data", "texinfo", "util-linux-locales", "vim-runtime", "wdiff", "wget", "xz-utils",
    # data: codes, keyboards, MIME types, settings, weather locations
    "gsettings-desktop-schemas", "iso-codes", "libgweather-4-common", "shared-mime-info",
    "xkb-data",
    # desktop libraries and services
    "evolution-data-server-common", "gnome-desktop3-data", "gstreamer1.0-plugins-good",
    "gvfs-common", "libexif12", "libgdk-pixbuf2.0-common", "libglib2.0-data",
    "libgnomekbd-common", "libgoa-1.0-common", "libgphoto2-l10n", "libgstreamer1.0-0",
    "libgtk-3-common", "libgtk-4-common", "libgtk2.0-common", "libgtksourceview-4-common",
    "libpeas-common", "libwnck-3-common", "libxfce4ui-common", "modemmanager",
    "network-manager", "packagekit", "polkitd", "pulseaudio", "tracker", "udisks2",
    # GNOME applications
    "baobab", "brasero-common", "cheese-common", "eog", "evince-common", "evolution-common",
    "file-roller", "gdm3", "gedit-common", "gnome-calculator", "gnome-characters",
    "gnome-clocks", "gnome-contacts", "gnome-control-center-data", "gnome-disk-utility",
    "gnome-font-viewer", "gnome-keyring", "gnome-logs", "gnome-maps", "gnome-screenshot",
    "gnome-session-common", "gnome-settings-daemon-common", "gnome-shell-common",
    "gnome-software-common", "gnome-system-monitor", "gnome-terminal-data", "gparted-common",
    "meld", "mutter-common", "nautilus-data", "network-manager-gnome", "rhythmbox-data",
    "seahorse", "simple-scan", "synaptic", "totem-common", "transmission-gtk", "yelp",
    "zenity-common",
    # Xfce, MATE, Cinnamon, LXDE, KDE
    "caja-common", "cinnamon-l10n", "dolphin", "konsole", "lightdm", "lxpanel-data",
    "mate-desktop-common", "mousepad", "pcmanfm", "pluma-common", "ristretto", "thunar-data",
    "xfce4-panel", "xfce4-power-manager-data", "xfce4-session", "xfce4-settings",
    "xfce4-terminal", "xfwm4",
    # other applications (GTK, wxWidgets, Qt, Python)
    "audacity-data", "deluge-common", "filezilla-common", "geany-common", "gimp-data",
    "gnucash-common", "hexchat-common", "inkscape", "pidgin-data", "vlc-l10n",
)  # fmt: skip

# the document contract, as the DDTP sample's builder writes it
sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_ddtp_sample import SCHEMA  # noqa: E402

MO_PATH_RE = re.compile(r"(?:^|/)(?P<dir>[^/]+)/LC_MESSAGES/(?P<domain>[^/]+)\.mo$")
CONTEXT_SEP = "\x04"
# msgids whose "translation" is the translators' names, not a translation
CREDIT_MSGIDS = frozenset({"translator-credits", "translator_credits", "Your names", "Your emails"})
CREDIT_CONTEXTS = frozenset({"NAME OF TRANSLATORS", "EMAIL OF TRANSLATORS"})

WORD_RE = re.compile(r"[^\W\d_]+")  # a run of letters
UNDERSCORE_TOKEN_RE = re.compile(r"\w*_\w*")  # a run of \w (letters, digits, _) with a '_'
AMPERSAND_RE = re.compile(r"&(?:#\d+;|#x[0-9A-Fa-f]+;|[A-Za-z][A-Za-z0-9]*;|&|(?=[^\W\d_]))")
TAG_RE = re.compile(r"<(?P<close>/?)(?P<name>[A-Za-z][\w-]*)(?:\s[^<>]*)?(?P<empty>/?)>")
# tags that separate text (replaced by a space; the others by nothing)
BLOCK_TAGS = frozenset({"br", "p", "para", "nl", "li", "item", "list", "ul", "ol", "div", "title"})
ENTITY_RE = re.compile(
    r"&(?:(?P<name>[A-Za-z][A-Za-z0-9]*)|#(?P<dec>\d+)|#x(?P<hex>[0-9A-Fa-f]+));"
)
PLACEHOLDER_RE = re.compile(
    r"%(?:\d+\$)?[-+ #0']*(?:\*(?:\d+\$)?|\d+)?(?:\.(?:\*(?:\d+\$)?|\d+))?"
    r"(?:hh|h|ll|l|L|q|j|z|Z|t|I64|I32|I)?[diouxXeEfFgGaAcCsSpnm%]"  # printf: %s %1$d %-8.3f
    r"|%\([A-Za-z_]\w*\)[-+ #0]*\d*(?:\.\d+)?[diouxXeEfFgGcrsa]"  # Python: %(name)s
    r"|%<\w+>"  # gettext's system-dependent %<PRIu64>
    r"|%\d+"  # Qt/KDE: %1
    r"|\{\w*\}"  # Python/glib: {name} {0} {}
)


class CatalogError(ValueError):
    """A ``.mo`` catalog that cannot be read; the message names the file."""


class PackageError(RuntimeError):
    """A package that cannot be read (``dpkg-deb`` failed, or no such file)."""


@dataclass(frozen=True)
class PackageSource:
    """One package to read: a ``.deb`` file or an extracted package tree."""

    package: str
    version: str
    path: Path


@dataclass(frozen=True)
class Catalog:
    """One language's translations of one gettext domain in one package.

    ``pairs`` holds (msgid, msgstr) with contexts dropped, singular forms only, sorted.
    """

    package: str
    domain: str
    lang: str
    member: str
    pairs: tuple[tuple[str, str], ...]

    @property
    def source(self) -> str:
        """The ``title`` of the segments it gives: ``package/domain``."""
        return f"{self.package}/{self.domain}"


@dataclass
class PackageContents:
    """What one package gave: its catalogs, licences and the catalogs that were unreadable."""

    source: PackageSource
    catalogs: list[Catalog]
    licenses: list[str]
    skipped: list[dict[str, str]]


@dataclass(frozen=True)
class Segment:
    """A cleaned English text, and whether its msgid had a mnemonic ``_`` marker."""

    text: str
    mnemonic: bool


@dataclass
class ConceptVotes:
    """The translations of one English text, counted over every catalog that has it."""

    sources: set[str] = field(default_factory=set)
    texts: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    titles: dict[tuple[str, str], str] = field(default_factory=dict)

    def add(self, lang: str, text: str, source: str) -> None:
        """Count one catalog's translation; remember the smallest source that gave it."""
        self.sources.add(source)
        self.texts[lang][text] += 1
        key = (lang, text)
        if key not in self.titles or source < self.titles[key]:
            self.titles[key] = source


@dataclass
class Corpus:
    """The aligned rows (sorted by concept_id, lang) and what each package contributed."""

    columns: dict[str, list[str]]
    segments_per_package: dict[str, dict[str, int]]


# --------------------------------------------------------------------------- packages


def deb_filename_fields(name: str) -> tuple[str, str]:
    """(package, version) of ``pkg_version[_arch][.deb]`` (apt writes ``:`` as ``%3a``)."""
    parts = name.removesuffix(".deb").split("_")
    return parts[0], unquote(parts[1]) if len(parts) > 1 else ""


def cached_debs(cache: Path, packages: Iterable[str]) -> dict[str, Path]:
    """The ``.deb`` already in ``cache`` for each package (the last by name if several)."""
    found: dict[str, Path] = {}
    for package in packages:
        hits = sorted(p for p in cache.glob(f"{package}_*.deb") if p.name.count("_") >= 2)
        hits = [p for p in hits if deb_filename_fields(p.name)[0] == package]
        if len(hits) > 1:
            logger.warning("several .deb of %s in %s; using %s", package, cache, hits[-1].name)
        if hits:
            found[package] = hits[-1]
    return found


def apt_download(packages: Sequence[str], cache: Path) -> bool:
    """Run ``apt-get download`` for ``packages`` in ``cache``; True when it succeeded."""
    proc = subprocess.run(
        ["apt-get", "download", "-q", *packages],
        cwd=cache,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        logger.warning("apt-get download %s: %s", " ".join(packages), proc.stderr.strip())
    return proc.returncode == 0


def download_packages(packages: Sequence[str], cache: Path) -> tuple[list[Path], list[str]]:
    """The ``.deb`` of each package, downloading the ones ``cache`` lacks; also the failures.

    One ``apt-get download`` for all missing packages; if it fails (an unknown name stops the
    whole command), each is tried alone so the others still come.
    """
    cache.mkdir(parents=True, exist_ok=True)
    found = cached_debs(cache, packages)
    missing = [p for p in packages if p not in found]
    if missing:
        logger.info("downloading %d of %d packages into %s", len(missing), len(packages), cache)
        if not apt_download(missing, cache):
            for package in missing:
                apt_download([package], cache)
        found.update(cached_debs(cache, missing))
    failed = [p for p in packages if p not in found]
    return [found[p] for p in packages if p in found], failed


def deb_fields(path: Path) -> tuple[str, str]:
    """(Package, Version) from a ``.deb``'s control file (``dpkg-deb -f``)."""
    try:
        proc = subprocess.run(
            ["dpkg-deb", "-f", str(path), "Package", "Version"],
            capture_output=True,
            text=True,
            check=False,
        )
    except FileNotFoundError as exc:
        raise PackageError(f"{path}: reading a .deb needs dpkg-deb ({exc})") from exc
    if proc.returncode != 0:
        raise PackageError(f"{path}: dpkg-deb -f failed: {proc.stderr.strip()}")
    fields = dict(line.split(": ", 1) for line in proc.stdout.splitlines() if ": " in line)
    return fields["Package"], fields["Version"]


def tree_fields(path: Path) -> tuple[str, str]:
    """(Package, Version) of an extracted tree: its ``DEBIAN/control``, else its name."""
    control = path / "DEBIAN" / "control"
    if control.is_file():
        lines = control.read_text(encoding="utf-8").splitlines()
        fields = dict(line.split(": ", 1) for line in lines if ": " in line)
        if "Package" in fields:
            return fields["Package"], fields.get("Version", "")
    return deb_filename_fields(path.name)


def source_of(path: Path) -> PackageSource:
    """Describe one ``.deb`` file or extracted tree."""
    package, version = deb_fields(path) if path.is_file() else tree_fields(path)
    return PackageSource(package, version, path)


def local_sources(
    debs: Path, packages: Sequence[str] | None
) -> tuple[list[PackageSource], list[str]]:
    """The packages in ``debs`` (``.deb`` files and directories), only ``packages`` if given."""
    if not debs.is_dir():
        raise SystemExit(f"--debs {debs}: not a directory")
    entries = sorted(p for p in debs.iterdir() if p.is_dir() or p.suffix == ".deb")
    sources = [source_of(p) for p in entries]
    if packages is None:
        return sources, []
    by_name = {s.package: s for s in sources}
    return [by_name[p] for p in packages if p in by_name], [p for p in packages if p not in by_name]


# --------------------------------------------------------------------------- reading


def member_filter(package: str, langs: Sequence[str]) -> Callable[[str], bool]:
    """Which package members to read: the catalogs in ``langs`` and the copyright file."""
    copyright_path = f"usr/share/doc/{package}/copyright"

    def wanted(path: str) -> bool:
        match = MO_PATH_RE.search(path) if path.endswith(".mo") else None
        if match is not None:
            return any(lang_rank(match["dir"], lang) is not None for lang in langs)
        return path == copyright_path

    return wanted


def deb_members(path: Path, wanted: Callable[[str], bool]) -> Iterator[tuple[str, bytes]]:
    """(path, bytes) of the wanted regular files of a ``.deb``, streamed from ``dpkg-deb``."""
    with subprocess.Popen(
        ["dpkg-deb", "--fsys-tarfile", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None  # both are PIPE
        with tarfile.open(fileobj=proc.stdout, mode="r|*") as tar:
            for member in tar:
                name = member.name.removeprefix("./")
                if member.isfile() and wanted(name):
                    handle = tar.extractfile(member)
                    if handle is not None:
                        yield name, handle.read()
        error = proc.stderr.read().decode(errors="replace").strip()
    if proc.returncode != 0:
        raise PackageError(f"{path}: dpkg-deb --fsys-tarfile failed: {error}")


def tree_members(root: Path, wanted: Callable[[str], bool]) -> Iterator[tuple[str, bytes]]:
    """(path, bytes) of the wanted regular files of an extracted tree (links skipped)."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for filename in sorted(filenames):
            full = Path(dirpath, filename)
            name = full.relative_to(root).as_posix()
            if not full.is_symlink() and wanted(name):
                yield name, full.read_bytes()


def lang_rank(directory: str, lang: str) -> int | None:
    """0 for the locale directory ``lang``, 1 for ``lang_LANG`` (``de_DE``), else None."""
    if directory == lang:
        return 0
    if directory == f"{lang}_{lang.upper()}":
        return 1
    return None


def pick_catalogs(
    members: dict[str, bytes], langs: Sequence[str]
) -> dict[tuple[str, str], tuple[str, bytes]]:
    """``{(domain, lang): (path, bytes)}``: per domain and language the best locale directory."""
    best: dict[tuple[str, str], tuple[int, str]] = {}
    for path in sorted(members):
        match = MO_PATH_RE.search(path)
        if match is None:
            continue
        for lang in langs:
            rank = lang_rank(match["dir"], lang)
            key = (match["domain"], lang)
            if rank is not None and (key not in best or rank < best[key][0]):
                best[key] = (rank, path)
    return {key: (path, members[path]) for key, (_, path) in sorted(best.items())}


def mo_byte_order(data: bytes, name: str) -> str:
    """``<`` or ``>``: the byte order of a ``.mo`` file, from its magic number."""
    magic = data[:4]
    if magic == b"\xde\x12\x04\x95":
        return "<"
    if magic == b"\x95\x04\x12\xde":
        return ">"
    raise CatalogError(f"{name}: not a .mo catalog (bad magic number {magic.hex() or 'none'})")


def ascii_header(data: bytes, name: str) -> bytes:
    """``data`` with every non-ASCII byte of the header entry replaced by ``?``.

    CPython decodes the header as UTF-8 before it knows the catalog's charset, so a Latin-1
    header (a translator's name) makes the whole catalog unreadable. The replacement keeps
    every offset; the fields that matter (charset, plural forms) are ASCII.
    """
    order = mo_byte_order(data, name)
    try:
        n, originals, translations = struct.unpack_from(order + "3I", data, 8)
        for i in range(n):
            length, _ = struct.unpack_from(order + "2I", data, originals + 8 * i)
            if length == 0:
                size, offset = struct.unpack_from(order + "2I", data, translations + 8 * i)
                patched = bytearray(data)
                header = data[offset : offset + size]
                patched[offset : offset + size] = bytes(b if b < 0x80 else 0x3F for b in header)
                return bytes(patched)
    except struct.error as exc:
        raise CatalogError(f"{name}: truncated .mo catalog ({exc})") from exc
    return data


def gnu_catalog(data: bytes) -> dict[object, str]:
    """The entries ``gettext.GNUTranslations`` reads from a ``.mo`` file.

    Its ``_catalog``: the class offers no public way to list the entries it holds.
    """
    return gettext.GNUTranslations(io.BytesIO(data))._catalog  # type: ignore[attr-defined]


def parse_mo(data: bytes, name: str) -> dict[object, str]:
    """A ``.mo`` file's entries: ``{msgid: msgstr, (msgid, n): plural form n}``.

    Retried with :func:`ascii_header` when the header is not UTF-8; any other failure is a
    :class:`CatalogError` naming ``name``.
    """
    mo_byte_order(data, name)
    try:
        try:
            return gnu_catalog(data)
        except UnicodeDecodeError:
            return gnu_catalog(ascii_header(data, name))
    except (OSError, ValueError, LookupError, struct.error) as exc:
        raise CatalogError(f"{name}: unreadable .mo catalog ({type(exc).__name__}: {exc})") from exc


def catalog_pairs(catalog: dict[object, str]) -> tuple[tuple[str, str], ...]:
    """(msgid, msgstr) pairs: singular forms, contexts dropped, header/empty/copies/credits out."""
    pairs: set[tuple[str, str]] = set()
    for key, value in catalog.items():
        if isinstance(key, tuple) and key[1] != 0:
            continue  # a plural form other than the singular
        full = key[0] if isinstance(key, tuple) else key
        context, _, msgid = str(full).rpartition(CONTEXT_SEP)
        if not msgid or not value or value == msgid:
            continue
        if msgid in CREDIT_MSGIDS or context in CREDIT_CONTEXTS:
            continue
        pairs.add((msgid, value))
    return tuple(sorted(pairs))


def read_catalog(data: bytes, name: str) -> tuple[tuple[str, str], ...]:
    """The (msgid, msgstr) pairs of one ``.mo`` file; :class:`CatalogError` names ``name``."""
    return catalog_pairs(parse_mo(data, name))


def copyright_licenses(text: str) -> list[str]:
    """The licence names of a machine-readable (DEP-5) copyright file, in order, unique."""
    if not text.startswith("Format:"):
        return []
    fields = (line.partition(":") for line in text.splitlines())
    names = (value.strip() for name, _, value in fields if name == "License")
    return list(dict.fromkeys(n for n in names if n))


def read_package(source: PackageSource, langs: Sequence[str], *, strict: bool) -> PackageContents:
    """Read a package's catalogs in ``langs`` (not the pivot) and its licences."""
    reader = deb_members if source.path.is_file() else tree_members
    members = dict(reader(source.path, member_filter(source.package, langs)))
    copyright_text = members.pop(f"usr/share/doc/{source.package}/copyright", b"")
    catalogs: list[Catalog] = []
    skipped: list[dict[str, str]] = []
    for (domain, lang), (path, data) in pick_catalogs(members, langs).items():
        name = f"{source.path.name}:{path}"
        try:
            pairs = read_catalog(data, name)
        except CatalogError as exc:
            if strict:
                raise
            logger.warning("skipped %s", exc)
            skipped.append({"file": name, "reason": str(exc)})
            continue
        catalogs.append(Catalog(source.package, domain, lang, path, pairs))
    licenses = copyright_licenses(copyright_text.decode("utf-8", errors="replace"))
    return PackageContents(source, catalogs, licenses, skipped)


# --------------------------------------------------------------------------- cleaning


def build_vocabulary(texts: Iterable[str]) -> frozenset[str]:
    """Lower-cased letter runs of ``texts``: the words a mid-word ``_`` marker may split."""
    return frozenset(WORD_RE.findall("\n".join(texts).lower()))


def strip_underscores(text: str, vocabulary: frozenset[str], *, mnemonic: bool = False) -> str:
    """Drop GTK mnemonic underscores: ``_File``, and ``E_xit`` when ``exit`` is a known word.

    A candidate is a token (run of ``\\w``) with exactly one ``_``, followed by a letter;
    tokens with several underscores (``XDG_DATA_DIRS``) are never touched. A candidate loses
    its ``_`` when the ``_`` starts it, or when both sides are letters and either the joined
    word is in ``vocabulary`` or ``mnemonic`` is set (the source text had a marker) and it is
    the text's only candidate: a translation of ``E_xit`` such as ``B_eenden``.
    """
    if "_" not in text:
        return text
    candidates = [t for t in UNDERSCORE_TOKEN_RE.findall(text) if is_underscore_candidate(t)]
    lone = mnemonic and len(candidates) == 1

    def fix(match: re.Match[str]) -> str:
        token = match[0]
        if not is_underscore_candidate(token):
            return token
        head, _, tail = token.partition("_")
        joined = head + tail
        if not head or (joined.isalpha() and (lone or joined.lower() in vocabulary)):
            return joined
        return token

    return UNDERSCORE_TOKEN_RE.sub(fix, text)


def is_underscore_candidate(token: str) -> bool:
    """Whether a ``\\w`` token may hold a mnemonic: one ``_``, followed by a letter."""
    return token.count("_") == 1 and token.partition("_")[2][:1].isalpha()


def strip_ampersands(text: str) -> str:
    """Drop Qt/wxWidgets accelerator ampersands: ``&Open``, ``Fi&le``.

    Entities (``&amp;``), ``&&`` and an ``&`` between two capitals (``AT&T``) stay.
    """

    def fix(match: re.Match[str]) -> str:
        if match[0] != "&":
            return match[0]
        before = text[match.start() - 1] if match.start() else ""
        after = text[match.end()]
        return match[0] if before.isupper() and after.isupper() else ""

    return AMPERSAND_RE.sub(fix, text)


def markup_tags(text: str) -> frozenset[str]:
    """Tag names used as markup in ``text``: closed somewhere (``</b>``), self-closing
    (``<nl/>``) or ``<br>``. A lone ``<file>`` is a placeholder of a usage line, not markup."""
    names = set()
    for match in TAG_RE.finditer(text):
        name = match["name"].lower()
        if match["close"] or match["empty"] or name == "br":
            names.add(name)
    return frozenset(names)


def strip_markup(text: str) -> str:
    """Remove Pango/HTML/KDE (KUIT) tags; a line, paragraph or item tag becomes a space."""
    markup = markup_tags(text)
    if not markup:
        return text

    def fix(match: re.Match[str]) -> str:
        name = match["name"].lower()
        if name not in markup:
            return match[0]
        return " " if name in BLOCK_TAGS else ""

    return TAG_RE.sub(fix, text)


def decode_entities(text: str) -> str:
    """Decode named (HTML5: ``&amp;``, ``&nbsp;``...) and numeric character references."""

    def fix(match: re.Match[str]) -> str:
        if match["name"]:
            return html.entities.html5.get(match["name"] + ";", match[0])
        code = int(match["dec"]) if match["dec"] else int(match["hex"], 16)
        return chr(code) if 0 < code < 0x110000 else match[0]

    return ENTITY_RE.sub(fix, text)


def clean_text(text: str, vocabulary: frozenset[str], *, mnemonic: bool = False) -> str:
    """One segment, cleaned: accelerators, tags and entities out, whitespace collapsed.

    ``mnemonic``: the English source had a ``_`` marker (see :func:`strip_underscores`).
    """
    text = strip_underscores(text, vocabulary, mnemonic=mnemonic)
    if "&" in text:
        text = strip_ampersands(text)
    if "<" in text:
        text = strip_markup(text)
    if "&" in text:
        text = decode_entities(text)
    return " ".join(text.split())


def words(text: str) -> list[str]:
    """The letter runs of ``text`` outside its placeholders."""
    if "%" in text or "{" in text:
        text = PLACEHOLDER_RE.sub(" ", text)
    return WORD_RE.findall(text)


# --------------------------------------------------------------------------- alignment


def vocabularies(catalogs: Sequence[Catalog], langs: Sequence[str]) -> dict[str, frozenset[str]]:
    """One vocabulary per language (the pivot's from the msgids, the others' from msgstrs)."""
    pivot = build_vocabulary(msgid for c in catalogs for msgid, _ in c.pairs)
    vocab = {
        lang: build_vocabulary(s for c in catalogs if c.lang == lang for _, s in c.pairs)
        for lang in langs
        if lang != PIVOT
    }
    return {PIVOT: pivot, **vocab}


def english_segment(msgid: str, vocabulary: frozenset[str], min_words: int) -> Segment | None:
    """The cleaned English text of a msgid and whether it had a ``_`` marker; None if too short."""
    text = clean_text(msgid, vocabulary)
    if len(words(text)) < min_words:
        return None
    marker = strip_underscores(msgid, vocabulary).count("_") < msgid.count("_")
    return Segment(text, marker)


def collect_votes(
    catalogs: Sequence[Catalog], langs: Sequence[str], min_words: int
) -> tuple[dict[str, ConceptVotes], dict[str, dict[str, int]]]:
    """Clean every pair; count each English text's translations; count segments per package."""
    vocab = vocabularies(catalogs, langs)
    english_of: dict[str, Segment | None] = {}
    concepts: dict[str, ConceptVotes] = defaultdict(ConceptVotes)
    per_package: dict[str, Counter[str]] = defaultdict(Counter)
    english_seen: dict[str, set[str]] = defaultdict(set)
    for catalog in sorted(catalogs, key=lambda c: (c.package, c.domain, c.lang)):
        for msgid, msgstr in catalog.pairs:
            if msgid not in english_of:
                english_of[msgid] = english_segment(msgid, vocab[PIVOT], min_words)
            english = english_of[msgid]
            if english is None:
                continue
            text = clean_text(msgstr, vocab[catalog.lang], mnemonic=english.mnemonic)
            if text == english.text or not words(text):
                continue
            concepts[english.text].add(catalog.lang, text, catalog.source)
            per_package[catalog.package][catalog.lang] += 1
            english_seen[catalog.package].add(english.text)
    segments = {
        pkg: {PIVOT: len(english_seen[pkg]), **dict(sorted(counts.items()))}
        for pkg, counts in per_package.items()
    }
    return concepts, segments


def concept_id(english: str) -> str:
    """The concept's id: SHA-1 (hex) of its normalised English text."""
    return hashlib.sha1(english.encode("utf-8")).hexdigest()


def most_common(counts: Counter[str]) -> str:
    """The most frequent text; ties go to the smallest string (deterministic)."""
    return min(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0]


def concept_rows(english: str, votes: ConceptVotes, langs: Sequence[str]) -> list[dict[str, str]]:
    """The rows of one concept: one per requested language that has a text for it."""
    cid = concept_id(english)
    rows = []
    if PIVOT in langs:
        rows.append({"lang": PIVOT, "title": min(votes.sources), "text": english})
    for lang, counts in votes.texts.items():
        text = most_common(counts)
        rows.append({"lang": lang, "title": votes.titles[(lang, text)], "text": text})
    return [{"doc_id": f"{r['lang']}:{cid}", "concept_id": cid, **r} for r in rows]


def build_corpus(
    catalogs: Sequence[Catalog], langs: Sequence[str], *, min_words: int, min_langs: int
) -> Corpus:
    """Align the catalogs into rows sorted by (concept_id, lang), concepts in >= min_langs."""
    concepts, segments = collect_votes(catalogs, langs, min_words)
    rows = []
    for english, votes in concepts.items():
        doc_rows = concept_rows(english, votes, langs)
        if len(doc_rows) >= min_langs:
            rows.extend(doc_rows)
    rows.sort(key=lambda r: (r["concept_id"], r["lang"]))
    columns = {name: [r[name] for r in rows] for name in SCHEMA.names}
    return Corpus(columns, segments)


# --------------------------------------------------------------------------- output


def corpus_totals(columns: dict[str, list[str]], langs: Sequence[str]) -> dict[str, object]:
    """Concepts, rows per language, concepts per number of languages and pairwise overlaps."""
    by_concept: dict[str, set[str]] = defaultdict(set)
    for cid, lang in zip(columns["concept_id"], columns["lang"]):
        by_concept[cid].add(lang)
    n_langs = Counter(len(v) for v in by_concept.values())
    rows = Counter(columns["lang"])
    pairs = {
        f"{a}-{b}": sum(1 for v in by_concept.values() if a in v and b in v)
        for i, a in enumerate(langs)
        for b in langs[i + 1 :]
    }
    return {
        "concepts": len(by_concept),
        "rows": len(columns["lang"]),
        "rows_per_language": {lang: rows[lang] for lang in langs},
        "concepts_per_n_languages": {str(k): n_langs[k] for k in sorted(n_langs)},
        "concepts_with_all_languages": n_langs[len(langs)],
        "pairwise_concepts": pairs,
    }


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Write through ``write(temporary path)`` in the same directory, then rename over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        write(tmp)
        os.replace(tmp, path)  # a reader never sees a half-written file
    finally:
        tmp.unlink(missing_ok=True)


def write_parquet(columns: dict[str, list[str]], path: Path) -> None:
    """One zstd-compressed Parquet file with the document contract's schema."""
    table = pa.Table.from_pydict(columns, schema=SCHEMA)
    atomic_write(
        path,
        lambda tmp: pq.write_table(
            table, tmp, compression="zstd", compression_level=COMPRESSION_LEVEL
        ),
    )


def sha256_of(path: Path) -> str:
    """SHA-256 (hex) of a file."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def package_record(contents: PackageContents, segments: dict[str, int]) -> dict[str, object]:
    """The manifest's entry for one package."""
    source = contents.source
    record: dict[str, object] = {
        "package": source.package,
        "version": source.version,
        "file": source.path.name,
        "domains": sorted({c.domain for c in contents.catalogs}),
        "catalogs": len(contents.catalogs),
        "segments_per_language": segments,
        "licenses": contents.licenses,
    }
    if source.path.is_file():
        record["sha256"] = sha256_of(source.path)
    if contents.skipped:
        record["skipped_catalogs"] = contents.skipped
    return record


def write_manifest(path: Path, manifest: dict[str, object]) -> None:
    """The manifest as indented UTF-8 JSON, written atomically."""
    text = json.dumps(manifest, indent=2, ensure_ascii=False) + "\n"
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


# --------------------------------------------------------------------------- main


def split_list(value: str) -> list[str]:
    """A comma-separated command-line list, without blanks and duplicates, in order."""
    return list(dict.fromkeys(v.strip() for v in value.split(",") if v.strip()))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line interface (checked here: languages, thresholds)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the Parquet file to write")
    parser.add_argument("--manifest", type=Path, help="default: <out>.manifest.json")
    parser.add_argument("--langs", default=DEFAULT_LANGS, help="comma-separated locale names")
    parser.add_argument("--packages", help="comma-separated; default: the curated list")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--debs", type=Path, help="read .deb files / extracted trees here")
    source.add_argument("--cache", type=Path, help="download into (and reuse) this directory")
    parser.add_argument("--min-words", type=int, default=DEFAULT_MIN_WORDS)
    parser.add_argument("--min-langs", type=int, default=DEFAULT_MIN_LANGS)
    parser.add_argument("--strict", action="store_true", help="stop at an unreadable catalog")
    parser.add_argument(
        "--jobs", type=int, default=min(4, os.cpu_count() or 1), help="packages read at once"
    )
    args = parser.parse_args(argv)
    args.langs = split_list(args.langs)
    args.packages = split_list(args.packages) if args.packages else None
    if not [lang for lang in args.langs if lang != PIVOT]:
        parser.error(f"--langs needs a language besides {PIVOT} (the msgids' language)")
    if not 1 <= args.min_langs <= len(args.langs):
        parser.error(f"--min-langs must be in 1..{len(args.langs)} (the number of --langs)")
    if args.min_words < 1:
        parser.error("--min-words must be >= 1")
    if args.jobs < 1:
        parser.error("--jobs must be >= 1")
    return args


def resolve_sources(
    args: argparse.Namespace, download_dir: Path
) -> tuple[list[PackageSource], list[str]]:
    """The packages to read, from ``--debs`` or downloaded; and the names that failed."""
    if args.debs is not None:
        return local_sources(args.debs, args.packages)
    debs, failed = download_packages(args.packages or list(DEFAULT_PACKAGES), download_dir)
    return [source_of(p) for p in debs], failed


def read_packages(
    sources: Sequence[PackageSource], langs: Sequence[str], *, strict: bool, jobs: int = 1
) -> list[PackageContents]:
    """Read every package, in order, logging progress (package i/n).

    ``jobs`` threads overlap the packages' decompression (``dpkg-deb`` processes, most of the
    time); the results keep the order of ``sources``.
    """
    wanted = [lang for lang in langs if lang != PIVOT]
    read = []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = pool.map(lambda source: read_package(source, wanted, strict=strict), sources)
        for i, contents in enumerate(results, 1):
            log_package(i, len(sources), contents)
            read.append(contents)
    return read


def log_package(i: int, n: int, contents: PackageContents) -> None:
    """One progress line: package i/n, its version and catalogs per language."""
    source = contents.source
    per_lang = dict(sorted(Counter(c.lang for c in contents.catalogs).items()))
    logger.info(
        "[%d/%d] %s %s: %d catalogs %s",
        i,
        n,
        source.package,
        source.version,
        len(contents.catalogs),
        per_lang,
    )


def make_manifest(
    args: argparse.Namespace,
    packages: Sequence[PackageContents],
    corpus: Corpus,
    failed: Sequence[str],
    seconds: dict[str, float],
) -> dict[str, object]:
    """Everything needed to know where the corpus came from and how big it is."""
    segments = corpus.segments_per_package
    return {
        "command": shlex.join(["scripts/build_parallel_corpus.py", *args.argv]),
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "languages": args.langs,
        "pivot": PIVOT,
        "min_words": args.min_words,
        "min_langs": args.min_langs,
        "output": {"path": str(args.out), "bytes": args.out.stat().st_size},
        "totals": corpus_totals(corpus.columns, args.langs),
        "seconds": {name: round(value, 1) for name, value in seconds.items()},
        "failed_packages": list(failed),
        "packages": [package_record(p, segments.get(p.source.package, {})) for p in packages],
    }


def run(args: argparse.Namespace, download_dir: Path) -> dict[str, object]:
    """Read the packages, align, write the Parquet file and the manifest; return the latter."""
    clock = [time.monotonic()]
    seconds: dict[str, float] = {}

    def lap(name: str) -> None:
        clock.append(time.monotonic())
        seconds[name] = clock[-1] - clock[-2]

    sources, failed = resolve_sources(args, download_dir)
    for name in failed:
        logger.warning("package %s: not found / not downloadable, left out", name)
    lap("download")
    packages = read_packages(sources, args.langs, strict=args.strict, jobs=args.jobs)
    lap("read")
    catalogs = [c for p in packages for c in p.catalogs]
    corpus = build_corpus(catalogs, args.langs, min_words=args.min_words, min_langs=args.min_langs)
    lap("align")
    write_parquet(corpus.columns, args.out)
    lap("write")
    seconds["total"] = clock[-1] - clock[0]
    manifest = make_manifest(args, packages, corpus, failed, seconds)
    write_manifest(args.manifest or Path(f"{args.out}.manifest.json"), manifest)
    return manifest


def log_summary(out: Path, langs: Sequence[str], manifest: dict[str, object]) -> None:
    """The summary line(s) on stderr: sizes, and seconds per phase."""
    totals, seconds = manifest["totals"], manifest["seconds"]
    assert isinstance(totals, dict) and isinstance(seconds, dict)  # built by make_manifest
    logger.info(
        "wrote %s: %d concepts, %d rows %s, %d concepts in all %d languages",
        out,
        totals["concepts"],
        totals["rows"],
        totals["rows_per_language"],
        totals["concepts_with_all_languages"],
        len(langs),
    )
    logger.info("seconds: %s", seconds)


def main(argv: Sequence[str] | None = None) -> int:
    """Build the corpus; print progress and a summary to stderr."""
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    arguments = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(arguments)
    args.argv = arguments
    try:
        if args.cache is not None:
            manifest = run(args, args.cache)
        else:
            with tempfile.TemporaryDirectory(prefix="debian-l10n-") as tmp:
                manifest = run(args, Path(tmp))
    except (CatalogError, PackageError) as exc:
        logger.error("error: %s", exc)
        return 1
    log_summary(args.out, args.langs, manifest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
