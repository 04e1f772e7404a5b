"""Loading a configuration: YAML profiles, ``--set`` overrides, merging, building, checks.

A profile (``conf/*.yaml``) only states what it changes from the declared defaults
(:mod:`pipeline.config.sections`). Several profiles may be layered (later wins), then ``--set``
overrides are applied, then the merged mapping is checked against the schema: an unknown key or
a value of the wrong type or range is a :class:`~pipeline.errors.ConfigError` naming the key,
where it came from and what is allowed; :func:`validate` adds the checks that span several
keys. All of that happens before any SparkSession starts.
"""

from __future__ import annotations

import codecs
import dataclasses
import difflib
import re
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from pipeline.baselines.params import S2NetParams
from pipeline.config.pairs import parse_pair
from pipeline.config.profiles import ProfileSource, missing_hint, resolve_profile
from pipeline.config.sections import Config, EvaluateConfig
from pipeline.errors import ConfigError
from pipeline.methods.registry import find_method
from pipeline.params import NESTED, check_range, check_section, coerce, section_params

__all__ = ["build_section", "check_evaluate", "load_config", "validate"]


def load_config(
    profiles: Iterable[str | Path] = (),
    overrides: Iterable[str] = (),
) -> Config:
    """Load and validate a configuration.

    Parameters
    ----------
    profiles : iterable of path
        YAML files, merged in order (later values win, mappings merge recursively); a name
        such as ``local`` (or ``conf/local.yaml`` where no such file exists) is the profile
        shipped in the package (:mod:`pipeline.config.profiles`).
    overrides : iterable of str
        ``key.path=value`` strings; ``value`` is parsed as YAML (``3`` is an int,
        ``[en, de]`` a list, ``null`` None).

    Raises
    ------
    ConfigError
        For an unreadable file, an unknown key, a wrong type or an out-of-range value;
        the message names the key and its source.
    """
    merged: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for profile in profiles:
        source = resolve_profile(profile)
        data = _read_yaml(source)
        _deep_merge(merged, data, sources, source=str(source))
    for item in overrides:
        key, value = _parse_override(item)
        nested: dict[str, Any] = {}
        cursor = nested
        parts = key.split(".")
        for part in parts[:-1]:
            cursor = cursor.setdefault(part, {})
        cursor[parts[-1]] = value
        _deep_merge(merged, nested, sources, source=f"--set {item}")
    return validate(build_section(Config, merged, prefix="", sources=sources))


def _read_yaml(path: ProfileSource) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ConfigError(
            f"cannot read configuration file {path}: {exc.strerror}. {missing_hint()}"
        ) from exc
    except OSError as exc:
        raise ConfigError(f"cannot read configuration file {path}: {exc.strerror}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"configuration file {path} is not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"configuration file {path} must hold a mapping of sections, got {type(data).__name__}"
        )
    return data


def _parse_override(item: str) -> tuple[str, Any]:
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError(
            f"override {item!r} must look like section.key=value (e.g. features.min_df=2)"
        )
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"override {item!r}: value is not valid YAML: {exc}") from exc
    return key, value


def _deep_merge(
    into: dict[str, Any],
    new: Mapping[str, Any],
    sources: dict[str, str],
    *,
    source: str,
    prefix: str = "",
) -> None:
    for key, value in new.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _deep_merge(into[key], value, sources, source=source, prefix=path + ".")
        else:
            into[key] = dict(value) if isinstance(value, Mapping) else value
            sources[path] = source
            # Children of a replaced mapping come from the same source.
            if isinstance(value, Mapping):
                for sub in value:
                    sources[f"{path}.{sub}"] = source


def _where(key: str, sources: Mapping[str, str]) -> str:
    src = sources.get(key)
    if src is None:
        # A child inherits the source of the nearest parent that was set as a whole.
        parts = key.split(".")
        for i in range(len(parts) - 1, 0, -1):
            src = sources.get(".".join(parts[:i]))
            if src:
                break
    return f" (from {src})" if src else ""


