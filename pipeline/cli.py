"""``python -m pipeline``: embedding and model import without Spark.

    python -m pipeline embed --model out/model --lang de [--input FILE] [--output FILE]
                             [--format jsonl|npy] [--normalize] [--batch 10000]
    python -m pipeline import-cr5 --out models/cr5 --lang en=en.txt.gz --lang de=de.txt.gz
                                  [--idf-from out/vocabulary]

``embed`` reads one document per line (stdin by default) and writes one vector per
line: JSON Lines (``{"line": i, "n_terms": k, "vector": [...]}``, streamed in batches)
or a float32 ``.npy`` array of shape (n_lines, r). A line with no known word gives the
zero vector and ``n_terms`` 0.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections.abc import Iterator, Sequence
from itertools import islice
from typing import TextIO

import numpy as np

from pipeline.errors import PipelineError


def _batches(stream: TextIO, size: int) -> Iterator[list[str]]:
    lines = (line.rstrip("\n") for line in stream)
    while batch := list(islice(lines, size)):
        yield batch


def cmd_embed(args: argparse.Namespace) -> int:
    from pipeline.model import Cr5Model

    model = Cr5Model.load(args.model)
    fmt = args.format or ("npy" if args.output and args.output.endswith(".npy") else "jsonl")
    stream = sys.stdin if args.input in (None, "-") else open(args.input, encoding="utf-8")  # noqa: SIM115
    out_text = None
    if fmt == "jsonl":
        out_text = sys.stdout if args.output in (None, "-") else open(args.output, "w")  # noqa: SIM115
    chunks: list[np.ndarray] = []
    line = 0
    try:
        for batch in _batches(stream, args.batch):
            vectors, counts = model.embed_with_counts(batch, args.lang)
            if args.normalize:
                norms = np.linalg.norm(vectors, axis=1, keepdims=True)
                np.divide(vectors, norms, out=vectors, where=norms > 0)
            if out_text is not None:
                for v, c in zip(vectors, counts):
                    out_text.write(
                        json.dumps(
                            {
                                "line": line,
                                "n_terms": int(c),
                                "vector": [round(float(x), 7) for x in v],
                            }
                        )
                        + "\n"
                    )
                    line += 1
            else:
                chunks.append(vectors)
    finally:
        if stream is not sys.stdin:
            stream.close()
        if out_text not in (None, sys.stdout):
            out_text.close()
    if fmt == "npy":
        array = np.concatenate(chunks) if chunks else np.zeros((0, model.dim), np.float32)
        if args.output in (None, "-"):
            buf = io.BytesIO()
            np.save(buf, array)
            sys.stdout.buffer.write(buf.getvalue())
        else:
            np.save(args.output, array)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from pipeline.model.pretrained import import_pretrained

    files = {}
    for item in args.lang:
        lang, sep, path = item.partition("=")
        if not sep or not lang or not path:
            raise PipelineError(f"--lang {item!r} must look like xx=/path/to/xx.txt.gz")
        files[lang.strip().lower()] = path
    report = import_pretrained(files, args.out, idf_from=args.idf_from)
    print(json.dumps(report, indent=2))
    return 0


def cmd_config_reference(args: argparse.Namespace) -> int:
    from pipeline.config import reference_markdown

    print(reference_markdown(args.section or None))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pipeline", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    e = sub.add_parser("embed", help="embed lines of text with a trained model")
    e.add_argument("--model", required=True, help="model directory")
    e.add_argument("--lang", required=True, help="language code of the texts")
    e.add_argument("--input", help="text file, one document per line (default: stdin)")
    e.add_argument("--output", help="output file (default: stdout)")
    e.add_argument(
        "--format",
        choices=["jsonl", "npy"],
        help="default: npy if --output ends with .npy, else jsonl",
    )
    e.add_argument("--normalize", action="store_true", help="L2-normalise the vectors")
    e.add_argument("--batch", type=int, default=10_000, help="lines per batch (memory bound)")
    e.set_defaults(fn=cmd_embed)
    i = sub.add_parser("import-cr5", help="import the original Cr5 word-vector release")
    i.add_argument("--out", required=True, help="model directory to write")
    i.add_argument(
        "--lang",
        action="append",
        required=True,
        metavar="XX=PATH",
        help="a language and its .txt.gz file; repeat per language",
    )
    i.add_argument("--idf-from", help="Parquet with lang, term, idf (e.g. out/vocabulary)")
    i.set_defaults(fn=cmd_import)
    c = sub.add_parser(
        "config-reference", help="print every configuration key as Markdown (docs/configuration.md)"
    )
    c.add_argument("--section", action="append", help="only this section; repeatable")
    c.set_defaults(fn=cmd_config_reference)
    args = p.parse_args(argv)
    try:
        return args.fn(args)
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
