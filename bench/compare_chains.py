"""Two runs of ``bench_chain.py`` on one corpus, side by side: did they compute the same thing,
and what did each cost per stage?

Made for local mode against a standalone cluster (``--standalone N``): the chain's datasets
are compared row for row (TF-IDF, vocabulary, splits, concepts: exactly; the model's arrays,
the embeddings and the evaluation table: the largest difference), and the stages' wall time,
CPU, per-process memory peaks, bytes shuffled and broadcast are tabulated with the second
run's ratio to the first. One language partition at a time, so a 1M-document chain compares
in a few GB.

    python bench/compare_chains.py A.json B.json [--out compare.json]

Each JSON is a ``bench_chain.py --out`` result; its ``workdir`` and ``overrides``
(``paths.root=``) locate the run's datasets.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import scipy.linalg

# dataset -> sort keys; compared exactly
EXACT = {
    "vocabulary": ["lang", "term_index"],
    "splits": ["pair", "role", "concept_id"],
    "concepts": ["concept_index"],
    "tfidf": ["lang", "row"],
}


def _root(result: dict[str, Any]) -> Path:
    for item in result["overrides"]:
        if item.startswith("paths.root="):
            return Path(item.split("=", 1)[1])
    return Path(result["workdir"]) / "out"


def _strings(t: pa.Table) -> pa.Table:
    """Dictionary columns (hive partition keys) as plain strings, columns by name."""
    t = t.select(sorted(t.column_names))
    for i, field in enumerate(t.schema):
        if pa.types.is_dictionary(field.type):
            t = t.set_column(i, field.name, t.column(i).cast(pa.string()))
    return t


def _parts(path: Path) -> list[tuple[str | None, Path]]:
    """The ``lang=xx`` partitions of a dataset, or the dataset itself when unpartitioned."""
    langs = sorted(p for p in path.glob("lang=*") if p.is_dir())
    if langs:
        return [(p.name.split("=", 1)[1], p) for p in langs]
    return [(None, path)]


def _read(path: Path, lang: str | None, keys: list[str]) -> pa.Table:
    t = _strings(pq.read_table(path))
    if lang is not None and "lang" not in t.column_names:
        t = t.append_column("lang", pa.array([lang] * t.num_rows, pa.string()))
        t = t.select(sorted(t.column_names))
    return t.sort_by([(k, "ascending") for k in keys if k in t.column_names])


def compare_exact(a: Path, b: Path, keys: list[str]) -> dict[str, Any]:
    """Row-for-row equality, one partition at a time."""
    rows, differing = 0, []
    pa_, pb_ = dict(_parts(a)), dict(_parts(b))
    names_a, names_b = sorted(pa_, key=str), sorted(pb_, key=str)
    if names_a != names_b:
        return {"equal": False, "why": f"partitions {names_a} vs {names_b}"}
    for lang in pa_:
        ta, tb = _read(pa_[lang], lang, keys), _read(pb_[lang], lang, keys)
        rows += ta.num_rows
        if not ta.equals(tb):
            differing.append(lang or "all")
    return {"equal": not differing, "rows": rows, "differing_partitions": differing}


def compare_embeddings(a: Path, b: Path) -> dict[str, Any]:
    """Same documents in the same order per language; the largest vector difference."""
    worst, rows = 0.0, 0
    for lang, part in _parts(a):
        ta = _read(part, lang, ["doc_id"])
        tb = _read(b / f"lang={lang}", lang, ["doc_id"])
        if ta.column("doc_id") != tb.column("doc_id"):
            return {"same_documents": False, "lang": lang}
        va = np.asarray(pc.list_flatten(ta.column("vector")).to_numpy(), dtype=np.float32)
        vb = np.asarray(pc.list_flatten(tb.column("vector")).to_numpy(), dtype=np.float32)
        if va.shape != vb.shape:
            return {"same_documents": True, "same_shapes": False, "lang": lang}
        worst = max(worst, float(np.max(np.abs(va - vb), initial=0.0)))
        rows += ta.num_rows
    return {"same_documents": True, "rows": rows, "max_abs_diff": worst}


def compare_model(a: Path, b: Path) -> dict[str, Any]:
    """Every ``.npy`` array of the two model directories: the largest absolute difference,
    and relative to the array's largest magnitude."""
    names = sorted(p.relative_to(a).as_posix() for p in a.rglob("*.npy"))
    other = sorted(p.relative_to(b).as_posix() for p in b.rglob("*.npy"))
    if names != other:
        return {"same_arrays": False, "a": names, "b": other}
    out: dict[str, Any] = {"same_arrays": True, "arrays": {}}
    for name in names:
        x, y = np.load(a / name), np.load(b / name)
        if x.shape != y.shape:
            out["arrays"][name] = {"shapes": [list(x.shape), list(y.shape)]}
            continue
        if x.dtype.kind not in "fc":
            out["arrays"][name] = {"equal": bool(np.array_equal(x, y))}
            continue
        diff = float(np.max(np.abs(x.astype(np.float64) - y), initial=0.0))
        scale = float(np.max(np.abs(x), initial=0.0)) or 1.0
        out["arrays"][name] = {"max_abs_diff": diff, "relative": diff / scale}
    rel = [v.get("relative", 0.0) for v in out["arrays"].values()]
    out["max_relative"] = max(rel, default=0.0)
    # The iterative solvers stop at a tolerance, so two runs whose sums differ in order agree
    # to rounding in what they converge to (eigenvalues, the maps' column spaces) more
    # closely than element by element.
    ea = np.asarray(json.loads((a / "model.json").read_text()).get("eigenvalues") or [])
    eb = np.asarray(json.loads((b / "model.json").read_text()).get("eigenvalues") or [])
    if ea.size and ea.shape == eb.shape:
        out["eigenvalues_max_relative"] = float(np.max(np.abs(ea - eb) / np.abs(ea)))
    angles = {}
    for name in names:
        if name.endswith("/phi.npy"):
            x, y = np.load(a / name).astype(np.float64), np.load(b / name).astype(np.float64)
            if x.ndim == 2 and x.shape == y.shape:
                angles[name] = float(np.degrees(scipy.linalg.subspace_angles(x, y).max()))
    out["phi_largest_principal_angle_deg"] = angles
    return out