def build_section(cls: type, data: Any, *, prefix: str, sources: Mapping[str, str]) -> Any:
    """Section ``cls`` built from the mapping ``data``, nested sections included.

    ``prefix`` is the section's key path (e.g. ``"wikipedia."``) and ``sources`` maps key
    paths to where their values came from, both for messages.

    Raises
    ------
    ConfigError
        For a non-mapping, an unknown key (with the nearest known one), a wrong type or an
        out-of-range value.
    """
    if not isinstance(data, Mapping):
        name = prefix.rstrip(".")
        raise ConfigError(
            f"configuration key {name!r}{_where(name, sources)} must be a mapping, "
            f"got {type(data).__name__} {data!r}"
        )
    infos = {info.name: info for info in section_params(cls)}
    nested: dict[str, type] = cls.nested_sections() if hasattr(cls, "nested_sections") else {}
    if nested:
        data, sources = _renamed_legacy(cls, data, prefix, sources)
    for key in data:
        if key not in infos and key not in nested:
            full = prefix + str(key)
            known = [*infos, *nested]
            near = difflib.get_close_matches(str(key), known, n=1)
            hint = f"; did you mean {prefix + near[0]!r}?" if near else ""
            raise ConfigError(
                f"unknown configuration key {full!r}{_where(full, sources)}"
                f"{hint} (allowed in {prefix.rstrip('.') or 'the top level'}: "
                f"{', '.join(sorted(known))})"
            )
    kwargs: dict[str, Any] = {}
    if nested:
        field_name = next(f.name for f in dataclasses.fields(cls) if f.metadata.get(NESTED))
        kwargs[field_name] = {
            name: build_section(
                section,
                data[name] if data.get(name) is not None else {},
                prefix=f"{prefix}{name}.",
                sources=sources,
            )
            for name, section in nested.items()
        }
    for name, info in infos.items():
        if name not in data:
            continue
        key = prefix + name
        where = _where(key, sources)
        if dataclasses.is_dataclass(info.type):
            value = data[name] if data[name] is not None else {}
            kwargs[name] = build_section(info.type, value, prefix=key + ".", sources=sources)
            continue
        kwargs[name] = coerce(info.type, data[name], key=key, where=where)
        check_range(info, kwargs[name], key=key, where=where)
    return cls(**kwargs)


def _renamed_legacy(
    cls: type, data: Mapping[str, Any], prefix: str, sources: Mapping[str, str]
) -> tuple[dict[str, Any], dict[str, str]]:
    """``data`` with each flat key of the release before the nested sections
    (``cls.legacy_keys()``: ``train.plsa_topic_prior``) moved to the keys it now sets
    (``train.jplsa.topic_prior``, ``train.cplsa.topic_prior``), with a warning naming them;
    a new key set too wins over the old one. Also the sources, for messages."""
    table = cls.legacy_keys()
    declared = {info.name for info in section_params(cls)} | set(cls.nested_sections())
    old_keys = [k for k in data if k in table and k not in declared]
    if not old_keys:
        return dict(data), dict(sources)
    out = dict(data)
    where = dict(sources)
    for old in old_keys:
        value = out.pop(old)
        full = prefix + old
        new_keys = [prefix + new for new in table[old]]
        message = (
            f"configuration key {full!r}{_where(full, sources)} is deprecated and will be "
            f"removed in the next release: it now sets {', '.join(new_keys)}; write "
            f"{'those keys' if len(new_keys) > 1 else 'that key'} instead"
        )
        warnings.warn(message, FutureWarning, stacklevel=2)
        for new in table[old]:
            section, _, name = new.partition(".")
            current = out.get(section)
            if current is not None and not isinstance(current, Mapping):
                continue  # build_section names the bad value
            merged = dict(current or {})
            if name in merged:
                continue  # the new key wins over the old one
            merged[name] = value
            out[section] = merged
            if full in sources:
                where[prefix + new] = sources[full]
    return out, where


