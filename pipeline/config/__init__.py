"""Typed configuration: YAML profiles plus ``--set key.path=value`` overrides.

- :mod:`~pipeline.config.sections`: the schema, one frozen dataclass per section (declared
  with :func:`~pipeline.params.param`; the maths' parameters embedded from their packages);
- :mod:`~pipeline.config.loader`: :func:`load_config` (layering, overrides, type and range
  checks naming the key and its source) and :func:`validate` (checks across keys);
- :mod:`~pipeline.config.pairs`: language pairs written ``"l1-l2"``;
- :mod:`~pipeline.config.profiles`: the profiles shipped in the package, found by name
  (``--conf local``) without a checkout, and the runner's default profile;
- :mod:`~pipeline.config.reference`: the reference generated from the declarations
  (``--help-config``, ``docs/configuration.md``).

The package loads without numpy, pyarrow or Spark (the Airflow DAG imports it): it imports
only :mod:`pipeline.errors`, :mod:`pipeline.params`, the numpy-free parameter modules of
the maths packages (``pipeline/{linalg,retrieval,baselines,neural}/params.py``) and of
:mod:`pipeline.wikipedia.config`, and the method registry (:mod:`pipeline.methods.registry`,
whose names ``train.method`` and ``evaluate.methods`` accept).
"""

from pipeline.config.loader import build_section, check_evaluate, load_config, validate
from pipeline.config.pairs import all_pairs, canonical, parse_pair
from pipeline.config.profiles import (
    DEFAULT_PROFILE,
    default_profiles,
    packaged_profiles,
    resolve_profile,
)
from pipeline.config.reference import param_info, reference_markdown
from pipeline.config.sections import (
    EVALUATE_DEFAULTS,
    SEARCH_DEFAULTS,
    TEXT_DEFAULTS,
    TRAIN_DEFAULTS,
    Config,
    EmbedConfig,
    EvaluateConfig,
    FeaturesConfig,
    IngestConfig,
    PathsConfig,
    SearchConfig,
    SparkConfig,
    SplitConfig,
    TextConfig,
    TrainConfig,
    WordsConfig,
)
from pipeline.wikipedia.config import WikipediaConfig

__all__ = [
    "DEFAULT_PROFILE",
    "EVALUATE_DEFAULTS",
    "SEARCH_DEFAULTS",
    "TEXT_DEFAULTS",
    "TRAIN_DEFAULTS",
    "Config",
    "EmbedConfig",
    "EvaluateConfig",
    "FeaturesConfig",
    "IngestConfig",
    "PathsConfig",
    "SearchConfig",
    "SparkConfig",
    "SplitConfig",
    "TextConfig",
    "TrainConfig",
    "WikipediaConfig",
    "WordsConfig",
    "all_pairs",
    "build_section",
    "canonical",
    "check_evaluate",
    "default_profiles",
    "load_config",
    "packaged_profiles",
    "param_info",
    "parse_pair",
    "reference_markdown",
    "resolve_profile",
    "validate",
]
