"""Wikipedia ingestion: MediaWiki XML dumps and sitelinks to the ``documents`` dataset.

Reading dumps (plain Python, runs on the executors):

- :mod:`~pipeline.wikipedia.bz2_streams`: decompressed bytes of a dump, with their location;
- :mod:`~pipeline.wikipedia.bz2_blocks`: a single bz2 stream split at its blocks;
- :mod:`~pipeline.wikipedia.dump`: pages out of (byte ranges of) dumps;
- :mod:`~pipeline.wikipedia.wikitext`: wikitext to plain text;
- :mod:`~pipeline.wikipedia.sitelinks`: Wikidata sitelinks and langlinks SQL/JSON lines;
- :mod:`~pipeline.wikipedia.wikis`: per-wiki data shipped in ``data/`` (namespace aliases,
  disambiguation templates, database names).

The phases of the Spark stage :mod:`~pipeline.stages.ingest_wikipedia`:

- :mod:`~pipeline.wikipedia.plan`: which bytes of which dumps each task reads;
- :mod:`~pipeline.wikipedia.parse`: pages to rows of the parsed frame, on the executors;
- :mod:`~pipeline.wikipedia.checks`: counts and tolerances;
- :mod:`~pipeline.wikipedia.tables`: the sitelinks, langlinks and page_props dumps as frames;
- :mod:`~pipeline.wikipedia.disambiguation`: disambiguation pages found after parsing;
- :mod:`~pipeline.wikipedia.concepts`: concept ids from Wikidata and interlanguage links;
- :mod:`~pipeline.wikipedia.report`: the stage's typed report.

:mod:`~pipeline.wikipedia.config` declares the configuration section ``wikipedia``; this
package's ``__init__`` imports nothing, so that loading the configuration stays light.
"""
