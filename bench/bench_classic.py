"""The classic field beside Cr5: the full DDTP evaluation table, and training cost at 100k docs.

Two measurements, each a subcommand (run from the repository root):

``ddtp``
    The whole chain (``ingest → split → vocabulary → tfidf → train → evaluate``) on the full
    DDTP en/de/fr/es corpus (``bench/build_ddtp_full.sh`` builds it) with
    ``conf/local.yaml``, ``conf/short-docs.yaml``, ``conf/sample.yaml`` and
    ``bench/classic_ddtp.yaml``: Cr5 (λ chosen on the validation concepts) and, trained on
    the same rows and scored on the same queries and candidates, untranslated, CL-LSI, CCA,
    OPCA (γ chosen), JPLSA, CPLSA (EM stopped on validation P@1) and S2Net (rate and epochs
    chosen). Writes, per method and direction, P@1, P@10 and MRR with cosine, CSLS and the
    method's own similarity (L1 for the topic models), their means over the 12 directions and
    each method's fit time::

        OPENBLAS_NUM_THREADS=1 nice -n 10 .venv/bin/python bench/bench_classic.py ddtp \\
            --corpus ~/.cache/cr5/ddtp_full.parquet --out bench/results/classic_ddtp.json

``costs``
    Training time and memory of every method on a Wikipedia-shaped corpus of ``--docs``
    documents (``bench/wikishape.py``, generated once into the work directory): one
    ``jobs/train.py`` process per method, ``train.backend=local``, r = ``--r``, sampled like
    ``bench/bench_chain.py`` (wall, CPU, the driver's peak memory); the iterative methods run
    a fixed amount of work (``--em-iterations`` EM iterations, ``--epochs`` S2Net epochs at one
    rate) so that their cost per iteration / epoch can be scaled to any stopping point; ratios
    are to Cr5 measured in the same run::

        OPENBLAS_NUM_THREADS=1 nice -n 10 .venv/bin/python bench/bench_classic.py costs \\
            --docs 100000 --out bench/results/classic_costs_100k.json

Each writes its JSON (``--out``) and a text table beside it (``.txt``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.bench_chain import machine_info, run_stage  # noqa: E402

PYTHON = sys.executable
METHODS = ("cr5", "untranslated", "cl_lsi", "cca", "opca", "jplsa", "cplsa", "s2net")
OWN = {"jplsa": "l1", "cplsa": "l1"}


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    env["PYTHONPATH"] = str(ROOT) + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
    )
    return env


def _commit() -> str | None:
    if os.environ.get("CR5_BENCH_COMMIT"):  # run from an exported snapshot of a commit
        return os.environ["CR5_BENCH_COMMIT"]
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def _manifest(root: Path, dataset: str) -> dict[str, Any]:
    return json.loads((root / dataset / "_manifest.json").read_text()).get("report", {})


# --------------------------------------------------------------------------- ddtp


def _mean(rows: list[dict[str, Any]], key: str) -> float | None:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return round(sum(vals) / len(vals), 4) if vals else None


def evaluation_table(report: dict[str, Any]) -> dict[str, Any]:
    """Per method: every direction's P@1, P@10, MRR per measure, and their means."""
    out: dict[str, Any] = {}
    for row in report["results"]:
        prec = {int(k): v for k, v in row["precision_at"].items()}
        entry = out.setdefault(row["method"], {}).setdefault(row["measure"], [])
        entry.append(
            {
                "direction": f"{row['query_lang']}->{row['target_lang']}",
                "p_at_1": round(prec[1], 4),
                "p_at_10": round(prec[10], 4),
                "mrr": round(row["mrr"], 4),
                "n_queries": row["n_queries"],
                "n_candidates": row["n_candidates"],
            }
        )
    summary = {}
    for method, measures in out.items():
        info = report["methods"].get(method, {})
        summary[method] = {
            "fit_seconds": info.get("fit_seconds"),
            "train_wall_seconds": info.get("train_wall_seconds"),
            "params": info.get("params"),
            "means": {
                m: {k: _mean(rows, k) for k in ("p_at_1", "p_at_10", "mrr")}
                for m, rows in measures.items()
            },
            "directions": measures,
        }
    return summary


