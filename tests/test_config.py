"""Configuration loading: layering, overrides, and errors that name the key."""

from __future__ import annotations

import pytest

from pipeline.config import Config, load_config
from pipeline.errors import ConfigError
from tests.conftest import REPO

LOCAL = REPO / "conf" / "local.yaml"


def test_defaults_are_the_papers():
    f = load_config([]).features
    assert (f.max_vocabulary, f.min_df, f.min_unique_words, f.max_unique_words) == (
        200_000,
        3,
        50,
        1000,
    )


def test_layering_and_overrides(tmp_path):
    extra = tmp_path / "extra.yaml"
    extra.write_text("features:\n  min_df: 7\nspark:\n  conf:\n    spark.x: 'y'\n")
    cfg = load_config(
        [LOCAL, extra],
        ["features.min_df=9", "ingest.languages=[en, de]", "features.heldout_concepts=null"],
    )
    assert cfg.features.min_df == 9
    assert cfg.ingest.languages == ["en", "de"]
    assert cfg.spark.conf == {"spark.x": "y"}
    assert cfg.spark.master == "local[2]"  # untouched keys keep the profile's value
    assert cfg.paths.dataset("tfidf") == "./out/tfidf"
    assert load_config([LOCAL], ["paths.tfidf=/x/t"]).paths.dataset("tfidf") == "/x/t"


def test_scientific_notation_floats():
    assert load_config([], ["train.cg_rtol=1e-4"]).train.cg_rtol == 1e-4
    with pytest.raises(ConfigError, match="'train.lam'.*must be a number"):
        load_config([], ["train.lam=big"])


def test_unknown_key_names_key_source_and_suggestion(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("features:\n  min_dff: 2\n")
    with pytest.raises(ConfigError) as err:
        load_config([bad])
    msg = str(err.value)
    assert "'features.min_dff'" in msg and str(bad) in msg and "min_df" in msg


def test_unknown_section():
    with pytest.raises(ConfigError, match="unknown configuration key 'featurs'"):
        load_config([], ["featurs.min_df=2"])


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("features.min_df=two", "'features.min_df'.*--set.*must be an integer"),
        ("features.min_df=true", "'features.min_df'.*must be an integer"),
        ("spark.ui=yes please", "'spark.ui'.*true or false"),
        ("ingest.format=xml", "'ingest.format'.*one of 'auto', 'parquet', 'jsonl', 'tsv'"),
        ("ingest.languages=en", "'ingest.languages'.*a list"),
        ("features.min_df=0", "'features.min_df'.*out of range"),
        ("spark=3", "'spark'.*mapping"),
    ],
)
def test_wrong_types_name_the_key(override, expected):
    with pytest.raises(ConfigError, match=expected):
        load_config([LOCAL], [override])


def test_cross_field_and_encoding_checks():
    with pytest.raises(ConfigError, match="min_unique_words"):
        load_config([], ["features.min_unique_words=10", "features.max_unique_words=5"])
    with pytest.raises(ConfigError, match="not a known text encoding"):
        load_config([], ["ingest.encoding=utf-99"])


def test_bad_files_and_overrides(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config([tmp_path / "missing.yaml"])
    broken = tmp_path / "broken.yaml"
    broken.write_text("features: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config([broken])
    top = tmp_path / "list.yaml"
    top.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="mapping of sections"):
        load_config([top])
    with pytest.raises(ConfigError, match="section.key=value"):
        load_config([], ["features.min_df"])


def test_fingerprint_is_stable_and_sensitive():
    a = load_config([LOCAL])
    assert a.fingerprint() == load_config([LOCAL]).fingerprint()
    assert a.fingerprint("features") != load_config([LOCAL], ["features.min_df=5"]).fingerprint(
        "features"
    )


def test_maths_parameters_are_the_sections_keys():
    """train.* and evaluate.* embed the maths' own declarations (one Field per key, no copy)."""
    import dataclasses

    from pipeline.backends.params import BackendParams
    from pipeline.config import EvaluateConfig, TrainConfig
    from pipeline.linalg.cr5 import Cr5Solver
    from pipeline.linalg.params import Cr5Params
    from pipeline.retrieval.params import RetrievalParams

    for section, declared in [
        (TrainConfig, (Cr5Params, BackendParams)),
        (EvaluateConfig, (RetrievalParams,)),
    ]:
        keys = {f.name: f for f in dataclasses.fields(section)}
        for cls in declared:
            for f in dataclasses.fields(cls):
                assert keys[f.name] is f, f"{section.__name__}.{f.name} redeclares {cls.__name__}"
    train = load_config([]).train
    assert Cr5Solver(train).get_params() == train.solver_params()
    assert set(train.solver_params()) == {f.name for f in dataclasses.fields(Cr5Params)}


def test_configuration_reference_is_current_and_complete():
    import dataclasses

    from pipeline.config import reference_markdown
    from pipeline.params import NESTED

    text = reference_markdown()
    doc = REPO / "docs" / "configuration.md"
    assert doc.read_text(encoding="utf-8").strip() == text.strip(), (
        "docs/configuration.md is stale: python -m pipeline config-reference > "
        "docs/configuration.md"
    )
    for section in dataclasses.fields(Config):
        cls = section.default_factory
        # a section's keys, and those of the sections nested in it (train.<method>, one per
        # registered method with parameters of its own); the field holding these is no key
        nested = cls.nested_sections() if hasattr(cls, "nested_sections") else {}
        keyed = [(section.name, cls), *((f"{section.name}.{n}", c) for n, c in nested.items())]
        for prefix, declared in keyed:
            for key in dataclasses.fields(declared):
                if key.metadata.get(NESTED):
                    continue
                row = f"| `{prefix}.{key.name}` |"
                assert row in text, row
                assert key.metadata.get("doc"), f"{prefix}.{key.name} has no doc"


@pytest.mark.parametrize(
    "override, message",
    [
        ("train.lam=0", "= 0.0 is out of range: must be a real number > 0"),
        ("train.lam=-1", "= -1.0 is out of range: must be a real number > 0"),
        ("train.r=0", "= 0 is out of range: must be an int >= 1"),
        ("train.cg_rtol=1.5", "must be a real number in (0, 1)"),
        ("train.max_basis=2", "must be None or an int >= 3"),
        ("embed.batch_rows=0", "= 0 is out of range: must be an int >= 1"),
        ("evaluate.lambda_grid=[1, 0]", "must be a list of real numbers (each > 0)"),
        ("evaluate.precision_at=[0]", "(each >= 1)"),
        ("split.pairs=[en]", "split.pairs[0]: 'en' is not a language pair"),
    ],
)
def test_bad_values_fail_before_spark_starts(monkeypatch, capsys, override, message):
    import pipeline.spark
    from pipeline.runner import main

    def no_spark(*args, **kwargs):
        raise AssertionError("a SparkSession was requested for an invalid configuration")

    monkeypatch.setattr(pipeline.spark, "get_spark", no_spark)
    assert main(["train"], ["--conf", str(LOCAL), "--set", override]) == 2
    err = capsys.readouterr().err
    key = override.split("=")[0]
    assert message in err, err
    assert f"'{key}'" in err or f"{key}[" in err, err
    assert "Traceback" not in err


def test_help_config_prints_a_section(capsys):
    from pipeline.runner import main

    assert main(["train"], ["--help-config", "train"]) == 0
    out = capsys.readouterr().out
    assert "| `train.lam` | a real number > 0 | `1.0` | Ridge parameter λ. |" in out
    assert "embed.batch_rows" not in out
    assert main(["train"], ["--help-config", "trian"]) == 2
