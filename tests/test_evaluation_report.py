"""The evaluate stage's report files (pipeline/evaluation/report.py), without Spark.

``write_reports`` runs on a hand-built report (three methods over three languages, one with
a similarity of its own, one covering fewer directions, random metrics from a seeded
generator), so the checks are cheap: the per-method summary that opens ``evaluation.md``
and the console table is recomputed here from ``evaluation.json``'s per-direction results,
the P@1 heatmaps must be PNGs written through the storage layer and linked from the
Markdown, and a missing matplotlib leaves the text reports whole. The stage on real data:
tests/test_evaluation_stage.py.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pipeline.config import EvaluateConfig, load_config
from pipeline.evaluation import report as report_mod
from pipeline.evaluation.report import heatmap_name, write_reports
from tests.conftest import REPO

LANGS = ("de", "en", "es")
PAIRS = ["de-en", "de-es", "en-es"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _results(rng: np.random.Generator) -> list[dict[str, Any]]:
    """Per-direction results as the experiment writes them: cr5 and opca on every direction
    (cosine, csls), jplsa with its own l1 as well, avg_rcsls on the de-en pair only."""
    plan = {
        "cr5": (PAIRS, ["cosine", "csls"]),
        "opca": (PAIRS, ["cosine", "csls"]),
        "jplsa": (PAIRS, ["cosine", "csls", "l1"]),
        "avg_rcsls": (["de-en"], ["cosine", "csls"]),
    }
    out = []
    for method, (pairs, measures) in plan.items():
        for pair in pairs:
            a, b = pair.split("-")
            for q, t in ((a, b), (b, a)):
                for measure in measures:
                    p = np.sort(rng.uniform(0.0, 1.0, 3))
                    out.append(
                        {
                            "method": method,
                            "pair": pair,
                            "query_lang": q,
                            "target_lang": t,
                            "measure": measure,
                            "csls_source": "queries",
                            "precision_at": {1: float(p[0]), 5: float(p[1]), 10: float(p[2])},
                            "mrr": float(rng.uniform(p[0], p[2])),
                            "n_queries": 40,
                            "n_candidates": 120,
                            "lam": 0.1,
                        }
                    )
    return out


def _report(seed: int = 3) -> dict[str, Any]:
    """A report as :func:`pipeline.evaluation.experiment.build_report` returns it."""
    common = {"fit_seconds": 1.5, "test_seconds": 0.4, "similarity": "cosine"}
    return {
        "setup": "joint",
        "model": "/tmp/model",
        "lam": 0.1,
        "r": 16,
        "pairs": PAIRS,
        "measures": ["cosine", "csls"],
        "csls_source": "queries",
        "csls_k": 10,
        "engine": "local",
        "splits": {"path": "/tmp/splits", "seed": 7, "pairs": {}},
        "candidates": {"max_candidates": 120, "seed": 1, "per_language": {}},
        "training_documents": {lang: 300 for lang in LANGS},
        "training_concepts": 300,
        "leak_check_rows": 0,
        "lambda_selection": {
            "grid": [0.1, 1.0],
            "metric": "MRR",
            "measure": "csls",
            "chosen": 0.1,
            "curve": [
                {"lam": 0.1, "score": 0.6, "fit_seconds": 2.0, "model": "/tmp/l0.1"},
                {"lam": 1.0, "score": 0.5, "fit_seconds": 2.0, "model": "/tmp/l1"},
            ],
            "backend_load_seconds": 0.1,
            "path": False,
            "fit_order": [],
        },
        "method": "cr5",
        "methods": {
            "cr5": {"model": "/tmp/model", "r": 16, "lam": 0.1, "params": {"λ": 0.1}, **common},
            "opca": {
                "model": "/tmp/opca",
                "r": 16,
                "lam": 0.1,
                "params": {"γ": 0.0001},
                **common,
                "gamma_selection": {
                    "metric": "MRR",
                    "measure": "csls",
                    "chosen": 0.0001,
                    "curve": [{"gamma": 0.0001, "score": 0.5}, {"gamma": 1.0, "score": 0.1}],
                },
            },
            "jplsa": {
                "model": "/tmp/jplsa",
                "r": 16,
                "lam": 0.1,
                "params": {},
                **common,
                "similarity": "l1",
            },
            "avg_rcsls": {"model": "/tmp/avg", "r": 16, "lam": 0.0, "params": {}, **common},
        },
        "results": _results(np.random.default_rng(seed)),
        "test_seconds": 0.4,
    }


@pytest.fixture(scope="module")
def cfg():
    return load_config([REPO / "conf" / "local.yaml"], [])


def _write(cfg, tmp_path: Path, plot: bool, seed: int = 3) -> tuple[dict[str, Any], str]:
    files = write_reports(cfg, EvaluateConfig(report_dir=str(tmp_path), plot=plot), _report(seed))
    return files, (tmp_path / "evaluation.md").read_text()


def _expected(js: dict[str, Any]) -> tuple[dict, dict, dict]:
    """From the JSON's per-direction results alone: mean P@1 and MRR per (method, measure),
    the number of directions per method, and the best rounded mean per (measure, metric)
    column where two or more methods have one."""
    cells: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    directions: dict[str, set] = defaultdict(set)
    for r in js["results"]:
        # JSON keys are strings: the k of P@k reads back as "1"
        cells[(r["method"], r["measure"])].append((r["precision_at"]["1"], r["mrr"]))
        directions[r["method"]].add((r["query_lang"], r["target_lang"]))
    means = {
        key: {
            "P@1": float(np.mean([v[0] for v in vals])),
            "MRR": float(np.mean([v[1] for v in vals])),
        }
        for key, vals in cells.items()
    }
    by_column: dict[tuple[str, str], list[float]] = defaultdict(list)
    for (_, measure), m in means.items():
        for metric, v in m.items():
            by_column[(measure, metric)].append(round(v, 3))
    best = {col: max(vals) for col, vals in by_column.items() if len(vals) >= 2}
    return means, {m: len(d) for m, d in directions.items()}, best


def _markdown_summary(md: str) -> tuple[list[str], dict[str, list[str]]]:
    """The header and the rows (by method) of the table under ``## Summary``."""
    section = md.split("## Summary", 1)[1].split("\n## ", 1)[0]
    lines = [ln for ln in section.splitlines() if ln.startswith("| ")]
    split = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines]
    return split[0], {row[0]: row for row in split[1:]}


