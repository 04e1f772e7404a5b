"""Executor-side parsing for ``ingest_wikipedia``: work items to rows of the parsed frame.

Each :class:`~pipeline.wikipedia.plan.WorkItem` streams its byte range through
:func:`pipeline.wikipedia.dump.iter_pages`, classifies every page (article / dropped with a
reason / malformed) and cleans the articles' wikitext, all in one pass that yields one row
per page or problem (:data:`PARSED_SCHEMA`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    ArrayType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from pipeline.wikipedia import dump, sitelinks, wikis
from pipeline.wikipedia.config import WikipediaConfig
from pipeline.wikipedia.plan import WorkItem
from pipeline.wikipedia.wikitext import (
    DisambiguationDetector,
    SiteNames,
    get_cleaner,
    template_names_used,
    transcludes_magic_word,
)

PARSED_SCHEMA = StructType(
    [
        StructField("lang", StringType(), False),
        # page: an article (status kept) or a page dropped on purpose (status dropped);
        # problem: something malformed (reason = its kind); broken: markup repaired.
        StructField("kind", StringType(), False),
        StructField("status", StringType(), True),
        StructField("reason", StringType(), True),
        StructField("page_id", LongType(), True),
        StructField("title", StringType(), True),
        StructField("text", StringType(), True),
        StructField("redirect", StringType(), True),
        StructField("links", ArrayType(StringType(), False), True),
        StructField("location", StringType(), True),
        StructField("detail", StringType(), True),
        # kept articles: the templates they transclude (normalised names), to drop those
        # using a template of the dump that sets __DISAMBIG__.
        StructField("templates", ArrayType(StringType(), False), True),
    ]
)
# Besides "page", "problem" and "broken", PARSED_SCHEMA rows of kind "template" name a
# template that sets a disambiguation magic word (reason "disambiguation_template") or a
# redirect between templates (reason "template_redirect", target in ``redirect``), and
# one row of kind "item" per work item counts its pages (``page_id``) with the file in
# ``location`` and the <dbname> it holds in ``detail``.

DROP_REASONS = ("namespace", "redirect", "disambiguation", "not_wikitext", "too_short")

Row = tuple
"""One row of :data:`PARSED_SCHEMA`, in its column order."""


def _row(lang: str, kind: str, **kw: Any) -> Row:
    return (
        lang,
        kind,
        kw.get("status"),
        kw.get("reason"),
        kw.get("page_id"),
        kw.get("title"),
        kw.get("text"),
        kw.get("redirect"),
        kw.get("links"),
        kw.get("location"),
        kw.get("detail"),
        kw.get("templates"),
    )


def _template_prefixes(spaces: dict[int, str]) -> list[str]:
    return [*wikis.CANONICAL_TEMPLATE, *([spaces[10]] if spaces.get(10) else [])]


def _detector(lang: str, spaces: dict[int, str], cfg: WikipediaConfig) -> DisambiguationDetector:
    names = cfg.disambiguation_templates_by_lang.get(lang, wikis.disambiguation_templates(lang))
    return DisambiguationDetector(
        [*names, *cfg.disambiguation_templates],
        template_prefixes=_template_prefixes(spaces),
    )


class _PageClassifier:
    """Rows for the pages of one wiki: what the settings keep, and what the wiki's
    namespaces make of links and templates (renewed by :meth:`use_namespaces` when the
    dump's ``<siteinfo>`` is read)."""

    def __init__(self, lang: str, spaces: dict[int, str], cfg: WikipediaConfig) -> None:
        self.lang = lang
        self.cfg = cfg
        self.clean = get_cleaner(cfg.cleaner)
        self.keep_ns = set(cfg.namespaces)
        self.want_links = cfg.inline_langlinks
        self.want_redirects = cfg.inline_langlinks or bool(cfg.langlinks)
        self.find_templates = not cfg.keep_disambiguation
        self.use_namespaces(spaces)

    def use_namespaces(self, spaces: dict[int, str]) -> None:
        """Namespace names (key -> local name) of the wiki."""
        self.spaces = spaces
        extra_files = self.cfg.file_namespaces.get(self.lang, ())
        self.site = SiteNames.from_namespaces(spaces, self.lang, extra_files)
        self.is_disambiguation = _detector(self.lang, spaces, self.cfg)
        self.prefixes = frozenset(wikis.normalize_name(p) for p in _template_prefixes(spaces))

    def problem_row(self, p: dump.Problem) -> Row:
        return _row(
            self.lang,
            "problem",
            reason=p.kind,
            page_id=p.page_id,
            title=p.title,
            location=str(p.location),
            detail=p.detail,
        )

    def page_rows(self, p: dump.Page) -> Iterator[Row]:
        """The page's row (kept or dropped with its reason); templates also say whether
        they mark disambiguation pages."""
        lang = self.lang
        if p.ns == 10 and self.find_templates:
            yield from _template_rows(lang, p, self.is_disambiguation.magic_words)
        if p.ns not in self.keep_ns:
            yield _row(lang, "page", status="dropped", reason="namespace", page_id=p.page_id)
        elif p.redirect is not None and not self.cfg.keep_redirects:
            target = sitelinks.normalize_title(p.redirect) if self.want_redirects else None
            yield _row(
                lang,
                "page",
                status="dropped",
                reason="redirect",
                page_id=p.page_id,
                title=p.title,
                redirect=target,
            )
        elif p.model != "wikitext":
            yield _row(lang, "page", status="dropped", reason="not_wikitext", page_id=p.page_id)
        elif not self.cfg.keep_disambiguation and self.is_disambiguation(p.text):
            yield _row(lang, "page", status="dropped", reason="disambiguation", page_id=p.page_id)
        else:
            yield from self._article_rows(p)

    def _article_rows(self, p: dump.Page) -> Iterator[Row]:
        """A candidate article: cleaned, then kept or dropped as too short; repaired markup
        adds a ``broken`` row."""
        lang, loc = self.lang, str(p.location)
        cleaned = self.clean(p.text, self.site)
        if cleaned.broken:
            yield _row(
                lang,
                "broken",
                reason="broken_markup",
                page_id=p.page_id,
                title=p.title,
                location=loc,
                detail="; ".join(cleaned.broken),
            )
        if len(cleaned.text) < self.cfg.min_text_chars:
            yield _row(lang, "page", status="dropped", reason="too_short", page_id=p.page_id)
            return
        links = None
        if self.want_links:
            links = sorted(
                {f"{k}\t{sitelinks.normalize_title(t)}" for k, t in cleaned.langlinks if t}
            )
        templates = template_names_used(p.text, self.prefixes) if self.find_templates else None
        yield _row(
            lang,
            "page",
            status="kept",
            page_id=p.page_id,
            title=p.title,
            text=cleaned.text,
            links=links,
            location=loc,
            templates=templates,
        )


def parse_item(item: WorkItem, cfg: WikipediaConfig) -> Iterator[Row]:
    """Rows (:data:`PARSED_SCHEMA`) for every page and problem of one work item, then one
    ``item`` row counting its pages."""
    pages_of = _PageClassifier(item.lang, dict(item.namespaces), cfg)
    n_pages, dbname = 0, item.dbname
    try:
        pages = dump.iter_pages(item.path, item.start, item.end, pages_of.spaces, item.blocks)
        for p in pages:
            if isinstance(p, dump.SiteInfo):
                pages_of.use_namespaces(p.namespaces or pages_of.spaces)
                dbname = p.dbname or dbname
                continue
            n_pages += 1
            if isinstance(p, dump.Problem):
                yield pages_of.problem_row(p)
            else:
                yield from pages_of.page_rows(p)
    except dump.DumpError as exc:
        yield _row(
            item.lang,
            "problem",
            reason="not_a_dump",
            location=f"{item.path} at byte {item.start}",
            detail=str(exc),
        )
    yield _row(item.lang, "item", page_id=n_pages, location=item.path, detail=dbname)


def _template_rows(lang: str, page: dump.Page, magic_words: list[str]) -> Iterator[Row]:
    """A template that sets a disambiguation magic word, or a redirect between templates."""
    name = wikis.normalize_name(page.title.partition(":")[2] or page.title)
    if page.redirect is not None:
        _, sep, target = page.redirect.partition(":")
        if sep and target:
            yield _row(
                lang,
                "template",
                reason="template_redirect",
                title=name,
                redirect=wikis.normalize_name(target),
            )
    elif transcludes_magic_word(page.text, magic_words):
        yield _row(lang, "template", reason="disambiguation_template", title=name)


def parse_dumps(spark: SparkSession, cfg: WikipediaConfig, items: list[WorkItem]) -> DataFrame:
    """The parsed frame (:data:`PARSED_SCHEMA`), computed on the executors."""
    sc = spark.sparkContext
    conf = cfg  # a frozen dataclass of plain values: cheap to pickle
    rdd = sc.parallelize(items, max(1, len(items))).flatMap(lambda it: parse_item(it, conf))
    return spark.createDataFrame(rdd, PARSED_SCHEMA)
