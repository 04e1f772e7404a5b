"""Configuration profiles by name: the ``conf/*.yaml`` files that ship inside the package.

A profile is a YAML file (:func:`pipeline.config.load_config` layers them). The project's own
profiles live once in git, in the checkout's ``conf/``; ``pipeline/profiles`` is a symbolic
link to that directory and the wheel's package data (``profiles/*.yaml``, pyproject.toml), so
an installed package carries copies of them and finds them without a checkout. Hence:

- ``--conf local`` or ``--conf local.yaml`` (a bare name) is the packaged profile ``local``
  unless a file of that name exists in the working directory;
- ``--conf conf/local.yaml``, the form the docs use, is that file when it exists (in the
  checkout) and the packaged ``local`` otherwise (anywhere else, with the package installed);
- any other path is read as it is;
- the runner's default profile is the packaged ``local`` (:func:`default_profiles`).

Resources are reached through :mod:`importlib.resources`, so they are found in a zip of the
package too; a package without them (``deploy/submit.sh``'s zip of the Python sources)
simply has no packaged profiles.
"""

from __future__ import annotations

import os
import sys
from importlib import resources
from pathlib import Path, PurePath

if sys.version_info >= (3, 11):
    from importlib.resources.abc import Traversable
else:  # pragma: no cover - Python 3.10
    from importlib.abc import Traversable

__all__ = [
    "DEFAULT_PROFILE",
    "ProfileSource",
    "default_profiles",
    "missing_hint",
    "packaged_profiles",
    "resolve_profile",
]

#: The profile a run without ``--conf`` loads (Spark in local mode, datasets under ./out).
DEFAULT_PROFILE = "local"

#: The directory of the packaged profiles inside the ``pipeline`` package.
_PACKAGE, _DIRECTORY, _SUFFIX = "pipeline", "profiles", ".yaml"

#: What a profile resolves to: a file path, or a packaged resource (a path when the package is
#: installed as files, a zip member when it is imported from a zip).
ProfileSource = Path | Traversable


def packaged_profiles() -> dict[str, ProfileSource]:
    """The profiles shipped with the package, by name (``local`` for ``local.yaml``), sorted;
    empty when the package carries none."""
    directory = resources.files(_PACKAGE).joinpath(_DIRECTORY)
    try:
        entries = list(directory.iterdir()) if directory.is_dir() else []
    except OSError:  # a dangling link (a checkout without conf/)
        entries = []
    found = {
        entry.name[: -len(_SUFFIX)]: entry
        for entry in entries
        if entry.name.endswith(_SUFFIX) and entry.is_file()
    }
    # A file system path is shown resolved: in the checkout, conf/<name>.yaml (the link's target).
    return {
        name: entry.resolve() if isinstance(entry, Path) else entry
        for name, entry in sorted(found.items())
    }


def _profile_name(spec: str | os.PathLike[str]) -> str | None:
    """The packaged profile ``spec`` may name: ``NAME``, ``NAME.yaml`` or a relative
    ``conf/NAME.yaml``; None for any other path."""
    path = PurePath(os.fspath(spec))
    if path.is_absolute():
        return None
    if len(path.parts) == 1:
        return path.stem if path.suffix == _SUFFIX else path.name
    if len(path.parts) == 2 and path.parts[0] == "conf" and path.suffix == _SUFFIX:
        return path.stem
    return None


def resolve_profile(spec: str | os.PathLike[str]) -> ProfileSource:
    """Where the profile ``spec`` (a ``--conf`` argument) is read from.

    An existing file wins; otherwise a name of a packaged profile (see the module's doc) is
    that profile. Anything else comes back as a path, for the reader to report as missing
    (:func:`missing_hint` says what could have been meant).
    """
    path = Path(spec)
    if path.is_file():
        return path
    name = _profile_name(spec)
    if name is not None:
        packaged = packaged_profiles().get(name)
        if packaged is not None:
            return packaged
    return path


def missing_hint() -> str:
    """The sentence that follows "cannot read configuration file X": the packaged names."""
    names = list(packaged_profiles())
    if not names:
        return "Fix: give the path of an existing YAML profile."
    example = DEFAULT_PROFILE if DEFAULT_PROFILE in names else names[0]
    return (
        "Fix: give the path of an existing YAML profile, or the name of a packaged one: "
        f"{', '.join(names)} (e.g. --conf {example})."
    )


def default_profiles() -> list[str]:
    """The profiles of a run given no ``--conf``: the packaged :data:`DEFAULT_PROFILE`, or
    none (the declared defaults alone) when the package carries no profiles."""
    packaged = packaged_profiles().get(DEFAULT_PROFILE)
    return [str(packaged)] if packaged is not None else []
