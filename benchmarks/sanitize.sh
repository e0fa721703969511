#!/usr/bin/env bash
# Run tmakit's kernels (benchmarks/sanitize_driver.py) under compute-sanitizer memcheck, racecheck and
# synccheck. Logs go to the directory given as $1 (one <tool>.log and <tool>.stdout per tool). Exit status 0
# only when every tool reports no error and the driver's result checks pass.
#   usage: PYTHONPATH=. benchmarks/sanitize.sh "$OUT/sanitize"
set -u
out="${1:?usage: benchmarks/sanitize.sh LOG_DIR}"
mkdir -p "$out"
here="$(cd "$(dirname "$0")" && pwd)"
python="${PYTHON:-python}"
if ! command -v compute-sanitizer >/dev/null 2>&1; then
  echo "compute-sanitizer is not on the PATH (it ships with the CUDA toolkit)" | tee "$out/summary.txt"
  exit 2
fi
status=0
: > "$out/summary.txt"
for tool in memcheck racecheck synccheck; do
  extra=()
  [ "$tool" = memcheck ] && extra=(--leak-check full)
  [ "$tool" = racecheck ] && extra=(--racecheck-report all)
  compute-sanitizer --tool "$tool" "${extra[@]}" --error-exitcode 99 --log-file "$out/$tool.log" \
    "$python" "$here/sanitize_driver.py" > "$out/$tool.stdout" 2>&1
  rc=$?
  line="$tool: exit $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/$tool.log" | tail -1)"
  echo "$line" | tee -a "$out/summary.txt"
  [ "$rc" -ne 0 ] && status=1
done
exit $status
