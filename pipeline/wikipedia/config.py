"""The ``wikipedia`` configuration section (stage ``ingest_wikipedia``).

Declared like every section of :mod:`pipeline.config` (a frozen dataclass of
:func:`~pipeline.params.param` fields), in its own leaf module because the default
disambiguation-template list is long.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pipeline.params import param

# Template names (compared case-insensitively, first letter and ``_``/space folded)
# that mark a disambiguation page, for the languages we know; extend per language.
DEFAULT_DISAMBIGUATION_TEMPLATES = [
    "disambiguation",
    "disambig",
    "dab",
    "disamb",
    "hndis",
    "geodis",
    "numberdis",
    "letter-numbercombdisambig",
    "mil-unit-dis",
    "set index article",
    "surname",
    "given name",
    "begriffsklärung",
    "homonymie",
    "desambiguación",
    "desambiguacao",
    "desambiguação",
    "disambigua",
    "пояснителна страница",
    "многозначность",
    "неоднозначность",
    "消歧義",
    "消歧义",
    "aimai",
    "曖昧さ回避",
]


@dataclass(frozen=True)
class WikipediaConfig:
    """Reading MediaWiki XML dumps into ``documents``.

    ``dumps`` maps a language code to one dump file (``*-pages-articles.xml.bz2``, the
    ``-multistream`` variant, or an uncompressed ``.xml``), or to several separated by
    commas (the numbered part files of a large wiki). Paths are read with Python file
    I/O on the executors, so they must be visible to every executor (local disk in local
    mode, a shared mount on a cluster).
    """

    dumps: dict[str, str] = param(
        default_factory=dict,
        doc="lang -> dump file(s) (pages-articles[-multistream].xml[.bz2], several separated "
        "by commas); paths visible to every executor.",
    )
    multistream_index: dict[str, str] = param(
        default_factory=dict,
        doc="lang -> the multistream index (*-multistream-index.txt.bz2) of that language's "
        "(single) multistream dump; with it, one dump splits into many tasks.",
    )
    split_bytes: int = param(
        64 * 1024 * 1024,
        lo=1,
        doc="Decompressed bytes (approximately) per task when a dump is split by its index.",
    )

    # --- which pages are articles
    namespaces: list[int] = param(default_factory=lambda: [0], doc="Namespaces kept.")
    keep_redirects: bool = param(False, doc="Keep redirect pages.")
    keep_disambiguation: bool = param(False, doc="Keep disambiguation pages.")
    disambiguation_templates: list[str] = param(
        default_factory=lambda: list(DEFAULT_DISAMBIGUATION_TEMPLATES),
        doc="Template names (case-insensitive, first letter and _/space folded) that mark a "
        "disambiguation page.",
    )
    min_text_chars: int = param(
        1, lo=0, doc="Pages whose cleaned text is shorter are dropped as too_short."
    )

    # --- wikitext to plain text
    cleaner: Literal["fast", "mwparserfromhell"] = param(
        "fast", doc="Wikitext cleaner (mwparserfromhell: slower, pip extra 'wikipedia')."
    )

    # --- concept ids (all optional; several may be combined, Wikidata ids win)
    wikidata_sitelinks: str | None = param(
        None,
        doc="Wikidata sitelinks: the wb_items_per_site SQL dump (*.sql[.gz]) or the Wikidata "
        "JSON dump (*.json[.gz|.bz2]), one path or several separated by commas.",
    )
    wikidata_format: Literal["auto", "sql", "json"] = param(
        "auto", doc="Format of wikidata_sitelinks; auto: from the file name."
    )
    langlinks: dict[str, str] = param(
        default_factory=dict,
        doc="lang -> that wiki's langlinks SQL dump; pages are linked into connected "
        "components across languages.",
    )
    inline_langlinks: bool = param(
        False, doc="Use the interlanguage links written in the wikitext ([[de:Titel]], old dumps)."
    )
    on_missing_concept: Literal["drop", "own_id"] = param(
        "drop",
        doc="A kept article without any concept: drop it (reported) or give it its own id "
        "<lang>wiki:<page_id> (monolingual statistics only).",
    )
    on_conflict: Literal["keep_first", "error"] = param(
        "keep_first",
        doc="Two articles of one language with the same concept: keep the smallest page id "
        "(reported), or fail.",
    )
    max_component_iterations: int = param(
        20, lo=1, doc="Label-propagation rounds for the langlinks components."
    )

    # --- bad input
    max_malformed_fraction: float = param(
        0.0,
        lo=0.0,
        hi=1.0,
        doc="Fail when, for any language or sitelinks/langlinks file, malformed units "
        "(unparsable pages, corrupt bz2 streams, unknown namespaces, bad SQL/JSON records) "
        "exceed this fraction of the units read; 0 fails on the first one.",
    )
    max_broken_markup_fraction: float = param(
        1.0,
        lo=0.0,
        hi=1.0,
        doc="Pages with unbalanced markup are cleaned best-effort and counted; fail when they "
        "exceed this fraction of a language's articles.",
    )
    max_examples: int = param(
        5, lo=1, doc="Offending records (with file and offset) a report or error quotes."
    )
