"""``cr5`` (or ``python -m pipeline``): the pipeline's stages, and its tools without Spark.

The stages, as ``jobs/<stage>.py`` runs them (:mod:`pipeline.runner`, the same options)::

    cr5 demo --conf local --conf short-docs --conf sample [--set key.path=value ...]
    cr5 train --conf my-profile.yaml              # any stage but embed by its name
    cr5 run ingest,vocabulary,tfidf --conf local   # stages in order in one Spark session
    cr5 run embed --conf local                     # the embed stage (``cr5 embed`` is the tool)

A ``--conf`` is a YAML file or the name of a profile shipped in the package (``local``,
``sample``, ``short-docs``, ``cluster``; :mod:`pipeline.config.profiles`). The tools::

    python -m pipeline embed --model out/model --lang de [--input FILE] [--output FILE]
                             [--format jsonl|npy] [--normalize] [--batch 10000]
    python -m pipeline import-cr5 --out models/cr5 --lang en=en.txt.gz --lang de=de.txt.gz
                                  [--idf-from out/vocabulary]
    python -m pipeline import-vec --out out/word_vectors --lang en=wiki.en.vec
                                  --lang de=wiki.de.vec [--max-vocab 200000]
    python -m pipeline verify out/            # or a dataset, or a model directory
    python -m pipeline search --index out/index --lang en [--targets de,fr] [-k 10] [--csls]
                              [--json] [--input FILE] [TEXT ...]
    python -m pipeline search-server --index out/index [--host 127.0.0.1] [--port 8080]

``embed`` reads one document per line (stdin by default) and writes one vector per
line: JSON Lines (``{"line": i, "n_terms": k, "vector": [...]}``, streamed in batches)
or a float32 ``.npy`` array of shape (n_lines, r). A line with no known word gives the
zero vector and ``n_terms`` 0.

``import-vec`` converts fastText's and MUSE's ``.vec`` text files into the word-vector store
the ``translate_words`` stage reads (``paths.word_vectors``):
:mod:`pipeline.wordmap.vecfile`.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from itertools import islice
from typing import BinaryIO

import numpy as np

from pipeline import runner
from pipeline.config.profiles import DEFAULT_PROFILE, packaged_profiles
from pipeline.errors import InputDataError, PipelineError
from pipeline.stages import DEMO_CHAIN, STAGES


def _lines(stream: BinaryIO, name: str) -> Iterator[str]:
    """Decode ``stream`` line by line as UTF-8; a bad line is an error naming it."""
    for number, raw in enumerate(stream, 1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            bad = raw[exc.start : exc.start + 4]
            raise InputDataError(
                f"{name}: line {number} is not valid UTF-8 (byte {exc.start} of the line: "
                f"{bad!r}). Fix: convert the input to UTF-8, e.g. iconv -f latin1 -t utf-8."
            ) from None
        yield text.rstrip("\n").rstrip("\r")


def _batches(lines: Iterator[str], size: int) -> Iterator[list[str]]:
    while batch := list(islice(lines, size)):
        yield batch


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"must be at least 1 (lines embedded per batch), got {value}"
        )
    return value


def _open_input(path: str | None) -> tuple[BinaryIO, str]:
    if path in (None, "-"):
        return sys.stdin.buffer, "standard input"
    try:
        return open(path, "rb"), path  # closed by the caller
    except OSError as exc:
        raise InputDataError(
            f"--input {path}: cannot read it ({exc.strerror}). Fix: give an existing text "
            "file with one document per line, or omit --input to read standard input."
        ) from None


def _staged_output(path: str) -> str:
    """A temporary sibling of ``path`` to write first (renamed into place at the end)."""
    directory = os.path.dirname(os.path.abspath(path))
    probe = os.path.join(directory, f".{os.path.basename(path)}.tmp-{os.getpid()}")
    try:
        with open(probe, "wb"):
            pass
    except OSError as exc:
        raise InputDataError(
            f"--output {path}: cannot write there ({exc.strerror}). Fix: choose a writable "
            "directory, or omit --output to write to standard output."
        ) from None
    return probe


def cmd_embed(args: argparse.Namespace) -> int:
    from pipeline.errors import ModelError
    from pipeline.model import Cr5Model
    from pipeline.text.languages import canonical_lang

    model = Cr5Model.load(args.model)
    if canonical_lang(args.lang) not in model.languages:  # before any input is read
        raise ModelError(
            f"--lang: language {args.lang!r} is not in this model; its languages are: "
            f"{', '.join(model.languages)} (model {args.model})"
        )
    fmt = args.format or ("npy" if args.output and args.output.endswith(".npy") else "jsonl")
    to_file = args.output not in (None, "-")
    staged = _staged_output(args.output) if to_file else None
    stream, name = _open_input(args.input)
    out_text = None
    if fmt == "jsonl":
        out_text = open(staged, "w", encoding="utf-8") if staged else sys.stdout  # noqa: SIM115
    chunks: list[np.ndarray] = []
    line = 0
    try:
        for batch in _batches(_lines(stream, name), args.batch):
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
                line += len(batch)
        if fmt == "npy":
            array = np.concatenate(chunks) if chunks else np.zeros((0, model.dim), np.float32)
            if staged:
                with open(staged, "wb") as f:
                    np.save(f, array)
            else:
                buf = io.BytesIO()
                np.save(buf, array)
                sys.stdout.buffer.write(buf.getvalue())
        if out_text is not None and out_text is not sys.stdout:
            out_text.close()
        if staged:
            os.replace(staged, args.output)
            staged = None
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
        if out_text not in (None, sys.stdout):
            out_text.close()
        if staged and os.path.exists(staged):
            os.unlink(staged)  # a failed run leaves no partial output
    if line == 0:
        print(f"warning: {name} has no lines: no vector was written", file=sys.stderr)
    return 0


def _lang_files(items: Sequence[str], example: str) -> dict[str, str]:
    """``--lang XX=PATH`` arguments as {language code (canonical): path}."""
    from pipeline.text.languages import canonical_lang

    files = {}
    for item in items:
        lang, sep, path = item.partition("=")
        if not sep or not lang.strip() or not path:
            raise PipelineError(f"--lang {item!r} must look like xx=/path/to/{example}")
        lang = canonical_lang(lang)
        if lang in files:
            raise PipelineError(f"--lang {lang} is given twice; give each language once")
        files[lang] = path
    return files


def cmd_import(args: argparse.Namespace) -> int:
    from pipeline.model.pretrained import import_pretrained

    files = _lang_files(args.lang, "xx.txt.gz")
    report = import_pretrained(files, args.out, idf_from=args.idf_from)
    print(json.dumps(report, indent=2))
    return 0


def cmd_import_vec(args: argparse.Namespace) -> int:
    """Import fastText/MUSE ``.vec`` files into the word-vector store; print the report."""
    from pipeline.wordmap.vecfile import MUSE_MAX_VOCAB, import_vec

    files = _lang_files(args.lang, "wiki.xx.vec")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    max_vocab = {None: MUSE_MAX_VOCAB, -1: None}.get(args.max_vocab, args.max_vocab)
    report = import_vec(files, args.out, max_vocab=max_vocab)
    print(json.dumps(report, indent=2, ensure_ascii=False))
    return 0


def _max_vocab(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1 and value != -1:
        raise argparse.ArgumentTypeError(
            f"must be at least 1, or -1 for every word (MUSE's convention); got {value}"
        )
    return value


def _verify_targets(paths: Sequence[str]) -> list[str]:
    """The datasets and models to verify: each path itself when it is one, else (a run
    root) the datasets and models directly under it and under its ``*_models/``."""
    out = []
    for path in paths:
        if any(os.path.isfile(os.path.join(path, f)) for f in ("_manifest.json", "model.json")):
            out.append(path)
            continue
        if not os.path.isdir(path):
            raise InputDataError(
                f"{path}: no such directory. Fix: give a dataset, a model "
                "directory or a run root (paths.root)."
            )
        found = []
        for name in sorted(os.listdir(path)):
            child = os.path.join(path, name)
            if name.startswith(".") or not os.path.isdir(child):
                continue
            if name.endswith("_models"):
                found += [
                    os.path.join(child, m)
                    for m in sorted(os.listdir(child))
                    if os.path.isfile(os.path.join(child, m, "model.json"))
                ]
            elif any(
                os.path.isfile(os.path.join(child, f)) for f in ("_manifest.json", "model.json")
            ):
                found.append(child)
        if not found:
            raise InputDataError(
                f"{path}: holds no dataset (_manifest.json) and no model "
                "(model.json). Fix: give a dataset, a model or a run root."
            )
        out += found
    return out


def cmd_verify(args: argparse.Namespace) -> int:
    """Check every file of datasets and models against their manifests, checksums included."""
    from pipeline.errors import DamagedDatasetError
    from pipeline.io.integrity import verify_local
    from pipeline.model.format import read_model_json, verify_files

    damaged = 0
    for target in _verify_targets(args.paths):
        try:
            if os.path.isfile(os.path.join(target, "model.json")):
                meta = read_model_json(target)
                verify_files(target, meta, list(meta["languages"]), checksums=True, reading=False)
                files = meta["files"]
                print(
                    f"ok: model at {os.path.abspath(target)}: {len(files)} files, "
                    f"{sum(f['bytes'] for f in files.values())} bytes, SHA-256 checksums match"
                )
            else:
                print(verify_local(target))
        except DamagedDatasetError as exc:
            print(f"error: {exc}", file=sys.stderr)
            damaged += 1
    return 2 if damaged else 0


def _open_index(args: argparse.Namespace, *, preload: bool) -> object:
    from pipeline.search import SearchIndex

    return SearchIndex.open(
        args.index,
        model=args.model,
        ef_search=args.ef_search,
        nprobe=args.nprobe,
        csls_rerank=args.csls_rerank,
        max_k=args.max_k,
        preload=preload,
    )


def _query_texts(args: argparse.Namespace) -> list[str]:
    if args.text and args.input:
        raise InputDataError("give the query as TEXT or with --input, not both")
    if args.text:
        return [" ".join(args.text)]
    stream, name = _open_input(args.input)
    try:
        texts = [line for line in _lines(stream, name) if line.strip()]
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
    if not texts:
        raise InputDataError(
            f"{name} has no query text. Fix: pass the text as arguments "
            "(python -m pipeline search --index out/index --lang en 'some words') or one "
            "query per line with --input."
        )
    return texts


def cmd_search(args: argparse.Namespace) -> int:
    index = _open_index(args, preload=False)
    texts = _query_texts(args)
    results = index.query(texts, args.lang, args.targets, args.k, csls=args.csls)
    for text, hits in zip(texts, results):
        if args.json:
            print(
                json.dumps({"q": text, "results": [h.to_dict() for h in hits]}, ensure_ascii=False)
            )
            continue
        measure = "CSLS" if args.csls else "cosine"
        print(f"# {text[:70]!r} ({args.lang}, {len(hits)} result(s), {measure})")
        for h in hits:
            title = (h.title or h.doc_id).replace("\n", " ")
            print(f"{h.rank:>3}  {h.language}  {h.score:+.4f}  {title[:60]}  [{h.doc_id}]")
            if h.snippet:
                print(f"         {' '.join(h.snippet.split())[:90]}")
    return 0


def cmd_search_server(args: argparse.Namespace) -> int:
    from pipeline.search.server import serve

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    index = _open_index(args, preload=True)
    try:
        serve(index, args.host, args.port)
    except OSError as exc:
        raise InputDataError(
            f"cannot listen on {args.host}:{args.port} ({exc.strerror or exc}). Fix: pick "
            "another --port (0: any free port) or stop what uses it."
        ) from None
    return 0


def _index_arguments(p: argparse.ArgumentParser) -> None:
    from pipeline.config import SEARCH_DEFAULTS

    p.add_argument("--index", required=True, help="index directory (paths.index)")
    p.add_argument("--model", help="model directory (default: the one the index was built with)")
    p.add_argument("--ef-search", type=_positive_int, help="HNSW candidate list (default: built)")
    p.add_argument("--nprobe", type=_positive_int, help="IVF lists scanned (default: built)")
    p.add_argument(
        "--csls-rerank",
        type=_positive_int,
        help="cosine candidates re-ranked by CSLS (default: the index's)",
    )
    p.add_argument(
        "--max-k",
        type=_positive_int,
        default=SEARCH_DEFAULTS.max_k,
        help=f"largest k accepted (default {SEARCH_DEFAULTS.max_k})",
    )


def _add_search_commands(sub: argparse._SubParsersAction) -> None:
    from pipeline.config import SEARCH_DEFAULTS

    s = sub.add_parser("search", help="tool: query a search index (the index stage's output)")
    _index_arguments(s)
    s.add_argument("--lang", required=True, help="language of the query text")
    s.add_argument(
        "--targets", help="comma-separated languages to search (default: all but --lang)"
    )
    s.add_argument(
        "-k",
        type=int,
        default=None,
        help=f"results per target language (default {SEARCH_DEFAULTS.default_k})",
    )
    s.add_argument("--csls", action="store_true", help="re-rank by CSLS instead of cosine")
    s.add_argument("--json", action="store_true", help="one JSON object per query")
    s.add_argument("--input", help="file with one query per line ('-': standard input)")
    s.add_argument("text", nargs="*", help="the query text")
    s.set_defaults(fn=cmd_search)
    v = sub.add_parser("search-server", help="tool: serve a search index over HTTP (page + JSON)")
    _index_arguments(v)
    v.add_argument("--host", default=SEARCH_DEFAULTS.host, help="address to listen on")
    v.add_argument("--port", type=int, default=SEARCH_DEFAULTS.port, help="port (0: any free port)")
    v.set_defaults(fn=cmd_search_server)


def cmd_config_reference(args: argparse.Namespace) -> int:
    from pipeline.config import reference_markdown

    print(reference_markdown(args.section or None))
    return 0


#: One line per stage for ``cr5 --help`` (a test keeps it in step with STAGES).
STAGE_HELP: dict[str, str] = {
    "ingest": "read an aligned corpus (ingest.input) into the documents dataset",
    "ingest_wikipedia": "read Wikipedia dumps and sitelinks into the documents dataset",
    "split": "draw the test and validation concepts per language pair",
    "vocabulary": "document frequencies, vocabulary and IDF per language",
    "tfidf": "the training rows (TF-IDF) and their concepts",
    "train": "fit train.method on the TF-IDF rows and write a model",
    "embed": "embed a document collection with a model (Spark)",
    "index": "build the search index of the embeddings",
    "evaluate": "crosslingual retrieval on the held-out concepts, and the report",
    "word_vectors": "monolingual word2vec vectors per language",
    "translate_words": "word translation on a bilingual lexicon",
}

#: Stages without a command of their own, their name being a tool's: run with ``run STAGE``.
_STAGES_BY_RUN_ONLY = frozenset({"embed"})


def _add_stage_commands(sub: argparse._SubParsersAction, prog: str) -> None:
    """The stage commands: ``demo``, ``run STAGES`` and one per stage, each with the job
    scripts' options (:func:`pipeline.runner.add_run_arguments`)."""
    d = sub.add_parser(
        "demo",
        help="stages: the demo chain (" + ", ".join(DEMO_CHAIN) + ") in one Spark session",
        description="Run the demo chain in one Spark session: " + ", ".join(DEMO_CHAIN),
    )
    runner.add_run_arguments(d)
    d.set_defaults(fn=lambda args: runner.run_command(args, DEMO_CHAIN, prog=prog))
    r = sub.add_parser(
        "run",
        help="stages: the given ones in order in one Spark session (any stage, embed too)",
        description="Run stages in order in one Spark session, as jobs/chain.py --stages does.",
    )
    r.add_argument(
        "stages",
        metavar="STAGES",
        help="comma-separated stage names, or 'demo'; stages: " + ", ".join(STAGES),
    )
    runner.add_run_arguments(r)
    r.set_defaults(fn=lambda args: runner.run_command(args, None, prog=prog))
    for stage in STAGES:
        if stage in _STAGES_BY_RUN_ONLY:
            continue
        hyphenated = stage.replace("_", "-")
        c = sub.add_parser(
            stage,
            aliases=[hyphenated] if hyphenated != stage else [],
            help=f"stage: {STAGE_HELP[stage]}",
            description=f"Run the {stage} stage (as jobs/{stage}.py does): {STAGE_HELP[stage]}.",
        )
        runner.add_run_arguments(c)
        c.set_defaults(fn=lambda args, stage=stage: runner.run_command(args, (stage,), prog=prog))


