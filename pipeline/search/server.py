"""The HTTP search service: a JSON endpoint and one search page (standard library only).

::

    python -m pipeline search-server --index out/index [--host 127.0.0.1] [--port 8080]

Routes:

- ``GET /``: the search page (a text box, the query language, the target languages, k,
  CSLS on or off, and the ranked results with title, language, score and snippet);
- ``GET /api/info``: the languages, document counts, CSLS pairs and k limits;
- ``GET /api/search?q=...&lang=en&targets=de,fr&k=10&csls=true`` or ``POST /api/search``
  with the JSON body ``{"q": "...", "lang": "en", "targets": ["de"], "k": 10, "csls": false}``
  (``q`` may be a list of texts: one ranked list each): ``{"query": {...}, "results":
  [{doc_id, title, language, score, snippet, concept_id, rank}, ...], "took_ms": ...}``.

Every bad request is answered ``400`` with ``{"error": "<what is wrong and how to fix it>"}``
(the messages of :class:`~pipeline.search.SearchIndex`); an unexpected failure is ``500``
with a one-line error, its trace going to the service's log only, never to the client.
:class:`http.server.ThreadingHTTPServer` answers each request on its own thread; the index
is shared (:class:`~pipeline.search.SearchIndex` is thread-safe). The service has no
authentication: bind it to a loopback address (the default) or put it behind a proxy.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.parse
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any

from pipeline.errors import InputDataError, PipelineError
from pipeline.search.index import SearchIndex

__all__ = ["handle_search", "make_server", "serve"]

log = logging.getLogger(__name__)

#: Largest request body read (a query is a few kilobytes at most).
MAX_BODY_BYTES = 1 << 20

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def _flag(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise InputDataError(f"{name} must be true or false; got {value!r}")


def _int(value: Any, name: str, limit: int) -> int | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise InputDataError(f"{name} must be an integer from 1 to {limit}; got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    try:
        return int(str(value).strip())
    except ValueError:
        raise InputDataError(
            f"{name} must be an integer from 1 to {limit}; got {value!r}"
        ) from None


def handle_search(index: SearchIndex, params: dict[str, Any]) -> dict[str, Any]:
    """Answer one search request (GET's query string or POST's JSON, as a dict).

    Raises PipelineError (a 400) for every bad input.
    """
    unknown = sorted(set(params) - {"q", "text", "lang", "targets", "k", "csls"})
    if unknown:
        raise InputDataError(
            f"unknown parameter(s) {unknown}; a search takes q, lang, targets, k, csls"
        )
    texts = params.get("q", params.get("text"))
    if texts is None:
        raise InputDataError("the query text is missing: pass q (the text to search for)")
    if not isinstance(texts, (str, list)):
        raise InputDataError(f"q must be a text or a list of texts; got {type(texts).__name__}")
    lang = params.get("lang")
    if lang is None:
        raise InputDataError(
            "the query language is missing: pass lang, one of " + ", ".join(index.query_languages)
        )
    targets = params.get("targets")
    k = _int(params.get("k"), "k", index.max_k)
    csls = _flag(params.get("csls", False), "csls")
    t0 = time.perf_counter()
    hits = index.query(texts, lang, targets, k, csls=csls)
    took = (time.perf_counter() - t0) * 1e3
    if isinstance(texts, str):
        results: Any = [h.to_dict() for h in hits]
    else:
        results = [[h.to_dict() for h in per_text] for per_text in hits]
    return {
        "query": {"q": texts, "lang": lang, "targets": targets, "k": k, "csls": csls},
        "results": results,
        "took_ms": round(took, 3),
    }


class _Handler(BaseHTTPRequestHandler):
    server_version = "cr5-search"
    index: SearchIndex  # set on the subclass made by make_server
    page: bytes

    def log_message(self, format: str, *args: Any) -> None:
        log.info("%s %s", self.address_string(), format % args)

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, payload: dict[str, Any]) -> None:
        body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        self._send(status, body, "application/json; charset=utf-8")

    def _answer(self, fn: Any) -> None:
        try:
            self._json(HTTPStatus.OK, fn())
        except PipelineError as exc:
            self._json(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
        except Exception:
            log.exception("search service: request %s failed", self.path)
            self._json(
                HTTPStatus.INTERNAL_SERVER_ERROR,
                {"error": "internal error of the search service (its log has the details)"},
            )

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        if url.path in ("/", "/index.html"):
            self._send(HTTPStatus.OK, self.page, "text/html; charset=utf-8")
        elif url.path == "/api/info":
            self._answer(self.index.describe)
        elif url.path == "/api/search":
            query = urllib.parse.parse_qs(url.query, keep_blank_values=True)
            repeated = sorted(name for name, values in query.items() if len(values) > 1)
            if repeated:
                self._json(
                    HTTPStatus.BAD_REQUEST,
                    {"error": f"parameter(s) {repeated} given more than once"},
                )
                return
            params = {name: values[0] for name, values in query.items()}
            self._answer(lambda: handle_search(self.index, params))
        else:
            self._json(HTTPStatus.NOT_FOUND, {"error": f"no such page: {url.path}"})

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_POST(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        if url.path != "/api/search":
            self._json(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint: {url.path}"})
            return
        self._answer(lambda: handle_search(self.index, self._body()))

    def _body(self) -> dict[str, Any]:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise InputDataError("Content-Length must be a number") from None
        if length > MAX_BODY_BYTES:
            raise InputDataError(f"the request body is over {MAX_BODY_BYTES} bytes")
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw.decode("utf-8") or "null")
        except (UnicodeDecodeError, ValueError) as exc:
            raise InputDataError(
                f"the request body must be a JSON object such as "
                f'{{"q": "text", "lang": "en"}} ({exc})'
            ) from None
        if not isinstance(body, dict):
            raise InputDataError(
                'the request body must be a JSON object such as {"q": "text", "lang": "en"}'
            )
        return body


def make_server(index: SearchIndex, host: str, port: int) -> ThreadingHTTPServer:
    """An HTTP server for ``index`` bound to ``host:port`` (port 0: any free port); call
    ``serve_forever()`` on it (and ``shutdown()`` from another thread to stop it)."""
    page = resources.files("pipeline.search").joinpath("page.html").read_bytes()
    handler = type("SearchHandler", (_Handler,), {"index": index, "page": page})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server


def serve(index: SearchIndex, host: str, port: int) -> None:
    """Serve ``index`` until interrupted (Ctrl-C)."""
    server = make_server(index, host, port)
    bound_host, bound_port = server.server_address[:2]
    print(f"search service on http://{bound_host}:{bound_port}/ (Ctrl-C stops it)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
