"""Stage ``ingest_wikipedia``: MediaWiki XML dumps (+ sitelinks) to ``documents``.

Plan (driver): for each language, each dump file becomes one work item, or, with a
multistream index, many items of whole bz2 streams (:func:`plan_work`); the driver
reads only headers and index offsets. Parse (executors): each item streams its byte
range through :func:`pipeline.wikipedia.dump.iter_pages`, classifies every page
(article / dropped with a reason / malformed) and cleans the articles' wikitext, all
in one pass that yields one row per page or problem (:data:`PARSED_SCHEMA`). The parsed
frame is persisted, counted per language and checked against the tolerances; only then
are concept ids attached (:func:`assign_concepts`) and ``documents`` written atomically.
Nothing is written when a check fails, and the error names the file and offset.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from pipeline.errors import InputDataError
from pipeline.io.datasets import write_dataset, write_options
from pipeline.io.schemas import DOCUMENTS
from pipeline.wikipedia import dump, sitelinks, wikis
from pipeline.wikipedia.config import WikipediaConfig
from pipeline.wikipedia.wikitext import (
    DisambiguationDetector,
    SiteNames,
    get_cleaner,
    template_names_used,
    transcludes_magic_word,
)

log = logging.getLogger(__name__)

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


@dataclass(frozen=True)
class WorkItem:
    """One task's input: ``path[start:end]`` of ``lang``'s dump (``end`` None: to EOF).

    ``blocks``: a single-stream ``.bz2`` split at bz2 blocks; the item reads the pages
    starting in the blocks that start in ``[start, end)``
    (:func:`pipeline.wikipedia.dump.iter_pages` with ``blocks=True``).
    """

    lang: str
    path: str
    start: int = 0
    end: int | None = None
    namespaces: tuple[tuple[int, str], ...] = ()
    blocks: bool = False
    dbname: str | None = None


# --------------------------------------------------------------------------- planning


def dump_paths(cfg: WikipediaConfig) -> dict[str, list[str]]:
    """``cfg.dumps`` as lang -> list of files, checked to exist."""
    if not cfg.dumps:
        raise InputDataError(
            "wikipedia.dumps is empty. Fix: map each language to its dump, e.g. "
            "--set 'wikipedia.dumps={en: /data/enwiki-20240601-pages-articles.xml.bz2}'."
        )
    out = {}
    for lang, spec in sorted(cfg.dumps.items()):
        paths = [p.strip() for p in str(spec).split(",") if p.strip()]
        for p in paths:
            if not os.path.isfile(p):
                raise InputDataError(
                    f"wikipedia.dumps.{lang}: {p} does not exist or is not a file. Fix: point "
                    "it at a *-pages-articles[-multistream].xml.bz2 file (several: "
                    "comma-separated)."
                )
        out[lang] = paths
    for lang in cfg.multistream_index:
        if lang not in out:
            raise InputDataError(
                f"wikipedia.multistream_index.{lang} is set but wikipedia.dumps has no {lang!r}"
            )
    return out


def check_dbname(lang: str, path: str, info: dump.SiteInfo, cfg: WikipediaConfig) -> None:
    """Refuse a dump whose ``<dbname>`` is not the configured language's wiki."""
    expected = cfg.dbname.get(lang, wikis.expected_dbname(lang))
    if expected == "*":
        return
    if info.dbname is None:
        log.warning(
            "%s has no <dbname> in its <siteinfo>: cannot check that it is %s (%s)",
            path,
            expected,
            lang,
        )
        return
    if info.dbname.strip() != expected:
        raise InputDataError(
            f"wikipedia.dumps.{lang}: {path} is a dump of {info.dbname.strip()!r} "
            f"(<dbname> in its <siteinfo>), but language {lang!r} expects {expected!r}. "
            f"Fix: map {lang!r} to a {expected} dump, or, for a mirror that renames the "
            f"wiki, set wikipedia.dbname.{lang}={info.dbname.strip()} (or '*' to skip the "
            "check)."
        )


