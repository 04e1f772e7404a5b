"""Language codes: the one rule for what a code is and how it is written.

A code is stored trimmed and lower-case (``" EN"`` -> ``en``: :func:`canonical_lang`), and a
stored code matches :data:`LANG_CODE_PATTERN` (a letter, then letters, digits, ``_`` or
``-``: :func:`is_lang_code`). Ingest writes codes this way, and every entry point (the
model API, ``cr5 embed``, the Spark embed stage, ``embed.languages``, the search index, the
CLI's ``--lang xx=PATH``, the word-vector import) applies the same rule, so they accept and
refuse the same codes. The rule has a form per engine, all here: one string, an Arrow array
(:func:`canonical_langs`), a Spark column (:func:`canonical_lang_column`,
:func:`lang_code_is_valid_column`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from pipeline.errors import ModelError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column

__all__ = [
    "LANG_CODE_PATTERN",
    "canonical_lang",
    "canonical_lang_column",
    "canonical_langs",
    "is_lang_code",
    "lang_code_is_valid_column",
]

#: A stored (canonical) language code: a letter, then letters, digits, ``_`` or ``-``.
LANG_CODE_PATTERN = r"^[a-z][a-z0-9_-]*$"
_LANG_CODE = re.compile(LANG_CODE_PATTERN)


def canonical_lang(lang: Any) -> str:
    """A language code as the pipeline stores it: trimmed and lower-case (``" EN"`` -> ``en``).

    Raises
    ------
    ModelError
        ``lang`` is not a string.
    """
    if not isinstance(lang, str):
        raise ModelError(f"a language code must be a string like 'en', got {lang!r}")
    return lang.strip().lower()


def is_lang_code(code: str) -> bool:
    """Whether ``code`` (canonical: :func:`canonical_lang`) is a valid language code."""
    return _LANG_CODE.fullmatch(code) is not None


def canonical_langs(langs: pa.Array) -> pa.Array:
    """Language codes trimmed and lower-cased, as :func:`canonical_lang` does for one code
    (nulls stay null)."""
    import pyarrow.compute as pc

    return pc.utf8_lower(pc.utf8_trim_whitespace(langs))


def canonical_lang_column(column: str | Column) -> Column:
    """The Spark column of :func:`canonical_lang`: ``lower(trim(column))``."""
    from pyspark.sql import functions as F

    return F.lower(F.trim(column))


def lang_code_is_valid_column(column: str | Column) -> Column:
    """The Spark column of :func:`is_lang_code` (true where ``column``, canonical, is a
    valid code)."""
    from pyspark.sql import functions as F

    col = F.col(column) if isinstance(column, str) else column
    return col.rlike(LANG_CODE_PATTERN)