def _console_summary(table: str) -> tuple[list[str], dict[str, list[str]]]:
    """The header and the rows of the console summary (columns split on 2+ spaces)."""
    lines = table.split("\n\n", 1)[0].splitlines()
    rule = next(i for i, ln in enumerate(lines) if ln and set(ln) == {"-"})
    header = re.split(r"\s{2,}", lines[rule - 1].strip())
    rows = {}
    for ln in lines[rule + 1 :]:
        cells = re.split(r"\s{2,}", ln.strip())
        if len(cells) != len(header):
            break  # the notes under the table
        rows[cells[0]] = cells
    return header, rows


def test_summary_is_the_mean_of_the_json_results_with_the_best_marked(cfg, tmp_path):
    files, md = _write(cfg, tmp_path, plot=False)
    js = json.loads((tmp_path / "evaluation.json").read_text())
    means, n_directions, best = _expected(js)
    methods = ["cr5", "opca", "jplsa", "avg_rcsls"]
    columns = [(m, k) for m in ("cosine", "csls", "l1") for k in ("P@1", "MRR")]
    params = {
        "cr5": "λ = 0.1 (validation)",
        "opca": "γ = 0.0001 (validation)",
        "jplsa": "–",
        "avg_rcsls": "–",
    }
    assert n_directions == {"cr5": 6, "opca": 6, "jplsa": 6, "avg_rcsls": 2}

    md_header, md_rows = _markdown_summary(md)
    con_header, con_rows = _console_summary(files["table"])
    labels = ["method", "λ / γ", "directions"] + [f"{m} {k}" for m, k in columns]
    assert md_header == labels and con_header == labels
    assert list(md_rows) == methods and list(con_rows) == methods
    n_bold = 0
    for method in methods:
        md_row, con_row = md_rows[method], con_rows[method]
        assert md_row[1] == con_row[1] == params[method]
        assert md_row[2] == con_row[2] == str(n_directions[method])
        for i, (measure, metric) in enumerate(columns, start=3):
            if (method, measure) not in means:  # only jplsa has l1
                assert md_row[i] == con_row[i] == "–"
                continue
            value = means[(method, measure)][metric]
            is_best = best.get((measure, metric)) == round(value, 3)
            n_bold += is_best
            assert md_row[i] == (f"**{value:.3f}**" if is_best else f"{value:.3f}")
            assert con_row[i] == (f"{value:.3f}*" if is_best else f"{value:.3f}")
    # four columns with several methods (cosine and csls P@1, MRR); l1 has jplsa alone
    assert set(best) == {(m, k) for m in ("cosine", "csls") for k in ("P@1", "MRR")}
    assert n_bold >= 4

    # the summary comes first, then the full table (on the console and in the Markdown)
    table = files["table"]
    assert table.index("Summary per method") < table.index("pair   direction")
    assert len(table.split("\n\n", 1)[1].splitlines()) == 2 + len(js["results"])
    assert md.index("## Summary") < md.index("## Test results per direction")
    assert md.index("| cr5 | λ = 0.1") < md.index("| de-en | de→en |")
    # the old means columns left the Methods section (the summary holds them)
    methods_section = md.split("## Methods", 1)[1].split("\n## ", 1)[0]
    assert "mean P@1 (cosine)" not in methods_section and "| jplsa | 16 | l1 |" in methods_section