def plan_work(cfg: WikipediaConfig) -> list[WorkItem]:
    """Work items for every dump: a multistream dump with an index splits by streams, a
    single-stream ``.bz2`` by bz2 blocks (``split_single_stream``), anything else is one
    item. Every dump's ``<dbname>`` is checked against its language."""
    items: list[WorkItem] = []
    for lang, paths in dump_paths(cfg).items():
        index = cfg.multistream_index.get(lang)
        if index and len(paths) != 1:
            raise InputDataError(
                f"wikipedia.multistream_index.{lang} needs exactly one dump file in "
                f"wikipedia.dumps.{lang} (got {len(paths)})"
            )
        for path in paths:
            try:
                info = dump.read_siteinfo(path)
            except dump.DumpError as exc:
                raise InputDataError(str(exc)) from None
            check_dbname(lang, path, info, cfg)
            spaces = tuple(sorted(info.namespaces.items()))
            size = os.path.getsize(path)
            if index:
                if not os.path.isfile(index):
                    raise InputDataError(
                        f"wikipedia.multistream_index.{lang}: {index} does not exist"
                    )
                try:
                    offsets = dump.read_index_offsets(index)
                except dump.DumpError as exc:
                    raise InputDataError(str(exc)) from None
                bad = [o for o in offsets if o >= size]
                if bad:
                    raise InputDataError(
                        f"{index}: stream offset {bad[0]} is beyond the end of {path} "
                        f"({size} bytes). Fix: use the index published with this dump."
                    )
                ranges = dump.plan_ranges(offsets, size, cfg.split_bytes)
                items += [WorkItem(lang, path, a, b, spaces, False, info.dbname) for a, b in ranges]
                log.info("%s (%s): %d streams in %d ranges", path, lang, len(offsets), len(ranges))
                continue
            # Compressed bytes per range (bz2 on wikitext: ratio about 4-5), at least 64 KiB
            # (a level-9 block is about 200 kB compressed: smaller ranges are mostly empty).
            step = max(1 << 16, int(cfg.split_bytes / 4.0))
            if cfg.split_single_stream and size > step and _splittable(path):
                n = -(-size // step)
                items += [
                    WorkItem(
                        lang, path, k * step, min(size, (k + 1) * step), spaces, True, info.dbname
                    )
                    for k in range(n)
                ]
                log.info("%s (%s): single bz2 stream split at blocks into %d ranges", path, lang, n)
            else:
                items.append(WorkItem(lang, path, 0, None, spaces, False, info.dbname))
    return items


def _splittable(path: str) -> bool:
    """A bz2 dump in UTF-8 (a UTF-16 dump cannot be resynchronised at a block)."""
    if not dump.is_bz2(path):
        return False
    try:
        for chunk in dump.iter_decompressed(path):
            return not chunk.data.startswith((b"\xff\xfe", b"\xfe\xff"))
    except dump.StreamError:
        pass  # read whole; the parse reports where the stream breaks
    return False


# --------------------------------------------------------------------------- parsing


def _row(lang: str, kind: str, **kw: Any) -> tuple:
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


def _detector(lang: str, spaces: dict[int, str], cfg: WikipediaConfig) -> DisambiguationDetector:
    names = cfg.disambiguation_templates_by_lang.get(lang, wikis.disambiguation_templates(lang))
    return DisambiguationDetector(
        [*names, *cfg.disambiguation_templates],
        template_prefixes=_template_prefixes(spaces),
    )


def _template_prefixes(spaces: dict[int, str]) -> list[str]:
    return [*wikis.CANONICAL_TEMPLATE, *([spaces[10]] if spaces.get(10) else [])]


def parse_item(item: WorkItem, cfg: WikipediaConfig) -> Any:
    """Rows (:data:`PARSED_SCHEMA`) for every page and problem of one work item."""
    clean = get_cleaner(cfg.cleaner)
    keep_ns = set(cfg.namespaces)
    spaces = dict(item.namespaces)
    lang = item.lang
    extra_files = cfg.file_namespaces.get(lang, ())
    site = SiteNames.from_namespaces(spaces, lang, extra_files)
    is_disambiguation = _detector(lang, spaces, cfg)
    prefixes = frozenset(wikis.normalize_name(p) for p in _template_prefixes(spaces))
    want_links = cfg.inline_langlinks
    want_redirects = cfg.inline_langlinks or bool(cfg.langlinks)
    find_templates = not cfg.keep_disambiguation
    n_pages, dbname = 0, item.dbname
    try:
        pages = dump.iter_pages(item.path, item.start, item.end, spaces, item.blocks)
        for p in pages:
            if isinstance(p, dump.SiteInfo):
                spaces = p.namespaces or spaces
                dbname = p.dbname or dbname
                site = SiteNames.from_namespaces(spaces, lang, extra_files)
                is_disambiguation = _detector(lang, spaces, cfg)
                prefixes = frozenset(wikis.normalize_name(x) for x in _template_prefixes(spaces))
                continue
            n_pages += 1
            if isinstance(p, dump.Problem):
                yield _row(
                    lang,
                    "problem",
                    reason=p.kind,
                    page_id=p.page_id,
                    title=p.title,
                    location=str(p.location),
                    detail=p.detail,
                )
                continue
            loc = str(p.location)
            if p.ns == 10 and find_templates:
                yield from _template_rows(lang, p, is_disambiguation.magic_words)
            if p.ns not in keep_ns:
                yield _row(lang, "page", status="dropped", reason="namespace", page_id=p.page_id)
            elif p.redirect is not None and not cfg.keep_redirects:
                yield _row(
                    lang,
                    "page",
                    status="dropped",
                    reason="redirect",
                    page_id=p.page_id,
                    title=p.title,
                    redirect=sitelinks.normalize_title(p.redirect) if want_redirects else None,
                )
            elif p.model != "wikitext":
                yield _row(lang, "page", status="dropped", reason="not_wikitext", page_id=p.page_id)
            elif not cfg.keep_disambiguation and is_disambiguation(p.text):
                yield _row(
                    lang, "page", status="dropped", reason="disambiguation", page_id=p.page_id
                )
            else:
                cleaned = clean(p.text, site)
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
                if len(cleaned.text) < cfg.min_text_chars:
                    yield _row(
                        lang, "page", status="dropped", reason="too_short", page_id=p.page_id
                    )
                    continue
                links = None
                if want_links:
                    links = sorted(
                        {f"{k}\t{sitelinks.normalize_title(t)}" for k, t in cleaned.langlinks if t}
                    )
                yield _row(
                    lang,
                    "page",
                    status="kept",
                    page_id=p.page_id,
                    title=p.title,
                    text=cleaned.text,
                    links=links,
                    location=loc,
                    templates=template_names_used(p.text, prefixes) if find_templates else None,
                )
    except dump.DumpError as exc:
        yield _row(
            lang,
            "problem",
            reason="not_a_dump",
            location=f"{item.path} at byte {item.start}",
            detail=str(exc),
        )
    yield _row(lang, "item", page_id=n_pages, location=item.path, detail=dbname)


def _template_rows(lang: str, page: dump.Page, magic_words: list[str]) -> Any:
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


# --------------------------------------------------------------------------- reporting


def _examples(df: DataFrame, cond, k: int) -> list[dict[str, Any]]:
    cols = ["lang", "reason", "page_id", "title", "location", "detail"]
    rows = df.filter(cond).select(*cols).limit(k).collect()
    return [{c: v for c, v in r.asDict().items() if v is not None} for r in rows]


def summarize_parsed(parsed: DataFrame, cfg: WikipediaConfig) -> dict[str, Any]:
    """Counts per language (read, kept, dropped by reason, malformed by kind) + examples."""
    counts = parsed.groupBy("lang", "kind", "status", "reason").count().collect()
    per_lang: dict[str, dict[str, int]] = {}
    dropped: dict[str, dict[str, int]] = {}
    malformed: dict[str, dict[str, int]] = {}
    for r in counts:
        lang = r["lang"]
        row = per_lang.setdefault(
            lang, {"pages_read": 0, "kept": 0, "dropped": 0, "malformed": 0, "broken_markup": 0}
        )
        n = r["count"]
        if r["kind"] == "page":
            row["pages_read"] += n
            if r["status"] == "kept":
                row["kept"] += n
            else:
                row["dropped"] += n
                dropped.setdefault(lang, {})[r["reason"]] = n
        elif r["kind"] == "problem":
            row["pages_read"] += n
            row["malformed"] += n
            d = malformed.setdefault(lang, {})
            d[r["reason"]] = d.get(r["reason"], 0) + n
        elif r["kind"] == "broken":
            row["broken_markup"] += n
    k = cfg.max_examples
    # Up to k examples per language that has any (no job when there is nothing to show).
    malformed_ex, broken_ex = [], []
    for lang, row in sorted(per_lang.items()):
        here = F.col("lang") == lang
        if row["malformed"]:
            malformed_ex += _examples(parsed, here & (F.col("kind") == "problem"), k)
        if row["broken_markup"]:
            broken_ex += _examples(parsed, here & (F.col("kind") == "broken"), k)
    return {
        "per_language": dict(sorted(per_lang.items())),
        "dropped_by_reason": dict(sorted(dropped.items())),
        "malformed_by_kind": dict(sorted(malformed.items())),
        "malformed_examples": malformed_ex,
        "broken_markup_examples": broken_ex,
    }


def _where(example: dict[str, Any]) -> str:
    """``page 'Title' (id 12) in <location>`` for an example row (what is known of it)."""
    page = []
    if example.get("title") is not None:
        page.append(repr(example["title"]))
    if example.get("page_id") is not None:
        page.append(f"(id {example['page_id']})")
    head = f"page {' '.join(page)} in " if page else ""
    return head + str(example.get("location"))


def check_files(parsed: DataFrame, report: dict[str, Any]) -> None:
    """Pages read per dump file (reported); a file without a single ``<page>`` is an error."""
    rows = (
        parsed.filter("kind = 'item'")
        .groupBy("lang", "location")
        .agg(F.sum("page_id").alias("pages"), F.max("detail").alias("dbname"))
        .collect()
    )
    files: dict[str, dict[str, Any]] = {}
    for r in sorted(rows, key=lambda r: (r["lang"], r["location"])):
        files.setdefault(r["lang"], {})[r["location"]] = {
            "pages": int(r["pages"] or 0),
            "dbname": r["dbname"],
        }
    report["files"] = files
    empty = [(lang, f) for lang, fs in files.items() for f, row in fs.items() if not row["pages"]]
    if empty:
        raise InputDataError(
            "wikipedia: no <page> in "
            + "; ".join(f"{f} (wikipedia.dumps.{lang})" for lang, f in empty)
            + ". Fix: point the language at its *-pages-articles[-multistream].xml[.bz2] "
            "dump (not an index, a stub or a file cut before its first page). Nothing was "
            "written."
        )


def _record_disambiguation(report: dict[str, Any], source: str, counts: dict[str, int]) -> None:
    """Count articles dropped after parsing as disambiguation pages (found by ``source``)."""
    report.setdefault("disambiguation_after_parse", {})[source] = dict(sorted(counts.items()))
    for lang, n in counts.items():
        row = report["per_language"][lang]
        row["kept"] -= n
        row["dropped"] += n
        reasons = report["dropped_by_reason"].setdefault(lang, {})
        reasons["disambiguation"] = reasons.get("disambiguation", 0) + n


def disambiguation_templates_in_dump(parsed: DataFrame) -> dict[str, list[str]]:
    """lang -> templates of the dump that set a disambiguation magic word, with the
    templates redirecting to them (chains followed)."""
    rows = parsed.filter("kind = 'template'").select("lang", "reason", "title", "redirect")
    names: dict[str, set[str]] = {}
    redirects: dict[str, dict[str, str]] = {}
    for r in rows.collect():
        if r["reason"] == "disambiguation_template":
            names.setdefault(r["lang"], set()).add(r["title"])
        elif r["redirect"]:
            redirects.setdefault(r["lang"], {})[r["title"]] = r["redirect"]
    for lang, found in names.items():
        grew = True
        while grew:
            new = {a for a, b in redirects.get(lang, {}).items() if b in found} - found
            found |= new
            grew = bool(new)
    return {lang: sorted(v) for lang, v in sorted(names.items())}


def drop_template_disambiguation(
    docs: DataFrame, parsed: DataFrame, report: dict[str, Any]
) -> DataFrame:
    """Drop articles that use a template of the dump setting ``__DISAMBIG__`` (how the
    Disambiguator extension marks pages, whatever the template is called)."""
    found = disambiguation_templates_in_dump(parsed)
    report["disambiguation_templates_in_dump"] = {k: len(v) for k, v in found.items()}
    if not found:
        return docs
    cond = F.lit(False)
    for lang, names in found.items():
        hit = F.arrays_overlap(F.col("templates"), F.array(*[F.lit(n) for n in names]))
        cond = cond | ((F.col("lang") == lang) & F.coalesce(hit, F.lit(False)))
    counts = {r["lang"]: r["count"] for r in docs.filter(cond).groupBy("lang").count().collect()}
    _record_disambiguation(report, "template_magic_word", counts)
    return docs.filter(~cond)


def read_page_props(
    spark: SparkSession, cfg: WikipediaConfig, langs: list[str], report: dict
) -> DataFrame | None:
    """(lang, page_id) of the pages with the ``disambiguation`` page property, or None."""
    if not cfg.page_props:
        return None
    sc = spark.sparkContext
    frames = []
    for lang, path in sorted(cfg.page_props.items()):
        if lang not in langs:
            raise InputDataError(
                f"wikipedia.page_props.{lang} is set but wikipedia.dumps has no {lang!r}"
            )
        if not os.path.isfile(path):
            raise InputDataError(f"wikipedia.page_props.{lang}: {path} does not exist")
        try:
            cols = sitelinks.column_positions(path, "page_props")
        except sitelinks.SqlLineError as exc:
            raise InputDataError(str(exc)) from None
        lines = sitelinks.read_lines(sc, [path], sc.defaultParallelism)
        recs = lines.flatMap(lambda t, c=cols: sitelinks.parse_page_props_line(t[0], t[1], t[2], c))
        frames.append(_records_frame(spark, recs).withColumn("lang", F.lit(lang)))
    frame = frames[0]
    for f in frames[1:]:
        frame = frame.unionByName(f)
    frame = frame.persist(StorageLevel.MEMORY_AND_DISK)
    _check_records("page_props", frame, cfg, report)
    return (
        frame.filter("kind = 'row'")
        .select("lang", F.col("a").cast("long").alias("page_id"))
        .dropDuplicates()
    )


def drop_page_props_disambiguation(
    spark: SparkSession,
    docs: DataFrame,
    cfg: WikipediaConfig,
    langs: list[str],
    report: dict[str, Any],
) -> DataFrame:
    """Drop articles that ``page_props`` marks as disambiguation pages."""
    props = read_page_props(spark, cfg, langs, report)
    if props is None:
        return docs
    hits = docs.select("lang", "page_id").join(props, ["lang", "page_id"])
    counts = {r["lang"]: r["count"] for r in hits.groupBy("lang").count().collect()}
    _record_disambiguation(report, "page_props", counts)
    return docs.join(props, ["lang", "page_id"], "left_anti")


def check_tolerance(report: dict[str, Any], cfg: WikipediaConfig) -> None:
    """Raise :class:`InputDataError` when malformed or broken pages exceed the tolerances."""
    for lang, row in report["per_language"].items():
        read = max(1, row["pages_read"])
        if row["malformed"] and row["malformed"] / read > cfg.max_malformed_fraction:
            ex = [e for e in report["malformed_examples"] if e["lang"] == lang]
            raise InputDataError(
                f"wikipedia {lang}: {row['malformed']} malformed unit(s) in {row['pages_read']} "
                f"pages read ({report['malformed_by_kind'].get(lang)}), more than "
                f"wikipedia.max_malformed_fraction={cfg.max_malformed_fraction}; e.g.:\n"
                + "\n".join(f"  - {e.get('reason')}: {_where(e)}: {e.get('detail')}" for e in ex)
                + "\nFix: re-download the named file(s) (check their published checksums), or "
                "raise wikipedia.max_malformed_fraction to skip them. Nothing was written."
            )
        if row["kept"] and row["broken_markup"] / max(1, row["kept"]) > (
            cfg.max_broken_markup_fraction
        ):
            ex = [e for e in report["broken_markup_examples"] if e["lang"] == lang]
            raise InputDataError(
                f"wikipedia {lang}: {row['broken_markup']} article(s) with broken markup of "
                f"{row['kept']}, more than wikipedia.max_broken_markup_fraction="
                f"{cfg.max_broken_markup_fraction}; e.g.:\n"
                + "\n".join(f"  - {_where(e)}: {e.get('detail')}" for e in ex)
                + "\nNothing was written."
            )


# --------------------------------------------------------------------------- concepts


_SITELINK_SCHEMA = StructType(
    [
        StructField("kind", StringType(), False),
        StructField("file", StringType(), False),
        StructField("offset", LongType(), True),
        StructField("a", StringType(), True),
        StructField("b", StringType(), True),
        StructField("c", StringType(), True),
    ]
)


def _records_frame(spark: SparkSession, rdd) -> DataFrame:
    def cast(t):
        return (t[0], t[1], int(t[2]), *(None if v is None else str(v) for v in t[3:]))

    return spark.createDataFrame(rdd.map(cast), _SITELINK_SCHEMA)


def _check_records(name: str, recs: DataFrame, cfg: WikipediaConfig, report: dict) -> None:
    """Count rows and problems of a sitelinks/langlinks read; fail beyond the tolerance."""
    counts = {r["kind"]: r["count"] for r in recs.groupBy("kind").count().collect()}
    n_rows, n_bad = counts.get("row", 0), counts.get("problem", 0)
    examples = [
        {"location": f"{r['file']} at byte {r['offset']}", "kind": r["a"], "detail": r["b"]}
        for r in (
            recs.filter("kind = 'problem'").limit(cfg.max_examples).collect() if n_bad else []
        )
    ]
    report[name] = {"rows": n_rows, "malformed": n_bad, "malformed_examples": examples}
    if n_bad and n_bad / max(1, n_rows + n_bad) > cfg.max_malformed_fraction:
        raise InputDataError(
            f"wikipedia {name}: {n_bad} record(s) do not parse ({n_rows} did), more than "
            f"wikipedia.max_malformed_fraction={cfg.max_malformed_fraction}; e.g.:\n"
            + "\n".join(f"  - {e['location']}: {e['detail']}" for e in examples)
            + "\nFix: re-download the file, or raise wikipedia.max_malformed_fraction. "
            "Nothing was written."
        )


def read_wikidata(
    spark: SparkSession, cfg: WikipediaConfig, langs: list[str], report: dict
) -> tuple[DataFrame, DataFrame] | None:
    """(lang, title, qid) from the Wikidata sitelinks source, and (lang, title) of the pages
    whose item is a Wikimedia disambiguation page (JSON dumps only); None when not
    configured."""
    if not cfg.wikidata_sitelinks:
        return None
    paths = [p.strip() for p in cfg.wikidata_sitelinks.split(",") if p.strip()]
    for p in paths:
        if not os.path.isfile(p):
            raise InputDataError(f"wikipedia.wikidata_sitelinks: {p} does not exist")
    fmt = cfg.wikidata_format
    if fmt == "auto":
        fmt = "json" if ".json" in os.path.basename(paths[0]) else "sql"
    site_to_lang = {sitelinks.site_of(lang): lang for lang in langs}
    sites = frozenset(site_to_lang)
    sc = spark.sparkContext
    lines = sitelinks.read_lines(sc, paths, sc.defaultParallelism)
    if fmt == "sql":
        try:
            cols = {p: sitelinks.column_positions(p, "wb_items_per_site") for p in paths}
        except sitelinks.SqlLineError as exc:
            raise InputDataError(str(exc)) from None
        recs = lines.flatMap(
            lambda t: sitelinks.parse_items_per_site(t[0], t[1], t[2], sites, cols[t[0]])
        )
    else:
        recs = lines.flatMap(lambda t: sitelinks.parse_wikidata_json_line(t[0], t[1], t[2], sites))
    frame = _records_frame(spark, recs).persist(StorageLevel.MEMORY_AND_DISK)
    _check_records("wikidata_sitelinks", frame, cfg, report)
    mapping = spark.createDataFrame(list(site_to_lang.items()), "site string, lang string")

    def pick(kind: str) -> DataFrame:
        return (
            frame.filter(F.col("kind") == kind)
            .select(F.col("a").alias("site"), F.col("b").alias("title"), F.col("c").alias("qid"))
            .join(F.broadcast(mapping), "site")
            .select("lang", "title", "qid")
            .dropDuplicates(["lang", "title"])
        )

    return pick("row"), pick("disambiguation").select("lang", "title")


def read_langlinks(
    spark: SparkSession, cfg: WikipediaConfig, langs: list[str], report: dict
) -> DataFrame | None:
    """(lang, page_id, to_lang, to_title) from the langlinks SQL dumps, or None."""
    if not cfg.langlinks:
        return None
    sc = spark.sparkContext
    wanted = frozenset(langs)
    frames = []
    for lang, path in sorted(cfg.langlinks.items()):
        if not os.path.isfile(path):
            raise InputDataError(f"wikipedia.langlinks.{lang}: {path} does not exist")
        try:
            cols = sitelinks.column_positions(path, "langlinks")
        except sitelinks.SqlLineError as exc:
            raise InputDataError(str(exc)) from None
        lines = sitelinks.read_lines(sc, [path], sc.defaultParallelism)
        recs = lines.flatMap(
            lambda t, c=cols: sitelinks.parse_langlinks_line(t[0], t[1], t[2], wanted, c)
        )
        frames.append(_records_frame(spark, recs).withColumn("lang", F.lit(lang)))
    frame = frames[0]
    for f in frames[1:]:
        frame = frame.unionByName(f)
    frame = frame.persist(StorageLevel.MEMORY_AND_DISK)
    _check_records("langlinks", frame, cfg, report)
    return frame.filter("kind = 'row'").select(
        "lang",
        F.col("a").cast("long").alias("page_id"),
        F.col("b").alias("to_lang"),
        F.col("c").alias("to_title"),
    )


def connected_components(edges: DataFrame, max_iter: int) -> tuple[DataFrame, int]:
    """Min-label propagation over undirected ``(src, dst)`` string edges -> (node, label)."""
    both = edges.select("src", "dst").union(edges.select(F.col("dst"), F.col("src"))).distinct()
    both = both.persist(StorageLevel.MEMORY_AND_DISK)
    labels = (
        both.groupBy(F.col("src").alias("node"))
        .agg(F.least(F.min("dst"), F.first("src")).alias("label"))
        .localCheckpoint()
    )
    n_iter = 0
    for n_iter in range(1, max_iter + 1):  # noqa: B007
        spread = both.join(labels, both.src == labels.node).select(
            F.col("dst").alias("node"), F.col("label")
        )
        new = (
            labels.unionByName(spread).groupBy("node").agg(F.min("label").alias("label"))
        ).localCheckpoint()
        changed = (
            new.join(labels.withColumnRenamed("label", "old"), "node")
            .filter("label != old")
            .count()
        )
        labels = new
        if changed == 0:
            break
    both.unpersist()
    return labels, n_iter


def assign_concepts(
    spark: SparkSession,
    docs: DataFrame,
    parsed: DataFrame,
    cfg: WikipediaConfig,
    langs: list[str],
    report: dict[str, Any],
) -> DataFrame:
    """Attach ``concept_id`` to kept pages (lang, page_id, title, text, links).

    Wikidata ids (Q...) come first. Pages joined by interlanguage links (langlinks dumps
    and/or inline links, redirects followed one hop) form connected components; a page
    without its own Q takes the single Q of its component, or ``ll:<smallest member>``
    when the component has none (a page linked to no other has no concept). A component
    holding several Q ids is a conflict: its pages without a Q get no concept. Each
    (concept, language) keeps one page.
    """
    k = cfg.max_examples
    concepts: dict[str, Any] = {}
    nodes = docs.select("lang", "page_id", "title").withColumn(
        "node", F.concat_ws(":", "lang", F.col("page_id").cast("string"))
    )
    wikidata = read_wikidata(spark, cfg, langs, concepts)
    if wikidata is not None:
        wikidata, disambiguation = wikidata
        if cfg.wikidata_disambiguation and not cfg.keep_disambiguation:
            hits = nodes.join(disambiguation, ["lang", "title"])
            counts = {r["lang"]: r["count"] for r in hits.groupBy("lang").count().collect()}
            _record_disambiguation(report, "wikidata", counts)
            nodes = nodes.join(disambiguation, ["lang", "title"], "left_anti")
            docs = docs.join(disambiguation, ["lang", "title"], "left_anti")
        nodes = nodes.join(wikidata, ["lang", "title"], "left")
    else:
        nodes = nodes.withColumn("qid", F.lit(None).cast("string"))
    nodes = nodes.persist(StorageLevel.MEMORY_AND_DISK)

    link_frames = []
    ll = read_langlinks(spark, cfg, langs, concepts)
    if ll is not None:
        link_frames.append(ll)
    if cfg.inline_langlinks:
        inline = (
            docs.select("lang", "page_id", F.explode("links").alias("l"))
            .select(
                "lang",
                "page_id",
                F.split("l", "\t").getItem(0).alias("to_lang"),
                F.split("l", "\t").getItem(1).alias("to_title"),
            )
            .filter(F.col("to_lang").isin(langs))
        )
        link_frames.append(inline)
    if link_frames:
        links = link_frames[0]
        for f in link_frames[1:]:
            links = links.unionByName(f)
        redirects = parsed.filter("reason = 'redirect' AND redirect IS NOT NULL").select(
            F.col("lang").alias("to_lang"),
            F.col("title").alias("to_title"),
            F.col("redirect").alias("target"),
        )
        links = (
            links.join(redirects, ["to_lang", "to_title"], "left")
            .withColumn("to_title", F.coalesce("target", "to_title"))
            .drop("target")
        )
        targets = nodes.select(
            F.col("lang").alias("to_lang"),
            F.col("title").alias("to_title"),
            F.col("node").alias("dst"),
        )
        sources = nodes.select("lang", "page_id", F.col("node").alias("src"))
        edges = links.join(sources, ["lang", "page_id"]).join(targets, ["to_lang", "to_title"])
        edges = edges.select("src", "dst").filter("src != dst")
        labels, n_iter = connected_components(edges, cfg.max_component_iterations)
        concepts["component_iterations"] = n_iter
        nodes = (
            nodes.join(labels, "node", "left")
            .withColumn("linked", F.col("label").isNotNull())
            .withColumn("label", F.coalesce("label", "node"))
        )
        per_comp = nodes.groupBy("label").agg(
            F.countDistinct("qid").alias("n_q"), F.min("qid").alias("comp_q")
        )
        nodes = nodes.join(per_comp, "label")
        concept = (
            F.when(F.col("qid").isNotNull(), F.col("qid"))
            .when(F.col("n_q") == 1, F.col("comp_q"))
            .when((F.col("n_q") == 0) & F.col("linked"), F.concat(F.lit("ll:"), F.col("label")))
        )
        spans = nodes.filter("n_q > 1 AND qid IS NULL")
        n_spans = spans.count()
        if n_spans:
            concepts.setdefault("conflicts", {})["component_spans_several_items"] = n_spans
            concepts.setdefault("conflict_examples", []).extend(
                r.asDict() for r in spans.select("lang", "page_id", "title").limit(k).collect()
            )
        nodes = nodes.withColumn("concept_id", concept)
    else:
        nodes = nodes.withColumn("concept_id", F.col("qid"))

    missing = nodes.filter(F.col("concept_id").isNull())
    missing_counts = {r["lang"]: r["count"] for r in missing.groupBy("lang").count().collect()}
    concepts["without_concept"] = dict(sorted(missing_counts.items()))
    concepts["without_concept_examples"] = (
        [r.asDict() for r in missing.select("lang", "page_id", "title").limit(k).collect()]
        if missing_counts
        else []
    )
    if cfg.on_missing_concept == "own_id":
        nodes = nodes.withColumn(
            "concept_id",
            F.coalesce(
                "concept_id",
                F.concat(F.col("lang"), F.lit("wiki:"), F.col("page_id").cast("string")),
            ),
        )
    else:
        nodes = nodes.filter(F.col("concept_id").isNotNull())

    rank = F.row_number().over(Window.partitionBy("concept_id", "lang").orderBy("page_id"))
    nodes = nodes.withColumn("_rank", rank).persist(StorageLevel.MEMORY_AND_DISK)
    dup = nodes.filter("_rank > 1")
    n_dup = dup.count()
    if n_dup:
        ex = [
            r.asDict()
            for r in dup.select("lang", "concept_id", "page_id", "title").limit(k).collect()
        ]
        if cfg.on_conflict == "error":
            raise InputDataError(
                f"wikipedia: {n_dup} article(s) share a concept with another article of the "
                f"same language, e.g. {ex}. Fix: set wikipedia.on_conflict=keep_first."
            )
        concepts.setdefault("conflicts", {})["same_concept_same_language"] = n_dup
        concepts.setdefault("conflict_examples", []).extend(ex)
    report["concepts"] = concepts
    chosen = nodes.filter("_rank = 1").select("lang", "page_id", "concept_id")
    return docs.join(chosen, ["lang", "page_id"])


# --------------------------------------------------------------------------- stage


def build_documents(
    spark: SparkSession, cfg: WikipediaConfig
) -> tuple[DataFrame, dict[str, Any], list[DataFrame]]:
    """Parse, check and label the dumps: (documents frame, report, frames to unpersist)."""
    items = plan_work(cfg)
    langs = sorted({it.lang for it in items})
    parsed = parse_dumps(spark, cfg, items).persist(StorageLevel.MEMORY_AND_DISK)
    report: dict[str, Any] = {
        "dumps": {lang: [p for p in str(cfg.dumps[lang]).split(",")] for lang in langs},
        "work_items": len(items),
        "cleaner": cfg.cleaner,
    }
    report["dbnames"] = {
        lang: sorted({str(it.dbname) for it in items if it.lang == lang}) for lang in langs
    }
    report.update(summarize_parsed(parsed, cfg))
    check_tolerance(report, cfg)
    check_files(parsed, report)
    docs = parsed.filter("kind = 'page' AND status = 'kept'").select(
        "lang", "page_id", "title", "text", "links", "templates"
    )
    if not cfg.keep_disambiguation:
        docs = drop_template_disambiguation(docs, parsed, report)
        docs = drop_page_props_disambiguation(spark, docs, cfg, langs, report)
    docs = docs.drop("templates")
    labelled = assign_concepts(spark, docs, parsed, cfg, langs, report)
    out = labelled.select(
        F.concat(F.col("lang"), F.lit("wiki:"), F.col("page_id").cast("string")).alias("doc_id"),
        "concept_id",
        "lang",
        "title",
        "text",
    )
    return out, report, [parsed]


def check_every_language(report: dict[str, Any], cfg: WikipediaConfig) -> None:
    """Every configured language must end with documents (``on_empty_language``)."""
    empty = sorted(
        lang for lang in cfg.dumps if not report["per_language"].get(lang, {}).get("documents")
    )
    if not empty:
        return
    why = {lang: report["per_language"].get(lang, {}) for lang in empty}
    msg = (
        f"wikipedia: no documents for language(s) {', '.join(empty)} (per language: {why}). "
        "Fix: check that each is mapped to its own pages-articles dump in wikipedia.dumps and "
        "that the concept source (wikidata_sitelinks / langlinks) covers it, or set "
        "wikipedia.on_empty_language=warn to write the other languages."
    )
    report["empty_languages"] = empty
    if cfg.on_empty_language == "error":
        raise InputDataError(msg + " Nothing was written.")
    log.warning("%s", msg)


def run_wikipedia(
    spark: SparkSession,
    cfg: WikipediaConfig,
    path: str,
    partitions: int,
    fmt: Literal["parquet", "delta"] = "parquet",
    *,
    write: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Build ``documents`` from ``cfg`` and write it atomically to ``path`` (as ``fmt``,
    ``paths.format``; ``write``: more :func:`~pipeline.io.datasets.write_dataset` options,
    :func:`~pipeline.io.datasets.write_options`); the report."""
    docs, report, cached = build_documents(spark, cfg)
    docs = (
        docs.repartitionByRange(partitions, "lang", "doc_id")
        .sortWithinPartitions("lang", "doc_id")
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    try:
        per_lang = {
            r["lang"]: r["count"] for r in docs.groupBy("lang").count().orderBy("lang").collect()
        }
        if not per_lang:
            raise InputDataError(
                f"wikipedia: no documents left (per language: {report['per_language']}, "
                f"concepts: {report.get('concepts')}). Nothing was written."
            )
        for lang, row in report["per_language"].items():
            row["documents"] = per_lang.get(lang, 0)
            row["without_concept"] = report["concepts"]["without_concept"].get(lang, 0)
        check_every_language(report, cfg)
        report["documents_per_language"] = per_lang
        report["documents"] = sum(per_lang.values())
        report["n_concepts"] = docs.select("concept_id").distinct().count()
        report["config"] = asdict(cfg)
        write_dataset(
            spark,
            docs,
            DOCUMENTS,
            path,
            manifest={"report": report},
            expected_rows=report["documents"],
            **{**(write or {}), "format": fmt},
        )
    finally:
        docs.unpersist()
        for frame in cached:
            frame.unpersist()
    report["path"] = path
    return report


def run(spark: SparkSession, cfg) -> dict[str, Any]:
    """Stage entry point (``ingest_wikipedia``): ``cfg.wikipedia`` -> ``paths.documents``."""
    return run_wikipedia(
        spark,
        cfg.wikipedia,
        cfg.paths.dataset("documents"),
        cfg.spark.shuffle_partitions,
        cfg.paths.format,
        write=write_options(cfg.paths),
    )
