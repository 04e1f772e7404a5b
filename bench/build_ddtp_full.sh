#!/usr/bin/env bash
# Build the full DDTP corpus (every Debian package description present in >= 2 of en/de/fr/es,
# bookworm/main) for bench/bench_train.py --corpus ddtp. The output stays OUTSIDE the
# repository (it is ~10 MB and not to be committed):
#
#   bench/build_ddtp_full.sh [OUT]        # OUT default: $DDTP_FULL, else
#                                         # ${XDG_CACHE_HOME:-~/.cache}/cr5/ddtp_full.parquet
#
# Needs the Translation-{en,de,fr,es} index files of bookworm/main in /var/lib/apt/lists
# (as root: apt-get update -o Acquire::Languages="en,de,fr,es"). Extra arguments after OUT
# go to scripts/build_ddtp_sample.py (e.g. --lists-dir DIR --suite trixie).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-${DDTP_FULL:-${XDG_CACHE_HOME:-$HOME/.cache}/cr5/ddtp_full.parquet}}"
shift || true
PYTHON="${PYTHON:-$REPO/.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3

OUT_ABS="$(realpath -m "$OUT")"
case "$OUT_ABS/" in
    "$REPO"/*)
        echo "error: $OUT_ABS is inside the repository $REPO; the full corpus must not be" \
            "committed - give a path outside it (or set DDTP_FULL)" >&2
        exit 2
        ;;
esac
mkdir -p "$(dirname "$OUT_ABS")"

"$PYTHON" "$REPO/scripts/build_ddtp_sample.py" --n-concepts 0 \
    --out "$OUT_ABS" --stats-json "${OUT_ABS%.parquet}.stats.json" "$@"
