"""Concept ids for the kept articles: Wikidata items first, then interlanguage links.

Pages joined by interlanguage links (langlinks dumps and/or inline links, redirects
followed one hop) form connected components; a page without its own Wikidata id (Q...)
takes the single Q of its component, or ``ll:<smallest member>`` when the component has
none (a page linked to no other has no concept). A component holding several Q ids is a
conflict: its pages without a Q get no concept. Each (concept, language) keeps one page,
the smallest page id.
"""

from __future__ import annotations

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from pipeline.errors import InputDataError
from pipeline.wikipedia.config import WikipediaConfig
from pipeline.wikipedia.disambiguation import drop_wikidata_disambiguation
from pipeline.wikipedia.report import ConceptReport, IngestReport
from pipeline.wikipedia.tables import read_langlinks, read_wikidata


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
    report: IngestReport,
) -> DataFrame:
    """Attach ``concept_id`` to kept pages (lang, page_id, title, text, links).

    Wikidata ids come first, then the components of interlanguage links (see the module
    docstring); pages left without a concept are dropped or get their own id
    (``on_missing_concept``), and each (concept, language) keeps one page (``on_conflict``).
    """
    concepts = report.concepts
    nodes = docs.select("lang", "page_id", "title").withColumn(
        "node", F.concat_ws(":", "lang", F.col("page_id").cast("string"))
    )
    wikidata = read_wikidata(spark, cfg, langs)
    if wikidata is not None:
        items, disambiguation, concepts.wikidata_sitelinks = wikidata
        if cfg.wikidata_disambiguation and not cfg.keep_disambiguation:
            docs, nodes = drop_wikidata_disambiguation(docs, nodes, disambiguation, report)
        nodes = nodes.join(items, ["lang", "title"], "left")
    else:
        nodes = nodes.withColumn("qid", F.lit(None).cast("string"))
    nodes = nodes.persist(StorageLevel.MEMORY_AND_DISK)

    links = _interlanguage_links(spark, docs, parsed, cfg, langs, concepts)
    if links is not None:
        nodes = _concepts_from_components(nodes, links, cfg, concepts)
    else:
        nodes = nodes.withColumn("concept_id", F.col("qid"))
    nodes = _handle_missing_concepts(nodes, cfg, concepts)
    chosen = _one_page_per_concept_and_language(nodes, cfg, concepts)
    return docs.join(chosen, ["lang", "page_id"])


def _interlanguage_links(
    spark: SparkSession,
    docs: DataFrame,
    parsed: DataFrame,
    cfg: WikipediaConfig,
    langs: list[str],
    concepts: ConceptReport,
) -> DataFrame | None:
    """(lang, page_id, to_lang, to_title) from the langlinks dumps and/or the links in
    the wikitext, a link to a redirect followed to its target; None without a source."""
    link_frames = []
    found = read_langlinks(spark, cfg, langs)
    if found is not None:
        ll, concepts.langlinks = found
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
    if not link_frames:
        return None
    links = link_frames[0]
    for f in link_frames[1:]:
        links = links.unionByName(f)
    redirects = parsed.filter("reason = 'redirect' AND redirect IS NOT NULL").select(
        F.col("lang").alias("to_lang"),
        F.col("title").alias("to_title"),
        F.col("redirect").alias("target"),
    )
    return (
        links.join(redirects, ["to_lang", "to_title"], "left")
        .withColumn("to_title", F.coalesce("target", "to_title"))
        .drop("target")
    )


def _concepts_from_components(
    nodes: DataFrame, links: DataFrame, cfg: WikipediaConfig, concepts: ConceptReport
) -> DataFrame:
    """``nodes`` with ``concept_id``: their own Q, else their component's single Q, else
    ``ll:<label>`` for a linked page of a component without Q; components spanning several
    Q ids are counted as conflicts."""
    targets = nodes.select(
        F.col("lang").alias("to_lang"),
        F.col("title").alias("to_title"),
        F.col("node").alias("dst"),
    )
    sources = nodes.select("lang", "page_id", F.col("node").alias("src"))
    edges = links.join(sources, ["lang", "page_id"]).join(targets, ["to_lang", "to_title"])
    edges = edges.select("src", "dst").filter("src != dst")
    labels, concepts.component_iterations = connected_components(
        edges, cfg.max_component_iterations
    )
    nodes = (
        nodes.join(labels, "node", "left")
        .withColumn("linked", F.col("label").isNotNull())
        .withColumn("label", F.coalesce("label", "node"))
    )
    per_comp = nodes.groupBy("label").agg(
        F.countDistinct("qid").alias("n_q"), F.min("qid").alias("comp_q")
    )
    nodes = nodes.join(per_comp, "label")
    spans = nodes.filter("n_q > 1 AND qid IS NULL")
    n_spans = spans.count()
    if n_spans:
        examples = spans.select("lang", "page_id", "title").limit(cfg.max_examples).collect()
        concepts.add_conflicts(
            "component_spans_several_items", n_spans, [r.asDict() for r in examples]
        )
    return nodes.withColumn("concept_id", _component_concept())


def _component_concept() -> Column:
    return (
        F.when(F.col("qid").isNotNull(), F.col("qid"))
        .when(F.col("n_q") == 1, F.col("comp_q"))
        .when((F.col("n_q") == 0) & F.col("linked"), F.concat(F.lit("ll:"), F.col("label")))
    )


def _handle_missing_concepts(
    nodes: DataFrame, cfg: WikipediaConfig, concepts: ConceptReport
) -> DataFrame:
    """Count the pages without a concept, then drop them or give each its own id
    ``<lang>wiki:<page_id>`` (``on_missing_concept``)."""
    k = cfg.max_examples
    missing = nodes.filter(F.col("concept_id").isNull())
    missing_counts = {r["lang"]: r["count"] for r in missing.groupBy("lang").count().collect()}
    concepts.without_concept = dict(sorted(missing_counts.items()))
    concepts.without_concept_examples = (
        [r.asDict() for r in missing.select("lang", "page_id", "title").limit(k).collect()]
        if missing_counts
        else []
    )
    if cfg.on_missing_concept == "own_id":
        own_id = F.concat(F.col("lang"), F.lit("wiki:"), F.col("page_id").cast("string"))
        return nodes.withColumn("concept_id", F.coalesce("concept_id", own_id))
    return nodes.filter(F.col("concept_id").isNotNull())


def _one_page_per_concept_and_language(
    nodes: DataFrame, cfg: WikipediaConfig, concepts: ConceptReport
) -> DataFrame:
    """(lang, page_id, concept_id) keeping the smallest page id of each (concept,
    language); the others are conflicts (reported, or an error with ``on_conflict``)."""
    rank = F.row_number().over(Window.partitionBy("concept_id", "lang").orderBy("page_id"))
    nodes = nodes.withColumn("_rank", rank).persist(StorageLevel.MEMORY_AND_DISK)
    dup = nodes.filter("_rank > 1")
    n_dup = dup.count()
    if n_dup:
        ex = [
            r.asDict()
            for r in dup.select("lang", "concept_id", "page_id", "title")
            .limit(cfg.max_examples)
            .collect()
        ]
        if cfg.on_conflict == "error":
            raise InputDataError(
                f"wikipedia: {n_dup} article(s) share a concept with another article of the "
                f"same language, e.g. {ex}. Fix: set wikipedia.on_conflict=keep_first."
            )
        concepts.add_conflicts("same_concept_same_language", n_dup, ex)
    return nodes.filter("_rank = 1").select("lang", "page_id", "concept_id")
