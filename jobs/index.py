"""spark-submit entry point for the ``index`` stage (see pipeline/stages/__init__.py)."""

import os
import sys

try:
    import pipeline  # noqa: F401  (installed, or shipped with --py-files)
except ImportError:  # running from a source checkout
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pipeline.runner import main

if __name__ == "__main__":
    sys.exit(main(["index"]))
