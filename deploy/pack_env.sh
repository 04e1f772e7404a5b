#!/usr/bin/env bash
# Build the executors' Python environment and pack it into a relocatable archive (venv-pack).
#
#   deploy/pack_env.sh [--with GROUP[,GROUP...]] [--python PATH] [--python-prefix DIR]
#                      [--force] [--dry-run]
#
# Creates a fresh venv in build/pack-env/<key>/, installs pyproject.toml's runtime dependencies
# into it (all but pyspark, see below) and the optional-dependency groups named with --with,
# packs it with venv-pack to build/deploy/cr5-env-<key>.tar.gz and prints that path (the only
# line on stdout). <key> hashes the dependency lists, the groups chosen, the Python version and
# the interpreter's path: when the archive exists nothing is installed or packed (--force
# rebuilds). pip's cache is used as usual. `deploy/submit.sh --pack-env` runs this script.
#
# Options:
#   --with GROUPS       optional-dependency groups of pyproject.toml, repeatable or
#                       comma-separated: search (faiss-cpu: the index stage, the search
#                       service), neural (torch, sentencepiece: train.method xcnn/tlaser/
#                       ctlaser; the CPU-only torch is tried first, as scripts/setup.sh does),
#                       classify, delta, wikipedia
#   --python PATH       the Python the venv is made from (default: $PYTHON, else the base
#                       interpreter of this repository's .venv, i.e. the driver's Python;
#                       PySpark refuses executors whose Python minor version differs)
#   --python-prefix DIR where that Python is installed on the executors' nodes when it is not
#                       where it is here (venv-pack --python-prefix; e.g. /usr)
#   --force             rebuild the venv and the archive
#   --dry-run           print the archive's path and, on stderr, what it would hold; build nothing
#
# Not in the archive:
# - the interpreter: bin/python is a symlink to the base Python (venv-pack's limit), so every
#   node needs that same Python at that same path (or at --python-prefix);
# - pyspark: the executors' Python workers import Spark's own python/lib/pyspark.zip and py4j
#   from SPARK_HOME, which Spark puts on their PYTHONPATH;
# - the pipeline package: submit.sh ships it with --py-files (a zip named by a hash of the
#   sources), so the archive changes only when the dependencies do.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
groups=()
python="${PYTHON:-}"
python_prefix=""
force=0
dry_run=0
# The CPU-only PyTorch release tried first for --with neural (the one scripts/setup.sh installs).
torch_cpu="2.13.0"

usage() { sed -n '2,34p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "pack_env.sh: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
  case "$1" in
    --with) [ $# -ge 2 ] || die "--with needs a group name"; groups+=("$2"); shift 2 ;;
    --with=*) groups+=("${1#--with=}"); shift ;;
    --python) [ $# -ge 2 ] || die "--python needs a path"; python="$2"; shift 2 ;;
    --python-prefix) [ $# -ge 2 ] || die "--python-prefix needs a directory"
      python_prefix="$2"; shift 2 ;;
    --force) force=1; shift ;;
    --dry-run) dry_run=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument $1 (see deploy/pack_env.sh --help)" ;;
  esac
done

if [ -z "$python" ]; then
  if [ -x "$repo/.venv/bin/python" ]; then python="$repo/.venv/bin/python"; else python=python3; fi
