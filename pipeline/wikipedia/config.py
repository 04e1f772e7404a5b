"""The ``wikipedia`` configuration section (stage ``ingest_wikipedia``).

Declared with the same conventions as :mod:`pipeline.config` (frozen dataclass, typed
fields with defaults, inclusive numeric ranges in field metadata) so that registering
it there is one line: ``wikipedia: WikipediaConfig = field(default_factory=WikipediaConfig)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

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


def _bounded(default, *, lo=None, hi=None):
    return field(default=default, metadata={"lo": lo, "hi": hi})


@dataclass(frozen=True)
class WikipediaConfig:
    """Reading MediaWiki XML dumps into ``documents``.

    ``dumps`` maps a language code to one dump file (``*-pages-articles.xml.bz2``, the
    ``-multistream`` variant, or an uncompressed ``.xml``), or to several separated by
    commas (the numbered part files of a large wiki). Paths are read with Python file
    I/O on the executors, so they must be visible to every executor (local disk in local
    mode, a shared mount on a cluster).
    """

    dumps: dict[str, str] = field(default_factory=dict)
    # lang -> the multistream index (``*-multistream-index.txt.bz2``) of that language's
    # (single) multistream dump; with it, one dump splits into many tasks.
    multistream_index: dict[str, str] = field(default_factory=dict)
    # Decompressed bytes (approximately) per task when a dump is split by its index.
    split_bytes: int = _bounded(64 * 1024 * 1024, lo=1)

    # --- which pages are articles
    namespaces: list[int] = field(default_factory=lambda: [0])
    keep_redirects: bool = False
    keep_disambiguation: bool = False
    disambiguation_templates: list[str] = field(
        default_factory=lambda: list(DEFAULT_DISAMBIGUATION_TEMPLATES)
    )
    # Pages whose cleaned text is shorter than this are dropped as ``too_short``.
    min_text_chars: int = _bounded(1, lo=0)

    # --- wikitext to plain text
    cleaner: Literal["fast", "mwparserfromhell"] = "fast"

    # --- concept ids (all optional; several may be combined, Wikidata ids win)
    # Wikidata sitelinks: the ``wb_items_per_site`` SQL dump (``*.sql[.gz]``) or the
    # Wikidata JSON dump (``*.json[.gz|.bz2]``), one path or several separated by commas.
    wikidata_sitelinks: str | None = None
    wikidata_format: Literal["auto", "sql", "json"] = "auto"
    # lang -> that wiki's ``langlinks`` SQL dump; pages are linked into connected
    # components across languages.
    langlinks: dict[str, str] = field(default_factory=dict)
    # Use the interlanguage links written in the wikitext (``[[de:Titel]]``, old dumps).
    inline_langlinks: bool = False
    # A kept article without any concept: drop it (reported) or give it its own id
    # ``<lang>wiki:<page_id>`` (useful for monolingual statistics only).
    on_missing_concept: Literal["drop", "own_id"] = "drop"
    # Two articles of one language with the same concept: keep the smallest page id
    # (reported), or fail.
    on_conflict: Literal["keep_first", "error"] = "keep_first"
    # Label propagation rounds for the langlinks components (the graph's diameter is small).
    max_component_iterations: int = _bounded(20, lo=1)

    # --- bad input
    # Fail when, for any language (or any sitelinks/langlinks file), malformed units
    # (unparsable pages, truncated or corrupt bz2 streams, unknown namespaces, SQL or JSON
    # records that do not parse) exceed this fraction of the units read; 0 fails on the
    # first one.
    max_malformed_fraction: float = _bounded(0.0, lo=0.0, hi=1.0)
    # Pages whose markup is unbalanced (``{{`` or ``[[`` never closed, ...) are cleaned
    # best-effort and counted; fail when they exceed this fraction of a language's articles.
    max_broken_markup_fraction: float = _bounded(1.0, lo=0.0, hi=1.0)
    # How many offending records (with file and offset) a report or error quotes.
    max_examples: int = _bounded(5, lo=1)
