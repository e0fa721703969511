export PYTHONPATH=. PYTHONUNBUFFERED=1
python3 setup.py -q build_ext --inplace > /dev/null 2>&1
for ev in 0 2; do for b in tma cp.async; do for c in "272 192 32" "272 192 0" "272 96 0" "37 1344 0" "777 1333 0" "300 512 32"; do
  timeout 60 python3 benchmarks/experiments/_isolate.py $ev $b $c 2>&1 | tail -1
done; done; done
