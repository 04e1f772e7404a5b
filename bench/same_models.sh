#!/usr/bin/env bash
# Do two commits train the same models? Builds the bundled sample's chain (ingest -> split ->
# vocabulary -> tfidf -> train) at each commit in a worktree, trains Cr5 (lambda = 1) and CCA
# at a fixed gamma, and compares every model file's SHA-256 (model.json's "files").
# One OpenBLAS thread, so threaded BLAS cannot make the last bits differ.
#   bash bench/same_models.sh OLD_COMMIT [NEW_COMMIT=HEAD]
set -euo pipefail
cd "$(dirname "$0")/.."
old=$1 new=${2:-HEAD} work=$(mktemp -d)
export OPENBLAS_NUM_THREADS=1
for rev in "$old" "$new"; do
  git worktree add -q --detach "$work/src-$rev" "$rev"
  # the commit's own code first on the path (the venv's editable install points here)
  (cd "$work/src-$rev" && export PYTHONPATH="$PWD" \
    C="--conf conf/local.yaml --conf conf/short-docs.yaml --conf conf/sample.yaml" &&
    "$OLDPWD/.venv/bin/python" jobs/chain.py --stages ingest,split,vocabulary,tfidf,train \
      $C --set paths.root="$work/out-$rev" --set train.lam=1.0 > "$work/$rev.cr5.log" 2>&1 &&
    # train.gamma: the flat key both releases read (a warning names train.cca.gamma after 51)
    "$OLDPWD/.venv/bin/python" jobs/chain.py --stages train $C --set paths.root="$work/out-$rev" \
      --set train.method=cca --set train.gamma=0.001 --set paths.model="$work/out-$rev/model_cca" \
      > "$work/$rev.cca.log" 2>&1)
  git worktree remove --force "$work/src-$rev"
done
.venv/bin/python - "$work/out-$old" "$work/out-$new" <<'PY'
import json, sys
for model in ("model", "model_cca"):
    a, b = (json.load(open(f"{root}/{model}/model.json"))["files"] for root in sys.argv[1:])
    same = {k: v["sha256"] for k, v in a.items()} == {k: v["sha256"] for k, v in b.items()}
    print(f"{model}: {len(a)} files, {'identical' if same else 'DIFFERENT'}")
PY
