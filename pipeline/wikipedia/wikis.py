"""Per-wiki knowledge shipped as data: namespace aliases, disambiguation templates, dbnames.

The tables live in ``pipeline/wikipedia/data/*.json`` (sources and licence in its
README) and are read once per process with :mod:`importlib.resources`, so they travel
with the package to executors (also inside the ``--py-files`` zip). Everything here can
be extended or overridden from the ``wikipedia`` configuration section; this module only
answers "what does MediaWiki / Wikipedia define for language ``lang``".
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

# MediaWiki's canonical (English) names, valid on every wiki whatever its language.
CANONICAL_FILE = ("file", "image")
CANONICAL_MEDIA = ("media",)
CANONICAL_CATEGORY = ("category",)
CANONICAL_TEMPLATE = ("template",)

# A link target ending in one of these, behind a namespace prefix we do not know, is a
# file link ($wgFileExtensions of Wikimedia wikis plus common image and media types).
MEDIA_EXTENSIONS = frozenset(
    [
        "jpg",
        "jpeg",
        "jpe",
        "png",
        "gif",
        "svg",
        "tif",
        "tiff",
        "webp",
        "bmp",
        "xcf",
        "ico",
        "apng",
        "avif",
        "heic",
        "ogg",
        "oga",
        "ogv",
        "opus",
        "webm",
        "mp3",
        "mp4",
        "m4a",
        "wav",
        "flac",
        "mid",
        "midi",
        "mpg",
        "mpeg",
        "pdf",
        "djvu",
        "djv",
        "stl",
    ]
)

# Wikis whose database name is not ``<code with - as _>wiki``.
_DBNAME_EXCEPTIONS = {
    "be-tarask": "be_x_oldwiki",
    "be-x-old": "be_x_oldwiki",
    "nb": "nowiki",
    "zh-yue": "zh_yuewiki",
    "yue": "zh_yuewiki",
    "zh-min-nan": "zh_min_nanwiki",
    "nan": "zh_min_nanwiki",
    "lzh": "zh_classicalwiki",
    "zh-classical": "zh_classicalwiki",
    "gsw": "alswiki",
    "rup": "roa_rupwiki",
    "sgs": "bat_smgwiki",
    "vro": "fiu_vrowiki",
}


def normalize_name(name: str) -> str:
    """How MediaWiki compares namespace and template names: case-folded, ``_`` = space."""
    return " ".join(name.replace("_", " ").split()).casefold()


@cache
def _load(name: str) -> dict[str, Any]:
    text = resources.files("pipeline.wikipedia").joinpath("data", name).read_text("utf-8")
    return json.loads(text)


def shipped_languages() -> list[str]:
    """Languages with shipped namespace and template tables."""
    return sorted(k for k in _load("namespaces.json") if not k.startswith("_"))


def file_namespace_names(lang: str | None) -> frozenset[str]:
    """Normalised File and Media namespace names for ``lang``: canonical + local + aliases."""
    row = _load("namespaces.json").get(lang or "", {})
    names = [*CANONICAL_FILE, *CANONICAL_MEDIA, *row.get("file", []), *row.get("media", [])]
    return frozenset(normalize_name(n) for n in names)


def category_namespace_names(lang: str | None) -> frozenset[str]:
    """Normalised Category namespace names for ``lang``: canonical + local + aliases."""
    row = _load("namespaces.json").get(lang or "", {})
    return frozenset(normalize_name(n) for n in (*CANONICAL_CATEGORY, *row.get("category", [])))


# Many smaller wikis keep (a redirect to) these names for their disambiguation template.
FALLBACK_DISAMBIGUATION_TEMPLATES = ("Disambig", "Disambiguation")


def disambiguation_templates(lang: str | None) -> list[str]:
    """Shipped disambiguation template names of ``lang``; for a wiki without a shipped
    list, :data:`FALLBACK_DISAMBIGUATION_TEMPLATES` (the dump's own templates setting
    ``__DISAMBIG__`` are found whatever their names, see the stage)."""
    table = _load("disambiguation.json")["templates"]
    return list(table.get(lang or "", FALLBACK_DISAMBIGUATION_TEMPLATES))


def disambiguation_magic_words() -> list[str]:
    """``__DISAMBIG__`` and its localised spellings (Disambiguator extension)."""
    return list(_load("disambiguation.json")["magic_words"])


def expected_dbname(lang: str) -> str:
    """The Wikimedia database name of ``lang``'s Wikipedia (``vi`` -> ``viwiki``)."""
    return _DBNAME_EXCEPTIONS.get(lang, lang.replace("-", "_") + "wiki")
