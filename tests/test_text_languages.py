"""The one rule for language codes (pipeline/text/languages.py), in each engine's form."""

from __future__ import annotations

import pyarrow as pa
import pytest

from pipeline.errors import ModelError
from pipeline.text.languages import (
    canonical_lang,
    canonical_langs,
    is_lang_code,
)


def test_canonical_form_and_validity():
    assert canonical_lang(" EN\t") == "en" and canonical_lang("zh-YUE") == "zh-yue"
    with pytest.raises(ModelError, match="must be a string like 'en'"):
        canonical_lang(None)
    assert all(map(is_lang_code, ["en", "zh-yue", "be_x_old", "simple", "x1"]))
    assert not any(map(is_lang_code, ["", "EN", "1x", "en/us", "../x", ".en", "e n", "é"]))
    arr = pa.array([" EN", "de", None])
    assert canonical_langs(arr).to_pylist() == ["en", "de", None]


def test_every_entry_point_uses_the_one_rule():
    """No second copy of the rule: the code pattern and the lower-casing of codes are written
    in pipeline/text/languages.py only."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "pipeline"
    for path in root.rglob("*.py"):
        if path.name == "languages.py":
            continue
        text = path.read_text(encoding="utf-8")
        assert "[a-z][a-z0-9_-]*" not in text, path
        assert not re.search(r"lang\)?\.(strip\(\)\.)?lower\(\)", text), path