def ddtp_text(result: dict[str, Any]) -> str:
    table = result["table"]
    order = [m for m in METHODS if m in table]
    lines = [
        f"Full DDTP en/de/fr/es, {result['corpus']['documents']} training documents, "
        f"{result['corpus']['concepts']} concepts; r = {result['r']}; "
        f"{result['machine'].get('cores')} cores, {result['machine'].get('memory_gb')} GB; "
        f"commit {result['commit']}; chain wall {result['chain']['wall_s']} s",
        "",
        "mean over the 12 directions:",
        "| method | fit (s) | P@1 cos | P@10 cos | MRR cos | P@1 CSLS | MRR CSLS | P@1 own "
        "| P@10 own | MRR own |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for m in order:
        t = table[m]
        cos, csls = t["means"].get("cosine", {}), t["means"].get("csls", {})
        own = t["means"].get(OWN.get(m, "cosine"), {})

        def f(x: float | None) -> str:
            return "–" if x is None else f"{x:.3f}"

        lines.append(
            f"| {m} | {t['fit_seconds']} | {f(cos.get('p_at_1'))} | {f(cos.get('p_at_10'))} | "
            f"{f(cos.get('mrr'))} | {f(csls.get('p_at_1'))} | {f(csls.get('mrr'))} | "
            f"{f(own.get('p_at_1'))} | {f(own.get('p_at_10'))} | {f(own.get('mrr'))} |"
        )
    lines += ["", "per direction (own similarity: cosine, L1 for jplsa / cplsa), P@1 / P@10 / MRR:"]
    directions = [d["direction"] for d in table[order[0]]["directions"]["cosine"]]
    lines.append("| method | " + " | ".join(directions) + " |")
    lines.append("|---|" + "---:|" * len(directions))
    for m in order:
        rows = {d["direction"]: d for d in table[m]["directions"][OWN.get(m, "cosine")]}
        cells = [
            f"{rows[d]['p_at_1']:.3f} / {rows[d]['p_at_10']:.3f} / {rows[d]['mrr']:.3f}"
            if d in rows
            else "–"
            for d in directions
        ]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def run_ddtp(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(args.workdir).resolve()
    root = workdir / "out"
    workdir.mkdir(parents=True, exist_ok=True)
    confs = [
        "conf/local.yaml",
        "conf/short-docs.yaml",
        "conf/sample.yaml",
        "bench/classic_ddtp.yaml",
    ]
    cmd = [PYTHON, str(ROOT / "jobs" / "chain.py"), "--stages", args.stages]
    for c in confs:
        cmd += ["--conf", str(ROOT / c)]
    sets = [
        f"paths.root={root}",
        f"ingest.input={Path(args.corpus).expanduser().resolve()}",
        f"spark.driver_memory={args.driver_memory}",
        *args.overrides,
    ]
    for s in sets:
        cmd += ["--set", s]
    chain = run_stage("chain", cmd, workdir, args.interval, _env())
    chain.pop("launched_epoch", None)
    report = json.loads((root / "reports" / "evaluation.json").read_text())
    tf = _manifest(root, "tfidf")
    return {
        "benchmark": "classic methods on the full DDTP corpus",
        "command": " ".join(sys.argv),
        "machine": machine_info(),
        "commit": _commit(),
        "profiles": confs,
        "overrides": sets,
        "r": report["r"],
        "corpus": {
            "path": str(args.corpus),
            "documents": tf.get("documents"),
            "nnz": tf.get("nnz"),
            "concepts": tf.get("concepts"),
            "per_language": tf.get("per_language"),
        },
        "splits": report.get("splits"),
        "candidates": report.get("candidates"),
        "lambda_selection": report.get("lambda_selection"),
        "chain": chain,
        "table": evaluation_table(report),
    }


# --------------------------------------------------------------------------- costs


def _method_sets(method: str, args: argparse.Namespace, root: Path) -> list[str]:
    sets = [
        f"train.method={method}",
        "train.backend=local",
        f"paths.model={root / 'models' / method}",
        "train.checkpoint_dir=",
    ]
    if method in ("jplsa", "cplsa"):
        sets += [f"train.{method}.maxiter={args.em_iterations}", f"train.{method}.tol=0"]
    if method == "s2net":
        sets += [f"train.s2net.learning_rates=[{args.rate}]", f"train.s2net.epochs=[{args.epochs}]"]
    return sets


def run_costs(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(args.workdir or f"/tmp/cr5_classic_{args.docs}").resolve()
    root = workdir / "out"
    env = _env()
    base = [
        "--conf",
        str(ROOT / "conf" / "local.yaml"),
        "--conf",
        str(ROOT / "bench" / "wikishape.yaml"),
    ]
    common = [
        f"paths.root={root}",
        f"train.r={args.r}",
        f"spark.driver_memory={args.driver_memory}",
        *args.overrides,
    ]
    generated = None
    if not (root / "tfidf" / "_manifest.json").exists():
        gen = [PYTHON, str(ROOT / "bench" / "wikishape.py"), *base]
        for s in common:
            gen += ["--set", s]
        gen += ["--docs", str(args.docs), "--report", str(workdir / "generate.json")]
        workdir.mkdir(parents=True, exist_ok=True)
        generated = run_stage("generate", gen, workdir, args.interval, env)
        generated.pop("launched_epoch", None)
    records: dict[str, Any] = {}
    for method in args.methods.split(","):
        cmd = [PYTHON, str(ROOT / "jobs" / "train.py"), *base]
        for s in [*common, *_method_sets(method, args, root)]:
            cmd += ["--set", s]
        rec = run_stage(f"train_{method}", cmd, workdir, args.interval, env)
        rec.pop("launched_epoch", None)
        meta = json.loads((root / "models" / method / "model.json").read_text())
        training = meta.get("training", {})
        hist = meta.get("solver", {}).get("history", {})
        rec["fit_s"] = training.get("fit_seconds")
        rec["load_s"] = training.get("load_seconds")
        if method in ("jplsa", "cplsa"):
            its = hist.get("iterations", [])
            rec["em_iterations"] = len(its)
            rec["s_per_em_iteration"] = round(sum(r["seconds"] for r in its) / max(len(its), 1), 3)
        if method == "s2net":
            rec["epochs"] = args.epochs
            rec["s2net_seconds"] = hist.get("timings", {}).get("total")
            rec["opca_start_seconds"] = hist.get("init", {}).get("timings", {}).get("total")
        records[method] = rec
    base_rec = records.get("cr5")
    for rec in records.values():
        if base_rec:
            rec["fit_over_cr5"] = round(rec["fit_s"] / base_rec["fit_s"], 2)
            rec["driver_peak_over_cr5"] = round(
                rec["peak_mb"]["driver_python_hwm"] / base_rec["peak_mb"]["driver_python_hwm"], 2
            )
    tf = _manifest(root, "tfidf")
    return {
        "benchmark": f"training cost of each method at {args.docs} documents",
        "workdir": str(workdir),
        "command": " ".join(sys.argv),
        "machine": machine_info(),
        "commit": _commit(),
        "r": args.r,
        "em_iterations": args.em_iterations,
        "s2net_epochs": args.epochs,
        "corpus": {
            "generator": "bench/wikishape.py",
            "documents": tf.get("documents"),
            "nnz": tf.get("nnz"),
            "concepts": tf.get("concepts"),
            "per_language": tf.get("per_language"),
        },
        "generate": generated,
        "methods": records,
    }


def costs_text(result: dict[str, Any]) -> str:
    c = result["corpus"]
    lines = [
        f"{c['documents']} training documents (bench/wikishape.py), nnz {c['nnz']}, "
        f"{c['concepts']} concepts, r = {result['r']}, train.backend=local; "
        f"{result['machine'].get('cores')} cores, commit {result['commit']}; "
        f"JPLSA/CPLSA {result['em_iterations']} EM iterations, S2Net {result['s2net_epochs']} "
        "epoch(s) at one rate (from OPCA)",
        "",
        "| method | fit (s) | fit / Cr5 | per EM iteration or epoch (s) | process wall (s) "
        "| CPU (s) | driver peak (MB) | driver peak / Cr5 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for m, r in result["methods"].items():
        per = r.get("s_per_em_iteration")
        if m == "s2net" and r.get("s2net_seconds") is not None:
            per = round(r["s2net_seconds"] / max(result["s2net_epochs"], 1), 2)
        lines.append(
            f"| {m} | {r['fit_s']} | {r.get('fit_over_cr5')} | {per if per is not None else '–'} "
            f"| {r['wall_s']} | {r['cpu_s_total']} | {r['peak_mb']['driver_python_hwm']:.0f} "
            f"| {r.get('driver_peak_over_cr5')} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    d = sub.add_parser("ddtp", help="the evaluation table on the full DDTP corpus")
    d.add_argument("--corpus", default="~/.cache/cr5/ddtp_full.parquet")
    d.add_argument("--workdir", default="/tmp/cr5_classic_ddtp")
    d.add_argument("--stages", default="ingest,split,vocabulary,tfidf,train,evaluate")
    c = sub.add_parser("costs", help="training time and memory per method")
    c.add_argument("--docs", type=int, default=100_000)
    c.add_argument("--workdir")
    c.add_argument("--r", type=int, default=100)
    c.add_argument("--methods", default=",".join(m for m in METHODS if m != "untranslated"))
    c.add_argument("--em-iterations", type=int, default=10)
    c.add_argument("--epochs", type=int, default=1)
    c.add_argument("--rate", type=float, default=100.0)
    for q in (d, c):
        q.add_argument("--driver-memory", default="8g")
        q.add_argument("--interval", type=float, default=0.5)
        q.add_argument("--set", action="append", default=[], dest="overrides", metavar="K=V")
        q.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    if args.what == "ddtp":
        result, text = run_ddtp(args), ddtp_text
    else:
        result, text = run_costs(args), costs_text
    result["bench_wall_s"] = round(time.perf_counter() - t0, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    txt = text(result)
    args.out.with_suffix(".txt").write_text(txt)
    print(txt)
    return 0


if __name__ == "__main__":
    sys.exit(main())
