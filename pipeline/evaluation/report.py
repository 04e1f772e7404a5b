"""Evaluation outputs: dataset rows, the printable table, Markdown/JSON reports, the plot.

Files (``evaluate.report_dir``, default ``<paths.root>/reports``):

- ``evaluation.json``: the whole report (settings, sizes, λ curve, every metric);
- ``evaluation.md``: the same for people: first the per-method summary (mean P@1 and MRR
  per measure over the method's directions, the best method per column in bold, the λ/γ
  evaluated), the P@1 heatmaps, then the full P@1/P@5/P@10/MRR table per direction;
- ``precision_at_k.png``: precision at k against k, one panel per pair, a line per
  direction × measure (as the paper's Figure 2);
- ``p_at_1_<method>.png``: P@1 of every direction as a query-language × target-language
  grid, one panel per measure, one image per method (120 table rows do not show which
  languages are hard; a grid does).

The images need matplotlib (the ``report`` extra; skipped with a warning when it is not
installed) and ``evaluate.plot``. The console table (``table`` in what :func:`write_reports`
returns, printed by the runner) is likewise :func:`format_summary` followed by
:func:`format_table`.
"""

from __future__ import annotations

import io
import json
import logging
import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.config import Config, EvaluateConfig
from pipeline.evaluation.classification import markdown_section
from pipeline.io.storage import join, local_path, write_file
from pipeline.methods.registry import find_method

log = logging.getLogger(__name__)

PLOT_NAME = "precision_at_k.png"
HEATMAP_NAME = "p_at_1_{method}.png"

__all__ = ["evaluation_rows", "format_summary", "format_table", "summary", "write_reports"]

TABLE_KS = (1, 5, 10)


def evaluation_rows(setup: str, results: list[dict[str, Any]], split: str) -> list[dict]:
    """One ``evaluation`` dataset row per (direction, measure, metric[, k])."""
    rows = []
    for res in results:
        common = {
            "setup": setup,
            "method": res.get("method", "cr5"),
            "split": split,
            "lam": float(res["lam"]),
            "query_lang": res["query_lang"],
            "target_lang": res["target_lang"],
            "measure": res["measure"],
            "csls_source": res["csls_source"],
            "n_queries": res["n_queries"],
            "n_candidates": res["n_candidates"],
        }
        for k, v in sorted(res["precision_at"].items()):
            rows.append({**common, "k": int(k), "metric": "precision", "value": float(v)})
        rows.append({**common, "k": None, "metric": "mrr", "value": float(res["mrr"])})
    return rows


def _methods_in(results: list[dict[str, Any]]) -> list[str]:
    """The methods of ``results`` in order of appearance (the evaluated model's first)."""
    return list(dict.fromkeys(r.get("method", "cr5") for r in results))


