"""The ``wikipedia`` configuration section (stage ``ingest_wikipedia``).

Declared with the same conventions as :mod:`pipeline.config` (frozen dataclass, typed
fields with defaults, inclusive numeric ranges in field metadata) so that registering
it there is one line: ``wikipedia: WikipediaConfig = field(default_factory=WikipediaConfig)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


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
    # Disambiguation pages are recognised by (1) the __DISAMBIG__ magic word and its
    # localised spellings, (2) the templates of each wiki shipped in
    # pipeline/wikipedia/data/disambiguation.json (30 largest Wikipedias and a few more),
    # (3) templates of the dump itself whose wikitext holds __DISAMBIG__ (and redirects to
    # them), (4) page_props / Wikidata (below) when given. These keys extend (2):
    # template names added for every language ...
    disambiguation_templates: list[str] = field(default_factory=list)
    # ... and lang -> template names that replace the shipped list of that language.
    disambiguation_templates_by_lang: dict[str, list[str]] = field(default_factory=dict)
    # lang -> that wiki's ``page_props`` SQL dump (``*-page_props.sql[.gz]``): pages with
    # the ``disambiguation`` property (set by the Disambiguator extension) are dropped.
    page_props: dict[str, str] = field(default_factory=dict)
    # Drop pages whose Wikidata item is an instance of (P31) Wikimedia disambiguation page
    # (Q4167410); needs the Wikidata JSON dump as wikidata_sitelinks (the SQL sitelinks
    # table has no statements).
    wikidata_disambiguation: bool = True
    # lang -> extra names of the File/Media namespace (added to MediaWiki's canonical
    # names, the dump's <siteinfo> and the shipped aliases in data/namespaces.json).
    file_namespaces: dict[str, list[str]] = field(default_factory=dict)
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

    # --- which wiki a dump is
    # Every dump's <siteinfo><dbname> must be the configured language's wiki (``vi`` ->
    # ``viwiki``). lang -> the dbname to expect instead, for mirrors that rename a wiki;
    # ``"*"`` accepts any dbname for that language.
    dbname: dict[str, str] = field(default_factory=dict)
    # A configured language that ends with no documents: ``error`` (default) or ``warn``
    # (logged and reported; the other languages are written).
    on_empty_language: Literal["error", "warn"] = "error"
    # Split a single-stream ``.bz2`` dump (no multistream index) at bz2 block boundaries
    # into tasks of about split_bytes decompressed bytes each.
    split_single_stream: bool = True

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
