"""Paths recorded in manifests, relative to ``paths.root`` so a run root can move.

A manifest that names another dataset of the same run (the vocabulary's held-out
concepts, the tfidf rows a model trained on) stores it as ``<paths.root>/splits``
when it lies inside the root, and as given otherwise. Comparisons resolve such a
value against the *current* root, so a copied or moved root (another directory,
machine or bucket) still checks out; values stored as given (``./out/splits`` or
absolute) compare equal when they name the same place.
"""

from __future__ import annotations

import os
import re

ROOT = "<paths.root>"
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def _normal(path: str) -> str:
    """A comparable form: absolute for local paths, trailing slashes dropped for URIs."""
    if path.startswith("file:"):
        path = re.sub(r"^file:(//)?", "", path)
    if _URI.match(path):
        return path.rstrip("/")
    return os.path.abspath(path)


def to_manifest(path: str | None, root: str) -> str | None:
    """``path`` as stored in a manifest: ``<paths.root>/<relative>`` when inside ``root``."""
    if path is None:
        return None
    p, r = _normal(path), _normal(root)
    if p == r:
        return ROOT
    if p.startswith(r.rstrip("/") + "/"):
        return ROOT + "/" + p[len(r.rstrip("/")) + 1 :]
    return path


def from_manifest(stored: str | None, root: str) -> str | None:
    """A stored path resolved against the current ``root``."""
    if stored is None or not stored.startswith(ROOT):
        return stored
    return root.rstrip("/") + stored[len(ROOT) :]


def same_location(stored: str | None, current: str | None, root: str) -> bool:
    """Whether a manifest's ``stored`` path names ``current`` (given the current root)."""
    if stored is None or current is None:
        return stored is None and current is None
    return _normal(from_manifest(stored, root)) == _normal(current)