def _order(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows grouped by direction and measure, methods side by side in appearance order."""
    rank = {m: i for i, m in enumerate(_methods_in(results))}
    return sorted(
        results,
        key=lambda r: (r["pair"], r["query_lang"], r["measure"], rank[r.get("method", "cr5")]),
    )


def format_table(results: list[dict[str, Any]], ks: tuple[int, ...] = TABLE_KS) -> str:
    """A fixed-width table: one line per direction × measure (× method when several)."""
    several = len(_methods_in(results)) > 1
    width = max([len(m) for m in _methods_in(results)] + [6]) + 2
    head = (
        f"{'pair':<7}{'direction':<10}{'measure':<8}"
        + (f"{'method':<{width}}" if several else "")
        + "".join(f"{'P@' + str(k):>8}" for k in ks)
        + f"{'MRR':>8}{'queries':>9}{'candidates':>12}"
    )
    lines = [head, "-" * len(head)]
    for r in _order(results):
        lines.append(
            f"{r['pair']:<7}{r['query_lang'] + '->' + r['target_lang']:<10}{r['measure']:<8}"
            + (f"{r.get('method', 'cr5'):<{width}}" if several else "")
            + "".join(f"{r['precision_at'].get(k, float('nan')):>8.3f}" for k in ks)
            + f"{r['mrr']:>8.3f}{r['n_queries']:>9}{r['n_candidates']:>12}"
        )
    return "\n".join(lines)


def _p_at_1(row: dict[str, Any]) -> float:
    """A result row's P@1 (keys are ints in memory, strings in a report read back from JSON)."""
    pa = row["precision_at"]
    return float(pa.get(1, pa.get("1", math.nan)))


def _measures_of(report: dict[str, Any]) -> list[str]:
    """The measures of the results: ``evaluate.measures`` in their order, then any a method
    adds (a topic model's own similarity, ``l1``)."""
    found = dict.fromkeys(r["measure"] for r in report["results"])
    asked = [m for m in report.get("measures", []) if m in found]
    return asked + [m for m in found if m not in asked]


def _hyperparameters(report: dict[str, Any], method: str) -> str:
    """The regularisation ``method`` was evaluated with (``λ = 0.1``, ``γ = 0.0001``; the
    ``params`` of its entry in the report's ``methods``), with "(validation)" where it was
    chosen from a grid on the validation concepts; "–" for a method without one."""
    main = report.get("method", "cr5")
    info = (report.get("methods") or {}).get(method)
    if info is not None:
        params = dict(info.get("params", {}))
        chosen = bool(info.get("gamma_selection"))
    else:  # a report without a methods entry: only the evaluated model's λ is known
        spec = find_method(method) if method == main else None
        params = {"λ": report["lam"]} if spec is not None and spec.tuned_by == "lam" else {}
        chosen = False
    if method == main and report.get("lambda_selection") and "λ" in params:
        chosen = True
    text = ", ".join(f"{k} = {v:g}" for k, v in params.items())
    return (text + " (validation)" if chosen and text else text) or "–"


def summary(report: dict[str, Any]) -> dict[str, Any]:
    """The per-method summary that opens the report and the console table.

    ``methods``: per method, in order of appearance (the evaluated model first), the λ/γ
    evaluated (``params``, text), the number of directions it was tested on and, per
    measure, the mean P@1 and MRR over those directions (a word-mapping baseline covers only
    its languages' directions: its means are over fewer). ``best``: per ``(measure,
    metric)`` column the best mean rounded to the 3 printed decimals, where two or more
    methods have one (ties are all best; one method alone has nothing to be best against).
    """
    results = report["results"]
    measures = _measures_of(report)
    methods: dict[str, dict[str, Any]] = {}
    for name in _methods_in(results):
        rows = [r for r in results if r.get("method", "cr5") == name]
        means: dict[str, dict[str, float]] = {}
        for measure in measures:
            sel = [r for r in rows if r["measure"] == measure]
            if sel:
                means[measure] = {
                    "P@1": sum(_p_at_1(r) for r in sel) / len(sel),
                    "MRR": sum(float(r["mrr"]) for r in sel) / len(sel),
                }
        methods[name] = {
            "params": _hyperparameters(report, name),
            "directions": len({(r["query_lang"], r["target_lang"]) for r in rows}),
            "means": means,
        }
    best: dict[tuple[str, str], float] = {}
    for measure in measures:
        for metric in ("P@1", "MRR"):
            vals = [
                round(m["means"][measure][metric], 3)
                for m in methods.values()
                if measure in m["means"] and not math.isnan(m["means"][measure][metric])
            ]
            if len(vals) >= 2:
                best[(measure, metric)] = max(vals)
    return {"measures": measures, "methods": methods, "best": best}


def _summary_cells(report: dict[str, Any], markdown: bool) -> tuple[list[str], list[list[str]]]:
    """Column labels and one row of cells per method; a best value in bold for Markdown,
    followed by ``*`` for the console (where the other values and "–" get a space instead,
    so the decimals of a right-aligned column stay in line)."""
    s = summary(report)
    columns = [(m, k) for m in s["measures"] for k in ("P@1", "MRR")]
    labels = ["method", "λ / γ", "directions"] + [f"{m} {k}" for m, k in columns]
    rows = []
    for name, info in s["methods"].items():
        cells = [name, info["params"], str(info["directions"])]
        for measure, metric in columns:
            v = info["means"].get(measure, {}).get(metric)
            if v is None or math.isnan(v):
                cells.append("–" if markdown else "– ")
                continue
            text = f"{v:.3f}"
            best = s["best"].get((measure, metric)) == round(v, 3)
            if markdown:
                cells.append(f"**{text}**" if best else text)
            else:
                cells.append(text + ("*" if best else " "))
        rows.append(cells)
    return labels, rows


SUMMARY_NOTE = (
    "Mean over each method's test directions (both directions of every pair).",
    "λ / γ: the value evaluated; (validation): chosen on the validation concepts.",
)


def format_summary(report: dict[str, Any]) -> str:
    """The per-method summary as fixed-width text for the console; the best method per
    column is marked with a trailing ``*``."""
    labels, rows = _summary_cells(report, markdown=False)
    widths = [max(len(c) for c in col) for col in zip(labels, *rows)]
    left = 2  # method and λ / γ left-aligned, numbers right-aligned

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))
        ).rstrip()

    head = line(labels)
    out = [
        "Summary per method (* best per column)",
        head,
        "-" * len(head),
        *(line(r) for r in rows),
        *SUMMARY_NOTE,
    ]
    return "\n".join(out)


