"""spark-submit entry point for the ``ingest_wikipedia`` stage (see pipeline/stages/__init__.py).

Its configuration is the ``wikipedia`` section (pipeline/wikipedia/config.py), e.g.::

    python jobs/ingest_wikipedia.py --conf conf/local.yaml \
        --set "wikipedia.dumps={en: enwiki-pages-articles-multistream.xml.bz2}" \
        --set "wikipedia.multistream_index={en: enwiki-pages-articles-multistream-index.txt.bz2}" \
        --set wikipedia.wikidata_sitelinks=wikidatawiki-wb_items_per_site.sql.gz
"""

import os
import sys

try:
    import pipeline  # noqa: F401  (installed, or shipped with --py-files)
except ImportError:  # running from a source checkout
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pipeline.runner import main

if __name__ == "__main__":
    sys.exit(main(["ingest_wikipedia"]))