def compare_evaluation(a: Path, b: Path) -> dict[str, Any]:
    keys = ["method", "split", "lam", "query_lang", "target_lang", "measure", "metric", "k"]
    ta = _strings(pq.read_table(a)).sort_by([(k, "ascending") for k in keys])
    tb = _strings(pq.read_table(b)).sort_by([(k, "ascending") for k in keys])
    if ta.select(keys) != tb.select(keys):
        return {"same_rows": False}
    va = ta.column("value").to_numpy()
    vb = tb.column("value").to_numpy()
    return {"same_rows": True, "rows": ta.num_rows, "max_abs_diff": float(np.max(np.abs(va - vb)))}


def compare_outputs(ra: dict[str, Any], rb: dict[str, Any]) -> dict[str, Any]:
    a, b = _root(ra), _root(rb)
    out: dict[str, Any] = {"roots": [str(a), str(b)]}
    for name, keys in EXACT.items():
        out[name] = compare_exact(a / name, b / name, keys)
        print(f"{name}: {out[name]}", flush=True)
    out["model"] = compare_model(a / "model", b / "model")
    m = out["model"]
    print(
        f"model: max relative element difference {m.get('max_relative')}, eigenvalues "
        f"{m.get('eigenvalues_max_relative')}, largest principal angle per Φ_l [deg] "
        f"{m.get('phi_largest_principal_angle_deg')}",
        flush=True,
    )
    out["embeddings"] = compare_embeddings(a / "embeddings", b / "embeddings")
    print(f"embeddings: {out['embeddings']}", flush=True)
    out["evaluation"] = compare_evaluation(a / "evaluation", b / "evaluation")
    print(f"evaluation: {out['evaluation']}", flush=True)
    return out


def _ratio(x: float, y: float) -> str:
    return f"{y / x:.2f}" if x else "-"


def stage_table(ra: dict[str, Any], rb: dict[str, Any]) -> str:
    """Per stage: wall, CPU, peaks per kind of process, bytes shuffled and broadcast of both
    runs, and B's wall over A's."""
    la, lb = ra["label"], rb["label"]
    lines = [
        f"| stage | wall [s] {la} / {lb} | ratio | CPU [s] {la} / {lb} | peak MB {la}: driver Py / "
        f"JVM / Py worker | peak MB {lb}: driver Py / driver JVM / executor JVM (max, sum) / Py "
        f"worker (max, sum) | shuffle write [GB] {la} / {lb} | broadcast [MB] {la} / {lb} |",
        "|" + "---|" * 8,
    ]
    total_a = total_b = 0.0
    for name, sa in ra["stages"].items():
        sb = rb["stages"].get(name)
        if sb is None or name == "generate":
            continue
        pa_, pb = sa["peak_mb"], sb["peak_mb"]
        total_a += sa["wall_s"]
        total_b += sb["wall_s"]
        lines.append(
            f"| {name} | {sa['wall_s']:.1f} / {sb['wall_s']:.1f} | "
            f"{_ratio(sa['wall_s'], sb['wall_s'])} | {sa['cpu_s_total']:.0f} / "
            f"{sb['cpu_s_total']:.0f} | {pa_['driver_python_hwm']:.0f} / {pa_['jvm_hwm']:.0f} / "
            f"{pa_['python_worker_hwm_max']:.0f} | {pb['driver_python_hwm']:.0f} / "
            f"{pb['jvm_hwm']:.0f} / {pb.get('executor_jvm_hwm_max', 0):.0f}, "
            f"{pb.get('executor_jvms_rss_sum', 0):.0f} / {pb['python_worker_hwm_max']:.0f}, "
            f"{pb['python_workers_rss_sum']:.0f} | "
            f"{sa['spark']['shuffle_write_bytes'] / 1e9:.2f} / "
            f"{sb['spark']['shuffle_write_bytes'] / 1e9:.2f} | "
            f"{sa['spark']['broadcast_bytes'] / 1e6:.1f} / "
            f"{sb['spark']['broadcast_bytes'] / 1e6:.1f} |"
        )
    lines.append(
        f"| all but generate | {total_a:.1f} / {total_b:.1f} | {_ratio(total_a, total_b)} "
        "| | | | | |"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    p.add_argument("a", type=Path, help="bench_chain.py result (the baseline, e.g. local[2])")
    p.add_argument("b", type=Path, help="bench_chain.py result (e.g. the standalone cluster)")
    p.add_argument("--out", type=Path, help="JSON of the comparison")
    p.add_argument("--tables-only", action="store_true", help="skip the dataset comparison")
    args = p.parse_args(argv)
    ra, rb = (json.loads(path.read_text()) for path in (args.a, args.b))
    result: dict[str, Any] = {"a": ra["label"], "b": rb["label"]}
    if not args.tables_only:
        result["outputs"] = compare_outputs(ra, rb)
    for r in (ra, rb):
        px = r["stages"]["train"]["report"]
        print(f"{r['label']}: train fit {px.get('fit_s')} s, cluster {r.get('cluster')}")
    result["table"] = stage_table(ra, rb)
    print(result["table"])
    if args.out:
        tmp = args.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=2, sort_keys=True))
        tmp.replace(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
