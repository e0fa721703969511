#!/usr/bin/env bash
# One device run: regenerate the driver-truth corpus, run every test (GPU ones included), the benchmarks and
# compute-sanitizer; everything lands in $OUT/results.tar.gz plus a summary on stdout.
# usage: benchmarks/device_batch.sh [quick]
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
R=/tmp/tmakit_results; rm -rf $R; mkdir -p $R
[ -f .device_commit ] && export TMAKIT_COMMIT=$(cat .device_commit)
Q=${1:-}
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; git rev-parse --short HEAD 2>/dev/null; } > $R/run_info.txt
# the C hot paths (tmakit._native) for this machine's Python; without them tmakit runs the Python twins
python3 setup.py -q build_ext --inplace > $R/build_ext.log 2>&1; echo "rc=$?" >> $R/build_ext.log
python3 -c "import tmakit._hotpath as h; print(h.STATUS)" | tee -a $R/build_ext.log
timeout 60 python3 tests/data/make_tensormap_corpus.py --seed 1 --out $R/tensormap_corpus.jsonl > $R/corpus.log 2>&1
cp $R/tensormap_corpus.jsonl $OUT/ 2>/dev/null
TMAKIT_HW_REPORT=$R/hw_report.json TMAKIT_CORPUS_OUT=$R/fresh_corpus.jsonl \
  timeout 330 python3 -m pytest -q -rs -p no:cacheprovider --timeout 150 --junitxml=$R/junit.xml tests > $R/pytest.log 2>&1
echo "pytest rc=$?" >> $R/pytest.log
timeout 120 python3 examples/async_memcpy_overlap.py --gib 1 --png $R/timeline.png > $R/example.log 2>&1; echo "rc=$?" >> $R/example.log
for b in describe_overhead launch_overhead transfer_bandwidth copy_bandwidth; do
  timeout ${BENCH_TIMEOUT:-70} python3 benchmarks/$b.py ${Q:+--quick} --out $R > $R/bench_$b.log 2>&1; echo "rc=$?" >> $R/bench_$b.log
done
timeout 60 python3 benchmarks/experiments/host_paths.py > $R/host_paths.json 2> $R/host_paths.err
PYTHON=python3 timeout 100 bash benchmarks/sanitize.sh $R/sanitize > $R/sanitize.log 2>&1; echo "rc=$?" >> $R/sanitize.log
tar czf $OUT/results.tar.gz -C /tmp tmakit_results
echo "=== summary"; tail -2 $R/build_ext.log; cat $R/corpus.log | tail -1 | cut -c1-300; grep -E "passed|failed|error" $R/pytest.log | tail -3
grep -E "^FAILED|^ERROR" $R/pytest.log | head -40
for b in describe_overhead launch_overhead transfer_bandwidth copy_bandwidth; do echo "--- $b"; grep -E "^\|" $R/bench_$b.log | head -14; tail -2 $R/bench_$b.log; done
echo "--- host paths"; cat $R/host_paths.json; tail -3 $R/host_paths.err
echo "--- example"; tail -25 $R/example.log
echo "--- sanitize"; tail -8 $R/sanitize.log