def _summary_markdown(report: dict[str, Any]) -> list[str]:
    """The per-method summary as a Markdown table, the best method per column in bold."""
    labels, rows = _summary_cells(report, markdown=True)
    out = [
        "| " + " | ".join(labels) + " |",
        "|---|---|" + "---:|" * (len(labels) - 2),
        *("| " + " | ".join(r) + " |" for r in rows),
        "",
        " ".join(SUMMARY_NOTE) + " **Bold**: the best method per column.",
    ]
    return out


def heatmap_name(method: str) -> str:
    """The file name of ``method``'s P@1 heatmap (characters other than letters, digits,
    ``_ . -`` replaced, so any method name gives one plain file name)."""
    return HEATMAP_NAME.format(method=re.sub(r"[^A-Za-z0-9_.-]+", "_", method))


def _methods_section(report: dict[str, Any]) -> list[str]:
    methods = report.get("methods") or {}
    if len(methods) < 2:
        return []
    out = [
        "",
        "## Methods",
        "",
        "Trained on the same rows and evaluated on the same queries and candidates (their "
        "mean P@1 and MRR: the summary at the top).",
        "",
        "| method | r | own similarity | fit (s) | test (s) | model |",
        "|---|---:|---|---:|---:|---|",
    ]
    for name, info in methods.items():
        out.append(
            f"| {name} | {info['r']} | {info.get('similarity', 'cosine')} | "
            f"{info.get('fit_seconds')} | {info.get('test_seconds')} | `{info['model']}` |"
        )
    for name, info in methods.items():
        sel = info.get("gamma_selection")
        if sel:
            points = ", ".join(
                f"γ = {c['gamma']:g}: {c['score']:.4f}"
                + (" ←" if c["gamma"] == sel["chosen"] else "")
                for c in sel["curve"]
            )
            out.append("")
            out.append(
                f"{name}: γ chosen on the validation concepts by mean {sel['metric']} "
                f"({sel['measure']}): {points}."
            )
    return out


