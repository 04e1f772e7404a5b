"""Which bytes of which dumps each task reads: the driver's plan for ``ingest_wikipedia``.

For each language, each dump file becomes one :class:`WorkItem`, or, with a multistream
index, many items of whole bz2 streams, or, for a single-stream ``.bz2``, many items split
at bz2 blocks, so that a plain dump is parsed by many tasks rather than one
(bench/README.md, "Wikipedia ingestion"). The driver reads only the dumps' headers (to
check that each is the configured language's wiki) and the index offsets.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, replace

from pipeline.errors import InputDataError
from pipeline.wikipedia import dump, wikis
from pipeline.wikipedia.config import WikipediaConfig

log = logging.getLogger(__name__)

# Assumed bz2 compression ratio on wikitext (about 4-5): compressed bytes per block-split
# range are split_bytes / _RATIO.
_RATIO = 4.0
# A level-9 bz2 block is about 200 kB compressed: smaller ranges would be mostly empty.
_MIN_BLOCK_RANGE = 1 << 16


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
            item = WorkItem(lang, path, namespaces=spaces, dbname=info.dbname)
            if index:
                items += _stream_items(item, index, cfg)
            else:
                items += _block_items(item, cfg)
    return items


def _stream_items(whole: WorkItem, index: str, cfg: WikipediaConfig) -> list[WorkItem]:
    """A multistream dump in ranges of whole bz2 streams, from its index's offsets."""
    lang, path = whole.lang, whole.path
    size = os.path.getsize(path)
    if not os.path.isfile(index):
        raise InputDataError(f"wikipedia.multistream_index.{lang}: {index} does not exist")
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
    log.info("%s (%s): %d streams in %d ranges", path, lang, len(offsets), len(ranges))
    return [_range(whole, a, b, blocks=False) for a, b in ranges]


def _block_items(whole: WorkItem, cfg: WikipediaConfig) -> list[WorkItem]:
    """A single-stream ``.bz2`` in ranges split at bz2 blocks, or the whole file as one
    item (not bz2, UTF-16, small, or ``split_single_stream`` off)."""
    path = whole.path
    size = os.path.getsize(path)
    step = max(_MIN_BLOCK_RANGE, int(cfg.split_bytes / _RATIO))
    if not (cfg.split_single_stream and size > step and _splittable(path)):
        return [whole]
    n = -(-size // step)
    log.info("%s (%s): single bz2 stream split at blocks into %d ranges", path, whole.lang, n)
    return [_range(whole, k * step, min(size, (k + 1) * step), blocks=True) for k in range(n)]


def _range(whole: WorkItem, start: int, end: int, *, blocks: bool) -> WorkItem:
    return replace(whole, start=start, end=end, blocks=blocks)


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