def cr5() -> int:
    """The ``cr5`` console script (pyproject's [project.scripts]): :func:`main` by that name."""
    return main(prog="cr5")


def main(argv: Sequence[str] | None = None, prog: str = "python -m pipeline") -> int:
    """Parse ``argv`` (default: the command line) as ``prog`` and run the command; return
    the exit status (0, 2 for a user error or a failure of the environment, 1 for a bug)."""
    p = argparse.ArgumentParser(
        prog=prog,
        description="Cr5-on-Spark: crosslingual document embeddings. The stages run with Spark "
        "and take the job scripts' options (--conf, --set; "
        f"{prog} STAGE --help); the tools need no Spark.",
        epilog="A --conf is a YAML file or the name of a profile shipped in the package "
        f"(conf/*.yaml): {', '.join(packaged_profiles()) or 'none in this installation'}; "
        f"default: {DEFAULT_PROFILE}. "
        f"Example: {prog} demo --conf local --conf short-docs --conf sample",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_stage_commands(sub, prog)
    e = sub.add_parser(
        "embed",
        help="tool: embed lines of text with a trained model (the embed stage: run embed)",
    )
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
    e.add_argument(
        "--batch", type=_positive_int, default=10_000, help="lines per batch (memory bound), >= 1"
    )
    e.set_defaults(fn=cmd_embed)
    i = sub.add_parser("import-cr5", help="tool: import the original Cr5 word-vector release")
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
    iv = sub.add_parser(
        "import-vec",
        help="tool: import fastText/MUSE .vec word vectors for translate_words "
        "(paths.word_vectors)",
        description="Convert fastText's or MUSE's .vec text files (line 1 '<words> <dim>', "
        "then '<word> <v1> ... <v_dim>' per word, most frequent first; .gz read as is) into "
        "the word-vector store the translate_words stage and the Procrustes/RCSLS baselines "
        "read: OUT/<lang>/ per language, committed whole. A word seen twice keeps its first "
        "vector (the others are counted and logged); a malformed line stops with the file, "
        "the line number and the fix.",
    )
    iv.add_argument(
        "--out",
        required=True,
        help="word-vector root to write, a path or a URI (the stage's paths.word_vectors, "
        "default <paths.root>/word_vectors)",
    )
    iv.add_argument(
        "--lang",
        action="append",
        required=True,
        metavar="XX=PATH",
        help="a language code and its .vec (or .vec.gz) file; repeat per language",
    )
    iv.add_argument(
        "--max-vocab",
        type=_max_vocab,
        metavar="N",
        help="keep the first N distinct words of each file, -1: all (MUSE's --max_vocab; "
        "default: MUSE's, 200000)",
    )
    iv.set_defaults(fn=cmd_import_vec)
    v = sub.add_parser(
        "verify",
        help="tool: check datasets and models against their manifests: every file's size and "
        "checksum (exit 2 when one is damaged)",
    )
    v.add_argument("paths", nargs="+", metavar="PATH", help="a dataset, a model or a run root")
    v.set_defaults(fn=cmd_verify)
    c = sub.add_parser(
        "config-reference",
        help="tool: print every configuration key as Markdown (docs/configuration.md)",
    )
    c.add_argument("--section", action="append", help="only this section; repeatable")
    c.set_defaults(fn=cmd_config_reference)
    _add_search_commands(sub)
    args = p.parse_args(argv)
    try:
        return args.fn(args)
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (Exception, KeyboardInterrupt) as exc:
        # One paragraph on the console, the trace in a log file (pipeline/failures.py).
        from pipeline import failures

        trace = failures.fallback_log(failures.full_trace(exc))
        where = f"{prog} {args.command}"
        failure = failures.describe(failures.annotate(exc, stage=where), log_file=trace)
        failures.print_paragraph(failure)
        return failure.exit_code
