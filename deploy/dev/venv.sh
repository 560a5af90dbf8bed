#!/usr/bin/env bash
# `make py`: the rank SDK's Python environment, a venv at $VENV with PyPI torch
# (CPU is enough), pytest, maturin and the `rankscope` package built from
# python/ (pyo3 + maturin).
#
# Runs side by side with other `make py` / `make test` runs sharing the venv:
# - `$VENV.lock` is held shared by every run that uses the venv (this script
#   while it checks, deploy/dev/test.sh for its whole test phase) and
#   exclusively by a run that installs into it, so no run reinstalls the
#   package under another run's tests;
# - the package is rebuilt only when its sources changed since the last build
#   (a digest of python/, sdk/, proto/ and Cargo.lock kept in the venv), so a
#   second run of the same checkout finds it up to date and does not wait.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=${VENV:?VENV: the venv directory}
PY_DEPS=(torch numpy pytest 'maturin>=1.9.4,<2')
stamp=$VENV/.rankscope-sources

sources() {
  find python/src python/rankscope python/Cargo.toml python/pyproject.toml sdk proto Cargo.lock \
    -type f ! -name '*.so' ! -name '*.pyc' -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1
}
up_to_date() {
  [ -x "$VENV/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$(sources)" ] &&
    "$VENV/bin/python" -c 'import rankscope, torch, pytest' 2>/dev/null
}

mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"
if ! flock -s -n 9; then echo "another run is building $VENV; waiting for it"; flock -s 9; fi
if up_to_date; then
  echo "$VENV: torch and the rankscope package are up to date"
  exit 0
fi
flock -u 9
if ! flock -n 9; then echo "another run is using or building $VENV; waiting for it"; flock 9; fi
test -x "$VENV/bin/python" || python3 -m venv "$VENV"
"$VENV/bin/python" -c 'import torch, pytest, maturin' 2>/dev/null || {
  echo "installing ${PY_DEPS[*]} into $VENV (torch is large; once)"
  "$VENV/bin/pip" install -q --disable-pip-version-check --no-cache-dir "${PY_DEPS[@]}"
}
echo "maturin develop (python/)"
digest=$(sources)
(cd python && VIRTUAL_ENV=$VENV PATH=$VENV/bin:$PATH maturin develop --release --locked -q)
"$VENV/bin/python" -c 'import rankscope, torch'
echo "$digest" >"$stamp"
