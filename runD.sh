export PYTHONPATH=. PYTHONUNBUFFERED=1
python3 setup.py -q build_ext --inplace > /dev/null 2>&1
timeout 120 python3 -m pytest -q -rs -p no:cacheprovider tests/test_ops.py -k "line_aligned or sector_aligned or transpose_exact" 2>&1 | tail -3
timeout 90 python3 benchmarks/experiments/l2_policy_probe.py --gib 2.01 --rounds 3 --skip-copies --policies 2 --leads on,off --backends tma,cp.async --dtypes uint8,int32 --shapes 16384x32768,16384x32768@0@32,16384x32768@0@64 2>&1 | tee $OUT/probe_lead.jsonl