def _markdown(
    report: dict[str, Any], plot_name: str | None, heatmaps: dict[str, str] | None = None
) -> str:
    """``evaluation.md``: the summary per method first, the P@1 heatmaps (``heatmaps``: file
    name per method, linked relatively so GitHub shows them), the setup, the full table per
    direction, then methods, classification, sizes, λ selection and the P@k plot."""
    ks = TABLE_KS
    out = ["# Crosslingual retrieval evaluation", "", "## Summary", ""]
    out += _summary_markdown(report)
    if heatmaps:
        out += [
            "",
            "## P@1 per direction",
            "",
            "Rows: query language; columns: target language; one panel per measure.",
        ]
        for method, name in heatmaps.items():
            out += ["", f"![P@1 per direction, {method}]({name})"]
    out += [
        "",
        "## Setup",
        "",
        f"- setup: **{report['setup']}**; method: **{report.get('method', 'cr5')}**; "
        f"model: `{report['model']}`",
        f"- λ = {report['lam']:g}; r = {report['r']}",
        f"- measures: {', '.join(report['measures'])}; CSLS k = {report['csls_k']}, "
        f"r_S neighbourhoods over the **{report['csls_source']}**",
        f"- engine: {report['engine']}; candidates per target language: up to "
        f"{report['candidates']['max_candidates']} documents (seed "
        f"{report['candidates']['seed']}) plus the true targets",
        f"- splits: `{report['splits']['path']}` (seed {report['splits']['seed']}); "
        f"training rows of test/validation concepts: {report['leak_check_rows']}",
        "",
        "## Test results per direction",
        "",
        "| pair | direction | measure | method | "
        + " | ".join(f"P@{k}" for k in ks)
        + " | MRR | queries | candidates |",
        "|---|---|---|---|" + "---:|" * (len(ks) + 3),
    ]
    for r in _order(report["results"]):
        out.append(
            f"| {r['pair']} | {r['query_lang']}→{r['target_lang']} | {r['measure']} | "
            f"{r.get('method', 'cr5')} | "
            + " | ".join(f"{r['precision_at'].get(k, float('nan')):.3f}" for k in ks)
            + f" | {r['mrr']:.3f} | {r['n_queries']} | {r['n_candidates']} |"
        )
    out += _methods_section(report)
    out += markdown_section(report.get("classification"))
    out += ["", "## Sizes", "", "| language | training documents | documents | candidate sample |"]
    out.append("|---|---:|---:|---:|")
    per_lang = report["candidates"]["per_language"]
    for lang in sorted(set(per_lang) | set(report["training_documents"])):
        p = per_lang.get(lang, {})
        out.append(
            f"| {lang} | {report['training_documents'].get(lang, '–')} | "
            f"{p.get('documents', '–')} | {p.get('sample', '–')} |"
        )
    out.append("")
    out.append(f"Training concepts: {report.get('training_concepts')}.")
    zero = [
        f"{r['query_lang']}→{r['target_lang']}: {r['zero_queries']}"
        for r in report["results"]
        if r["measure"] == report["measures"][0] and r.get("zero_queries")
    ]
    if zero:
        out.append(
            f"Queries with no known word (zero vector, counted as misses): {', '.join(zero)}."
        )
    sel = report.get("lambda_selection")
    out += ["", "## λ selection", ""]
    if sel:
        out.append(
            f"Mean validation {sel['metric']} ({sel['measure']}) over all directions; "
            f"chosen λ = **{sel['chosen']:g}**."
        )
        if sel.get("path"):
            order = ", ".join(f"{lam:g}" for lam in sel.get("fit_order", []))
            out.append(
                f"Fitted as a regularisation path ({order}): each fit started from the "
                "previous one's leading Ritz vectors (`evaluate.lambda_warm_start`)."
            )
        out += ["", f"| λ | {sel['metric']} | fit (s) | model |", "|---:|---:|---:|---|"]
        for c in sel["curve"]:
            mark = " ←" if c["lam"] == sel["chosen"] else ""
            how = " (train stage's model)" if c.get("reused_train_model") else ""
            if c.get("resumed"):
                how = " (finished by an earlier run of this path)"
            out.append(
                f"| {c['lam']:g}{mark} | {c['score']:.4f} | {c['fit_seconds']} | "
                f"`{c['model']}`{how} |"
            )
    else:
        out.append("No selection (evaluate.lambda_grid has fewer than two values).")
    if plot_name:
        out += ["", "## Precision at k", "", f"![precision at k]({plot_name})"]
    out.append("")
    return "\n".join(out)


# One look per method (or per measure when a single method is plotted): colour, line
# style and marker all differ, so curves stay apart in grey-scale print and where
# they overlap. The two directions of a pair: filled vs open markers.
_LOOKS = (
    ("tab:blue", "-", "o"),
    ("tab:orange", "--", "s"),
    ("tab:green", ":", "^"),
    ("tab:red", "-.", "D"),
    ("tab:purple", (0, (5, 1, 1, 1)), "v"),
    ("tab:brown", (0, (1, 1)), "P"),
)