def test_p_at_1_heatmaps_are_pngs_written_through_storage_and_linked(cfg, tmp_path, monkeypatch):
    image = pytest.importorskip("matplotlib.image")
    written: list[str] = []
    real_write = report_mod.write_file

    def recording_write(path: str, data: bytes | str, **kw: Any) -> str:
        written.append(str(path))
        return real_write(path, data, **kw)

    monkeypatch.setattr(report_mod, "write_file", recording_write)
    files, md = _write(cfg, tmp_path, plot=True)
    methods = ["cr5", "opca", "jplsa", "avg_rcsls"]
    assert list(files["heatmaps"]) == methods
    links = []
    for method in methods:
        path = Path(files["heatmaps"][method])
        assert path == tmp_path / heatmap_name(method) == tmp_path / f"p_at_1_{method}.png"
        assert str(path) in written  # the storage layer's writer, as the P@k plot
        data = path.read_bytes()
        assert data.startswith(PNG_SIGNATURE)
        pixels = image.imread(path)
        assert pixels.ndim == 3 and min(pixels.shape[:2]) > 100
        assert pixels.std() > 0.05  # not a blank canvas
        link = f"]({path.name})"  # relative: GitHub shows it beside evaluation.md
        assert link in md
        links.append(md.index(link))
    # a panel per measure: jplsa (cosine, csls, l1) is wider than cr5 (cosine, csls)
    wide = image.imread(files["heatmaps"]["jplsa"]).shape
    narrow = image.imread(files["heatmaps"]["cr5"]).shape
    assert wide[1] / wide[0] > narrow[1] / narrow[0]
    assert Path(files["plot"]).read_bytes().startswith(PNG_SIGNATURE)
    assert md.index("## Summary") < min(links)
    assert max(links) < md.index("## Test results per direction")
    js = json.loads((tmp_path / "evaluation.json").read_text())
    assert js["heatmaps"] == files["heatmaps"]


def test_reports_without_matplotlib_have_no_images_and_say_so(cfg, tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    with caplog.at_level(logging.WARNING, logger="pipeline.evaluation.report"):
        files, md = _write(cfg, tmp_path, plot=True)
    assert "matplotlib is not installed" in caplog.text
    assert "plot" not in files and "heatmaps" not in files
    assert "![" not in md and "## Summary" in md
    assert not list(tmp_path.glob("*.png"))
