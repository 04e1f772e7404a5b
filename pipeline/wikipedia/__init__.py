"""Wikipedia ingestion: MediaWiki XML dumps and sitelinks to the ``documents`` dataset.

- :mod:`~pipeline.wikipedia.dump`: streaming pages out of (byte ranges of) dumps;
- :mod:`~pipeline.wikipedia.wikitext`: wikitext to plain text;
- :mod:`~pipeline.wikipedia.sitelinks`: Wikidata sitelinks and langlinks SQL/JSON dumps;
- :mod:`~pipeline.wikipedia.wikis`: per-wiki data shipped in ``data/`` (namespace aliases,
  disambiguation templates, database names);
- :mod:`~pipeline.stages.ingest_wikipedia`: the Spark stage ``ingest_wikipedia``;
- :mod:`~pipeline.wikipedia.config`: its configuration section ``wikipedia``.
"""
