export PYTHONPATH=. PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
python3 setup.py -q build_ext --inplace > $R/build.log 2>&1 || { tail -20 $R/build.log; exit 1; }
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $R/run_info.txt
timeout 200 python3 -m pytest -q -rs -p no:cacheprovider tests/test_ops.py tests/test_device_headers.py > $R/pytest_ops.log 2>&1; echo "rc=$?" >> $R/pytest_ops.log
tail -3 $R/pytest_ops.log; grep -E "^FAILED|^ERROR" $R/pytest_ops.log | head -20
PYTHON=python3 timeout 150 bash benchmarks/sanitize.sh $R/sanitize > $R/sanitize.log 2>&1; echo "rc=$?" >> $R/sanitize.log
cat $R/sanitize.log; grep -h "FAIL\|lead" $R/sanitize/*.stdout | head
timeout 60 python3 benchmarks/experiments/l2_policy_probe.py --gib 2.01 --rounds 3 --skip-copies --policies 2 --backends tma,cp.async --dtypes uint8,int32 --shapes 16384x32768,16384x32768@0@32,16384x32768@0@64 > $R/probe_lead.jsonl 2>&1; cat $R/probe_lead.jsonl
for shape in 16336,32848 16384,32768; do timeout 80 python3 benchmarks/copy_bandwidth.py --shape $shape --out $R/bw_$shape > $R/bw_$shape.log 2>&1; grep -E "^\|" $R/bw_$shape.log | head -20; done
tar czf $OUT/results.tar.gz -C $OUT r
