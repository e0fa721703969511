export PYTHONPATH=. PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
python3 setup.py -q build_ext --inplace > $R/build.log 2>&1 || { tail -20 $R/build.log; exit 1; }
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $R/run_info.txt
timeout 150 python3 -m pytest -q -rs -p no:cacheprovider tests/test_ops.py tests/test_device_headers.py > $R/pytest_ops.log 2>&1; echo "rc=$?" >> $R/pytest_ops.log
tail -3 $R/pytest_ops.log; grep -E "^FAILED|^ERROR" $R/pytest_ops.log | head -20
PYTHON=python3 timeout 150 bash benchmarks/sanitize.sh $R/sanitize > $R/sanitize.log 2>&1; echo "rc=$?" >> $R/sanitize.log
cat $R/sanitize.log; grep -i "fail" $R/sanitize/*.stdout | head
timeout 250 python3 -m pytest -q -rs -p no:cacheprovider tests --ignore=tests/test_ops.py --ignore=tests/test_device_headers.py > $R/pytest_rest.log 2>&1; echo "rc=$?" >> $R/pytest_rest.log
tail -3 $R/pytest_rest.log; grep -E "^FAILED|^ERROR" $R/pytest_rest.log | head -20