fi
command -v "$python" >/dev/null 2>&1 || die "no Python at $python (give --python PATH)"
case "$python_prefix" in ''|/*) ;; *) die "--python-prefix must be an absolute path" ;; esac

# The requirements and the key, from pyproject.toml (tomllib; tomli or pip's on Python 3.10).
plan="$("$python" - "$repo/pyproject.toml" "$python_prefix" "$torch_cpu" \
  ${groups[@]+"${groups[@]}"} <<'PY'
import hashlib, json, os, platform, re, sys
try:
    import tomllib
except ImportError:  # Python 3.10: tomli, else pip's own copy
    try:
        import tomli as tomllib
    except ImportError:
        from pip._vendor import tomli as tomllib
pyproject, python_prefix, torch_cpu, *args = sys.argv[1:]
project = tomllib.load(open(pyproject, "rb"))["project"]
optional = project.get("optional-dependencies", {})
# Groups that are not for executors: test tools, a JRE, the Spark Connect client (pyspark).
refused = {"dev", "java", "connect"}
groups = sorted({g.strip() for a in args for g in a.split(",") if g.strip()})
usable = sorted(set(optional) - refused)
for g in groups:
    if g not in optional or g in refused:
        sys.exit(f"pack_env.sh: no group {g!r} for executors; groups: {', '.join(usable)}")
def name(req):
    return re.split(r"[\s\[<>=!~;]", req, maxsplit=1)[0].lower().replace("_", "-")
# pyspark stays out: Spark puts its own pyspark.zip on the Python workers' PYTHONPATH.
reqs = [r for r in project["dependencies"] if name(r) != "pyspark"]
for g in groups:
    reqs += [r for r in optional[g] if r not in reqs and name(r) != "pyspark"]
torch = torch_cpu if any(name(r) == "torch" for r in reqs) else ""
base = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
material = {
    "format": 1,
    "requirements": sorted(reqs),
    "groups": groups,
    "python": platform.python_version(),
    "implementation": sys.implementation.name,
    "machine": platform.machine(),
    "interpreter": base,
    "python_prefix": python_prefix,
    "torch_cpu": torch,
}
key = hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:12]
print(key)
print(platform.python_version())
print(base)
print(torch)
print(",".join(groups) or "-")
for r in reqs:
    print(r)
PY
)" || exit 2
{
  read -r key
  read -r pyver
  read -r base_python
  read -r torch
  read -r group_list
  mapfile -t reqs
} <<< "$plan"

archive="$repo/build/deploy/cr5-env-$key.tar.gz"
venv="$repo/build/pack-env/$key"

if [ "$dry_run" = 1 ]; then
  {
    echo "pack_env.sh: Python $pyver ($base_python), groups: $group_list"
    if [ -f "$archive" ] && [ "$force" = 0 ]; then echo "pack_env.sh: exists, would be reused"
    else echo "pack_env.sh: would build $venv and pack it"; fi
    printf 'pack_env.sh:   %s\n' "${reqs[@]}"
  } >&2
  echo "$archive"
  exit 0
fi

mkdir -p "$repo/build/deploy" "$repo/build/pack-env"
# One packer per key at a time (a test and a submission may race for the same archive).
if command -v flock >/dev/null 2>&1; then
  exec 9>"$repo/build/pack-env/$key.lock"
  flock 9
fi
if [ -f "$archive" ] && [ "$force" = 0 ]; then
  echo "pack_env.sh: reusing $archive" >&2
  echo "$archive"
  exit 0
fi

t0=$SECONDS
stamp="$venv/.cr5-pack-env"
if [ "$force" = 1 ] || [ ! -f "$stamp" ]; then
  echo "pack_env.sh: building $venv (Python $pyver, groups: $group_list)" >&2
  rm -rf "$venv"
  "$python" -m venv "$venv"
  pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
  if [ -n "$torch" ]; then
    # PyPI's Linux torch pulls several GB of CUDA wheels: try the CPU-only build first (from
    # PyTorch's index or a find-links folder); it sorts above PyPI's build of the same release.
    "${pip[@]}" --retries 1 --timeout 20 "torch==$torch" \
      --extra-index-url https://download.pytorch.org/whl/cpu 2>/dev/null \
      || echo "pack_env.sh: no CPU-only PyTorch found; torch comes from PyPI" >&2
  fi
  "${pip[@]}" "${reqs[@]}"
  echo "$key" > "$stamp"
fi

# venv-pack itself, outside the packed venv (a pure-Python wheel, installed once).
tools="$repo/build/pack-env/venv-pack"
if ! PYTHONPATH="$tools" "$python" -c "import venv_pack" >/dev/null 2>&1; then
  "$python" -m pip install -q --disable-pip-version-check --target "$tools" "venv-pack>=0.2,<0.3"
fi
echo "pack_env.sh: packing $venv" >&2
tmp="$archive.tmp$$"
trap 'rm -f "$tmp"' EXIT
PYTHONPATH="$tools" "$python" - "$venv" "$tmp" "$python_prefix" <<'PY'
import sys
import venv_pack
prefix, output, python_prefix = sys.argv[1:4]
# What executors never run: pip, setuptools and the packages' test suites.
site = "lib/python*/site-packages/"
exclude = [site + p for p in ("pip/*", "pip-*", "setuptools/*", "setuptools-*",
                              "_distutils_hack/*", "distutils-precedence.pth", "*/tests/*")]
exclude += ["bin/pip*", ".cr5-pack-env"]
venv_pack.pack(prefix=prefix, output=output, format="tar.gz", force=True,
               python_prefix=python_prefix or None,
               filters=[("exclude", p) for p in exclude])
PY
chmod 644 "$tmp"  # venv-pack writes through mkstemp (0600)
mv -f "$tmp" "$archive"
trap - EXIT
echo "pack_env.sh: $archive ($(du -h "$archive" | cut -f1), $((SECONDS - t0)) s)" >&2
echo "$archive"
