"""The ``wikipedia`` configuration section (stage ``ingest_wikipedia``).

Declared like every section of :mod:`pipeline.config` (a frozen dataclass of
:func:`~pipeline.params.param` fields), in its own leaf module beside the Wikipedia code.
Per-wiki data (namespace aliases, disambiguation templates) is shipped in ``data/`` and read
by :mod:`pipeline.wikipedia.wikis`; the keys below extend or replace it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pipeline.params import param


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
        doc="Decompressed bytes (approximately) per task when a dump is split (by its index "
        "or at bz2 blocks).",
    )
    split_single_stream: bool = param(
        True,
        doc="Split a single-stream .bz2 dump (no multistream index) at bz2 block boundaries "
        "into tasks of about split_bytes decompressed bytes each.",
    )

    # --- which pages are articles
    namespaces: list[int] = param(default_factory=lambda: [0], doc="Namespaces kept.")
    keep_redirects: bool = param(False, doc="Keep redirect pages.")
    keep_disambiguation: bool = param(False, doc="Keep disambiguation pages.")
    disambiguation_templates: list[str] = param(
        default_factory=list,
        doc="Template names added for every language to the disambiguation templates "
        "(besides __DISAMBIG__ and its localised spellings, the per-wiki lists shipped in "
        "pipeline/wikipedia/data/disambiguation.json, the dump's own templates that hold "
        "__DISAMBIG__, and page_props / Wikidata below).",
    )
    disambiguation_templates_by_lang: dict[str, list[str]] = param(
        default_factory=dict,
        doc="lang -> template names that replace the shipped disambiguation list of that language.",
    )
    page_props: dict[str, str] = param(
        default_factory=dict,
        doc="lang -> that wiki's page_props SQL dump (*-page_props.sql[.gz]): pages with the "
        "disambiguation property are dropped.",
    )
    wikidata_disambiguation: bool = param(
        True,
        doc="Drop pages whose Wikidata item is an instance of (P31) Wikimedia disambiguation "
        "page (Q4167410); needs the Wikidata JSON dump as wikidata_sitelinks.",
    )
    file_namespaces: dict[str, list[str]] = param(
        default_factory=dict,
        doc="lang -> extra names of the File/Media namespace (added to MediaWiki's canonical "
        "names, the dump's <siteinfo> and the shipped aliases in data/namespaces.json).",
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

    # --- which wiki a dump is
    dbname: dict[str, str] = param(
        default_factory=dict,
        doc="Every dump's <siteinfo><dbname> must be the configured language's wiki (vi -> "
        "viwiki); lang -> the dbname to expect instead, for mirrors that rename a wiki; '*' "
        "accepts any.",
    )
    on_empty_language: Literal["error", "warn"] = param(
        "error",
        doc="A configured language that ends with no documents: fail, or warn (logged and "
        "reported; the other languages are written).",
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