def _pyplot() -> Any | None:
    """``matplotlib.pyplot`` on the Agg backend (no display on a driver), or None with a
    warning when matplotlib is not installed (the reports are then written without images)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning(
            "matplotlib is not installed: no precision-at-k plot and no P@1 heatmaps "
            "(pip install 'cr5-on-spark[report]', or matplotlib)"
        )
        return None
    return plt


def _plot(report: dict[str, Any], path: Path | io.BytesIO, plt: Any) -> None:
    """The precision-at-k figure (module docstring) into ``path``."""
    from matplotlib.lines import Line2D

    pairs = report["pairs"]
    methods = _methods_in(report["results"])
    several = len(methods) > 1
    # Curves: methods (cosine only, to stay readable) or, for one method, measures.
    series = methods if several else sorted({r["measure"] for r in report["results"]})
    look = {name: _LOOKS[i % len(_LOOKS)] for i, name in enumerate(series)}
    cols = min(3, len(pairs))
    rows = -(-len(pairs) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.3 * rows), squeeze=False)
    for ax, pair in zip(axes.flat, pairs):
        first = pair.split("-")[0]
        for r in report["results"]:
            if r["pair"] != pair or (several and r["measure"] != "cosine"):
                continue
            name = r.get("method", "cr5") if several else r["measure"]
            color, style, marker = look[name]
            ks = sorted(r["precision_at"])
            ax.plot(
                ks,
                [r["precision_at"][k] for k in ks],
                color=color,
                linestyle=style,
                marker=marker,
                markersize=4,
                linewidth=1.3,
                markerfacecolor=color if r["query_lang"] == first else "white",
            )
        ax.set_title(pair)
        ax.set_xlabel("k")
        ax.set_ylabel("precision at k")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(pairs) :]:
        ax.axis("off")
    handles = [
        Line2D([], [], color=c, linestyle=ls, marker=m, label=name)
        for name, (c, ls, m) in look.items()
    ] + [
        Line2D([], [], color="grey", marker="o", linestyle="none", label="l1→l2 (pair order)"),
        Line2D(
            [], [], color="grey", marker="o", markerfacecolor="white", linestyle="none",
            label="l2→l1",
        ),
    ]  # fmt: skip
    # One legend for all panels, outside the axes so it never covers a curve.
    fig.legend(handles=handles, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    title = ", ".join(methods) + " (cosine)" if several else report.get("method", "cr5")
    fig.suptitle(f"{title}; {report['setup']}, λ={report['lam']:g}, r={report['r']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight", format="png")
    plt.close(fig)


def _heatmap(report: dict[str, Any], method: str, path: Path | io.BytesIO, plt: Any) -> None:
    """``method``'s P@1 per direction into ``path``: a query-language × target-language grid
    per measure, every cell annotated, the same 0-1 colour scale in every panel and image
    (so images compare); cells of no evaluated direction (the diagonal, unpaired languages)
    are left grey and blank."""
    rows = [r for r in report["results"] if r.get("method", "cr5") == method]
    measures = [m for m in _measures_of(report) if any(r["measure"] == m for r in rows)]
    langs = sorted({r["query_lang"] for r in rows} | {r["target_lang"] for r in rows})
    at = {lang: i for i, lang in enumerate(langs)}
    n = len(langs)
    side = 0.55 * n + 1.3
    fontsize = 9 if n <= 6 else 7 if n <= 12 else 5
    cmap = plt.get_cmap("viridis").with_extremes(bad="#e8e8e8")
    fig, axes = plt.subplots(
        1,
        len(measures),
        figsize=(len(measures) * side + 1.2, side + 0.6),
        squeeze=False,
        layout="constrained",
    )
    image = None
    for ax, measure in zip(axes.flat, measures):
        grid = np.full((n, n), np.nan)
        for r in rows:
            if r["measure"] == measure:
                grid[at[r["query_lang"]], at[r["target_lang"]]] = _p_at_1(r)
        image = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=0.0, vmax=1.0)
        for i, j in zip(*np.nonzero(np.isfinite(grid))):
            v = grid[i, j]
            # viridis is dark below ~0.55 and light above: the text takes the other one
            ax.text(
                j, i, f"{v:.2f}", ha="center", va="center", fontsize=fontsize,
                color="white" if v < 0.55 else "black",
            )  # fmt: skip
        ax.set_xticks(range(n), langs)
        ax.set_yticks(range(n), langs)
        ax.set_xlabel("target language")
        ax.set_ylabel("query language")
        ax.set_title(f"{measure} (mean {np.nanmean(grid):.3f})", fontsize=10)
    fig.colorbar(image, ax=list(axes.flat), shrink=0.8, label="P@1")
    fig.suptitle(f"P@1 per direction: {method}; {report['setup']}", fontsize=10)
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)


def write_reports(cfg: Config, e: EvaluateConfig, report: dict[str, Any]) -> dict[str, Any]:
    """Write the JSON, Markdown and PNG reports (any store, :mod:`pipeline.io.storage`; each
    file replaced whole); return their paths (``heatmaps``: method -> path) and the console
    table (the summary, then the full table)."""
    out = local_path(e.report_dir or (cfg.paths.root.rstrip("/") + "/reports"))
    files: dict[str, Any] = {
        "report_json": join(out, "evaluation.json"),
        "report_md": join(out, "evaluation.md"),
    }
    plt = _pyplot() if e.plot else None
    names: dict[str, str] = {}
    if plt is not None:
        plot = io.BytesIO()
        _plot(report, plot, plt)
        files["plot"] = join(out, PLOT_NAME)
        write_file(files["plot"], plot.getvalue())
        files["heatmaps"] = {}
        for method in _methods_in(report["results"]):
            image = io.BytesIO()
            _heatmap(report, method, image, plt)
            names[method] = heatmap_name(method)
            files["heatmaps"][method] = join(out, names[method])
            write_file(files["heatmaps"][method], image.getvalue())
    table = format_summary(report) + "\n\n" + format_table(report["results"])
    body = {**report, **files, "table": table}
    write_file(files["report_json"], json.dumps(body, indent=2, sort_keys=True, default=str))
    write_file(files["report_md"], _markdown(report, PLOT_NAME if plt else None, names))
    return {**files, "table": table}
