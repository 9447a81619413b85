#!/usr/bin/env bash
# The whole suite N times in a row (default 3) with `stress-ng --cpu <cores>` loading every core
# beside it: the suite must stay green on a busy machine (docs/testing.md).
#
#   bash scripts/stress-test.sh [runs]
#
# stress-ng comes from Debian's package (apt-get install -y stress-ng; this script installs it as
# root when it is missing). Each run is `.ci/run`; the last line sums them up.
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
if ! command -v stress-ng >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    apt-get install -y stress-ng >/dev/null || { echo "stress-test: apt-get install stress-ng failed" >&2; exit 2; }
  else
    echo "stress-test: stress-ng is missing: apt-get install -y stress-ng (as root)" >&2
    exit 2
  fi
fi
cores=$(nproc)
stress-ng --cpu "$cores" --timeout 4h >/dev/null 2>&1 &
stress=$!
trap 'kill "$stress" 2>/dev/null; wait "$stress" 2>/dev/null' EXIT
summary=()
status=0
for i in $(seq 1 "$runs"); do
  start=$(date +%s)
  out=$(bash .ci/run 2>&1)
  code=$?
  took=$(($(date +%s) - start))
  line=$(printf '%s\n' "$out" | tail -n 1)
  printf '%s\n' "$out" | grep -E '^not ok ' >&2
  summary+=("run $i: ${line} in ${took} s (exit ${code})")
  echo "stress-test: run $i: ${line} in ${took} s (exit ${code})" >&2
  [ "$code" -ne 0 ] && status=1
done
echo "stress-test: stress-ng --cpu ${cores} beside ${runs} runs:"
printf '  %s\n' "${summary[@]}"
exit "$status"
