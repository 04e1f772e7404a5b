"""What ``ingest_wikipedia`` read, dropped and kept: the stage's typed report.

The phases of the stage fill one :class:`IngestReport` (counts per language, problems with
examples, the side tables read, how concepts were assigned); :meth:`IngestReport.to_dict`
gives the plain dictionary that the stage returns and writes into the ``documents``
manifest. Optional parts appear in it only when the phase that fills them ran.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

Example = dict[str, Any]
"""An offending record quoted in a report: its language, location, title, detail..."""


@dataclass
class LanguageCounts:
    """Pages of one language: read, kept as articles, dropped on purpose, malformed, and
    kept articles whose markup was repaired; then the documents written and the articles
    left without a concept."""

    pages_read: int = 0
    kept: int = 0
    dropped: int = 0
    malformed: int = 0
    broken_markup: int = 0
    documents: int | None = None
    without_concept: int | None = None

    def to_dict(self) -> dict[str, int]:
        out = {
            "pages_read": self.pages_read,
            "kept": self.kept,
            "dropped": self.dropped,
            "malformed": self.malformed,
            "broken_markup": self.broken_markup,
        }
        if self.documents is not None:
            out["documents"] = self.documents
        if self.without_concept is not None:
            out["without_concept"] = self.without_concept
        return out


@dataclass
class TableReport:
    """Records read from a side table (Wikidata sitelinks, langlinks, page_props)."""

    rows: int
    malformed: int
    malformed_examples: list[Example]

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "malformed": self.malformed,
            "malformed_examples": self.malformed_examples,
        }


@dataclass
class ConceptReport:
    """How articles got their concept ids.

    ``component_iterations``: label-propagation rounds over interlanguage links (None when
    no link source is configured). ``conflicts``: articles left without a concept or
    dropped because of a conflict, by kind (``component_spans_several_items``,
    ``same_concept_same_language``). ``without_concept``: kept articles with no concept,
    per language.
    """

    wikidata_sitelinks: TableReport | None = None
    langlinks: TableReport | None = None
    component_iterations: int | None = None
    conflicts: dict[str, int] = field(default_factory=dict)
    conflict_examples: list[Example] = field(default_factory=list)
    without_concept: dict[str, int] = field(default_factory=dict)
    without_concept_examples: list[Example] = field(default_factory=list)

    def add_conflicts(self, kind: str, n: int, examples: list[Example]) -> None:
        """Count ``n`` articles of conflict ``kind``, quoting ``examples``."""
        self.conflicts[kind] = n
        self.conflict_examples.extend(examples)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.wikidata_sitelinks is not None:
            out["wikidata_sitelinks"] = self.wikidata_sitelinks.to_dict()
        if self.langlinks is not None:
            out["langlinks"] = self.langlinks.to_dict()
        if self.component_iterations is not None:
            out["component_iterations"] = self.component_iterations
        if self.conflicts:
            out["conflicts"] = dict(self.conflicts)
            out["conflict_examples"] = list(self.conflict_examples)
        out["without_concept"] = dict(self.without_concept)
        out["without_concept_examples"] = list(self.without_concept_examples)
        return out


@dataclass
class IngestReport:
    """The report of one ``ingest_wikipedia`` run.

    ``dumps``: lang -> the configured dump files; ``dbnames``: lang -> the ``<dbname>`` of
    its dumps; ``per_language``: page counts (:class:`LanguageCounts`);
    ``dropped_by_reason`` and ``malformed_by_kind``: lang -> reason -> pages; ``files``:
    lang -> dump file -> pages read and its dbname; ``disambiguation_after_parse``:
    source -> lang -> articles dropped as disambiguation pages after parsing (by the dump's
    own templates, ``page_props`` or Wikidata).
    """

    dumps: dict[str, list[str]]
    work_items: int
    cleaner: str
    dbnames: dict[str, list[str]]
    per_language: dict[str, LanguageCounts] = field(default_factory=dict)
    dropped_by_reason: dict[str, dict[str, int]] = field(default_factory=dict)
    malformed_by_kind: dict[str, dict[str, int]] = field(default_factory=dict)
    malformed_examples: list[Example] = field(default_factory=list)
    broken_markup_examples: list[Example] = field(default_factory=list)
    files: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    disambiguation_templates_in_dump: dict[str, int] | None = None
    disambiguation_after_parse: dict[str, dict[str, int]] = field(default_factory=dict)
    page_props: TableReport | None = None
    concepts: ConceptReport = field(default_factory=ConceptReport)
    empty_languages: list[str] | None = None
    documents_per_language: dict[str, int] | None = None
    documents: int | None = None
    n_concepts: int | None = None
    config: dict[str, Any] | None = None

    def add_parsed(self, groups: Iterable[tuple[str, str, str | None, str | None, int]]) -> None:
        """Count the parsed frame's rows, given per ``(lang, kind, status, reason, count)``.

        Pages (kept or dropped) and malformed units count as read; ``broken`` rows count
        kept articles whose markup was repaired.
        """
        per_lang: dict[str, LanguageCounts] = {}
        dropped: dict[str, dict[str, int]] = {}
        malformed: dict[str, dict[str, int]] = {}
        for lang, kind, status, reason, n in groups:
            row = per_lang.setdefault(lang, LanguageCounts())
            if kind == "page":
                row.pages_read += n
                if status == "kept":
                    row.kept += n
                else:
                    row.dropped += n
                    dropped.setdefault(lang, {})[reason] = n
            elif kind == "problem":
                row.pages_read += n
                row.malformed += n
                d = malformed.setdefault(lang, {})
                d[reason] = d.get(reason, 0) + n
            elif kind == "broken":
                row.broken_markup += n
        self.per_language = dict(sorted(per_lang.items()))
        self.dropped_by_reason = dict(sorted(dropped.items()))
        self.malformed_by_kind = dict(sorted(malformed.items()))

    def add_disambiguation(self, source: str, counts: dict[str, int]) -> None:
        """Move articles found to be disambiguation pages by ``source`` after parsing
        (lang -> articles) from kept to dropped."""
        self.disambiguation_after_parse[source] = dict(sorted(counts.items()))
        for lang, n in counts.items():
            row = self.per_language[lang]
            row.kept -= n
            row.dropped += n
            reasons = self.dropped_by_reason.setdefault(lang, {})
            reasons["disambiguation"] = reasons.get("disambiguation", 0) + n

    def add_documents(self, per_lang: dict[str, int]) -> None:
        """The documents written per language, and the articles without a concept."""
        for lang, row in self.per_language.items():
            row.documents = per_lang.get(lang, 0)
            row.without_concept = self.concepts.without_concept.get(lang, 0)
        self.documents_per_language = per_lang
        self.documents = sum(per_lang.values())

    def per_language_dict(self) -> dict[str, dict[str, int]]:
        """``per_language`` as plain dictionaries."""
        return {lang: row.to_dict() for lang, row in self.per_language.items()}

    def to_dict(self) -> dict[str, Any]:
        """The report as the stage returns it and writes it into the manifest."""
        out: dict[str, Any] = {
            "dumps": self.dumps,
            "work_items": self.work_items,
            "cleaner": self.cleaner,
            "dbnames": self.dbnames,
            "per_language": self.per_language_dict(),
            "dropped_by_reason": self.dropped_by_reason,
            "malformed_by_kind": self.malformed_by_kind,
            "malformed_examples": self.malformed_examples,
            "broken_markup_examples": self.broken_markup_examples,
            "files": self.files,
        }
        if self.disambiguation_templates_in_dump is not None:
            out["disambiguation_templates_in_dump"] = self.disambiguation_templates_in_dump
        if self.disambiguation_after_parse:
            out["disambiguation_after_parse"] = self.disambiguation_after_parse
        if self.page_props is not None:
            out["page_props"] = self.page_props.to_dict()
        out["concepts"] = self.concepts.to_dict()
        optional = {
            "empty_languages": self.empty_languages,
            "documents_per_language": self.documents_per_language,
            "documents": self.documents,
            "n_concepts": self.n_concepts,
            "config": self.config,
        }
        out.update({k: v for k, v in optional.items() if v is not None})
        return out