def validate(cfg: Config) -> Config:
    """Cross-field checks that a single field's type and range cannot express."""
    f = cfg.features
    if f.min_unique_words > f.max_unique_words:
        raise ConfigError(
            f"features.min_unique_words ({f.min_unique_words}) must not exceed "
            f"features.max_unique_words ({f.max_unique_words})"
        )
    check_evaluate(cfg.evaluate)
    for i, p in enumerate(cfg.split.pairs):
        parse_pair(p, key=f"split.pairs[{i}]")
    memory = cfg.spark.driver_memory
    if memory != "auto" and not re.fullmatch(r"\d+(\.\d+)?[kmgt]?", memory.strip().lower()):
        raise ConfigError(
            f"spark.driver_memory = {memory!r} is neither auto nor a JVM memory size. Fix: "
            "--set spark.driver_memory=auto (sized to the machine) or e.g. 8g or 4096m"
        )
    t = cfg.train
    if t.setup != "joint" and (len(t.pair) != 2 or t.pair[0] == t.pair[1]):
        raise ConfigError(
            f"train.setup={t.setup!r} needs train.pair to name two different languages, "
            f"e.g. --set 'train.pair=[en, de]' (got {t.pair!r})"
        )
    _check_classic_methods(cfg)
    w = cfg.words
    if len(w.pair) != 2 or w.pair[0] == w.pair[1]:
        raise ConfigError(
            f"words.pair must name two different languages, source first, e.g. "
            f"--set 'words.pair=[en, de]' (got {w.pair!r})"
        )
    try:
        codecs.lookup(cfg.ingest.encoding)
    except LookupError as exc:
        raise ConfigError(
            f"ingest.encoding {cfg.ingest.encoding!r} is not a known text encoding "
            "(try utf-8, latin-1, cp1252, utf-16)"
        ) from exc
    return cfg


def _kind(method: str) -> str | None:
    """The model kind of a registered method (None for the word-mapping baselines)."""
    spec = find_method(method)
    return spec.model_kind if spec else None


def _check_classic_methods(cfg: Config) -> None:
    """Topic-model and S2Net settings that need other sections (before any Spark work): each
    method of ``train.method`` and ``evaluate.methods`` whose section has them."""
    t, e = cfg.train, cfg.evaluate
    methods = [m for m in dict.fromkeys([t.method, *e.methods]) if find_method(m) is not None]
    no_splits = cfg.features.heldout_concepts is None
    for m in methods:
        p = t.params_of(m)
        if _kind(m) == "topics" and getattr(p, "stop_rule", None) == "validation" and no_splits:
            raise ConfigError(
                f"train.{m}.stop_rule=validation scores the split stage's validation concepts, "
                "but features.heldout_concepts is not set. Fix: set features.heldout_concepts: "
                f"splits (and rerun vocabulary and tfidf), or train.{m}.stop_rule=likelihood"
            )
        if isinstance(p, S2NetParams):
            if not p.learning_rates or not p.epochs:
                raise ConfigError(
                    f"train.{m}.learning_rates and train.{m}.epochs must each name at least "
                    f"one value; got {p.learning_rates} and {p.epochs}"
                )
            several = len(p.learning_rates) * len(set(p.epochs)) > 1
            if several and no_splits:
                raise ConfigError(
                    f"{m} chooses among train.{m}.learning_rates x train.{m}.epochs on the "
                    "split stage's validation concepts, but features.heldout_concepts is not "
                    "set. Fix: set features.heldout_concepts: splits, or give one learning "
                    "rate and one epoch count"
                )


def check_evaluate(e: EvaluateConfig) -> None:
    """Every check of the evaluate section, also for one built in Python (raise ConfigError)."""
    check_section(e, prefix="evaluate.")
    if not e.measures:
        raise ConfigError("evaluate.measures must name at least one of cosine, csls")
    if not e.precision_at:
        raise ConfigError("evaluate.precision_at must name at least one cut-off, e.g. [1, 5, 10]")
    for i, p in enumerate(e.pairs):
        parse_pair(p, key=f"evaluate.pairs[{i}]")
    if len(set(e.methods)) != len(e.methods):
        raise ConfigError(f"evaluate.methods repeats a method: {e.methods}")
    sparse = ", ".join(m for m in e.methods if _kind(m) == "sparse")
    if sparse and e.engine == "spark":
        raise ConfigError(
            f"evaluate.methods has {sparse}, whose sparse vectors need the local engine; "
            f"set evaluate.engine=local (or auto) or drop {sparse}"
        )
    own = {m: s.similarity for m in e.methods if (s := find_method(m)) and s.similarity != "cosine"}
    if own and e.engine == "spark":
        similarity = "/".join(sorted({name.upper() for name in own.values()}))
        raise ConfigError(
            f"evaluate.methods has {', '.join(own)}, whose {similarity} similarity the spark "
            "evaluation engine does not compute; set evaluate.engine=local (or auto) or drop "
            "them"
        )
