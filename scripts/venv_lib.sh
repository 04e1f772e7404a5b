# Sourced by scripts/setup.sh and scripts/setup_airflow.sh: find a Python and create (or
# repair) a virtual environment, on Debian installing the venv package when it is missing.
#
#   ensure_venv DIR PROG MAX_MINOR     # PROG names the caller in messages; Python 3.10 up to
#                                       # 3.MAX_MINOR is accepted ($PYTHON first if set)

pick_python() {  # PROG MAX_MINOR
  local cand
  for cand in "${PYTHON:-}" python3.11 python3.12 python3.10 python3.13 python3; do
    [ -n "$cand" ] || continue
    if command -v "$cand" >/dev/null 2>&1 &&
       "$cand" -c "import sys; sys.exit(0 if (3, 10) <= sys.version_info[:2] <= (3, $2) else 1)" 2>/dev/null; then
      echo "$cand"; return 0
    fi
  done
  echo "$1: no Python 3.10-3.$2 found (set PYTHON=/path/to/python3.11)" >&2
  return 1
}

ensure_venv() {  # DIR PROG MAX_MINOR
  local venv="$1" prog="$2" py err ver
  # A venv whose pip does not work (e.g. left by a failed 'python -m venv' on Debian
  # without python3-venv) is rebuilt.
  if [ -e "$venv" ] && ! "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
    echo "$prog: $venv is incomplete; recreating it"
    rm -rf "$venv"
  fi
  [ -x "$venv/bin/python" ] && return 0
  py=$(pick_python "$prog" "$3")
  echo "$prog: creating $venv with $($py --version)"
  err=$(mktemp)
  if ! "$py" -m venv "$venv" 2>"$err"; then
    # Debian's python3 ships venv's ensurepip in a separate package.
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
      ver=$("$py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
      echo "$prog: installing python${ver}-venv with apt-get"
      # (the lock timeout: scripts/test.sh runs setups side by side, and one may hold apt's lock)
      apt-get -o DPkg::Lock::Timeout=600 update -qq && (apt-get -o DPkg::Lock::Timeout=600 install -y -qq "python${ver}-venv" || apt-get -o DPkg::Lock::Timeout=600 install -y -qq python3-venv)
      rm -rf "$venv"; "$py" -m venv "$venv"
    else
      cat "$err" >&2; rm -f "$err"; rm -rf "$venv"
      echo "$prog: '$py -m venv' failed; install your distribution's venv package (Debian: sudo apt-get install python3-venv)" >&2
      return 1
    fi
  fi
  rm -f "$err"
}
