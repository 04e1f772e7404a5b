"""Evaluation outputs: dataset rows, the printable table, Markdown/JSON reports, the plot.

Files (``evaluate.report_dir``, default ``<paths.root>/reports``):

- ``evaluation.json``: the whole report (settings, sizes, λ curve, every metric);
- ``evaluation.md``: the same for people, with the P@1/P@5/P@10/MRR table;
- ``precision_at_k.png``: precision at k against k, one panel per pair, a line per
  direction × measure (as the paper's Figure 2); needs matplotlib (skipped with a warning
  when it is not installed).
"""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path
from typing import Any

from pipeline.config import Config, EvaluateConfig
from pipeline.evaluation.classification import markdown_section
from pipeline.io.storage import join, local_path, write_file

log = logging.getLogger(__name__)

PLOT_NAME = "precision_at_k.png"

__all__ = ["evaluation_rows", "format_table", "write_reports"]

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


def _methods_section(report: dict[str, Any]) -> list[str]:
    methods = report.get("methods") or {}
    if len(methods) < 2:
        return []
    out = [
        "",
        "## Methods",
        "",
        "Trained on the same rows and evaluated on the same queries and candidates.",
        "",
        "| method | r | regularisation | fit (s) | test (s) | mean P@1 (cosine) "
        "| mean MRR (cosine) | mean P@1, MRR (own similarity) | model |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]

    def means(name: str, measure: str) -> tuple[float, float]:
        rows = [
            r
            for r in report["results"]
            if r.get("method", "cr5") == name and r["measure"] == measure
        ]
        if not rows:
            return float("nan"), float("nan")
        p1 = sum(r["precision_at"].get(1, 0.0) for r in rows) / len(rows)
        return p1, sum(r["mrr"] for r in rows) / len(rows)

    for name, info in methods.items():
        p1, mrr = means(name, "cosine")
        own = info.get("similarity", "cosine")
        own_cell = "–"
        if own != "cosine":
            op1, omrr = means(name, own)
            own_cell = f"{own}: {op1:.3f}, {omrr:.3f}"
        reg = ", ".join(f"{k} = {v:g}" for k, v in info.get("params", {}).items())
        out.append(
            f"| {name} | {info['r']} | {reg or '–'} | {info.get('fit_seconds')} | "
            f"{info.get('test_seconds')} | {p1:.3f} | {mrr:.3f} | {own_cell} | "
            f"`{info['model']}` |"
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


def _markdown(report: dict[str, Any], plot_name: str | None) -> str:
    ks = TABLE_KS
    out = [
        "# Crosslingual retrieval evaluation",
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
        "## Test results",
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


def _plot(report: dict[str, Any], path: Path | io.BytesIO) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.lines import Line2D
    except ImportError:
        log.warning("matplotlib is not installed: no precision-at-k plot (pip install matplotlib)")
        return False
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
    return True


def write_reports(cfg: Config, e: EvaluateConfig, report: dict[str, Any]) -> dict[str, str]:
    """Write the JSON, Markdown and PNG reports (any store, :mod:`pipeline.io.storage`; each
    file replaced whole); return their paths and the table."""
    out = local_path(e.report_dir or (cfg.paths.root.rstrip("/") + "/reports"))
    plot = io.BytesIO()
    have_plot = e.plot and _plot(report, plot)
    files = {"report_json": join(out, "evaluation.json"), "report_md": join(out, "evaluation.md")}
    if have_plot:
        files["plot"] = join(out, PLOT_NAME)
        write_file(files["plot"], plot.getvalue())
    table = format_table(report["results"])
    body = {**report, **files, "table": table}
    write_file(files["report_json"], json.dumps(body, indent=2, sort_keys=True, default=str))
    write_file(files["report_md"], _markdown(report, PLOT_NAME if have_plot else None))
    return {**files, "table": table}
