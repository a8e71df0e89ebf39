#!/usr/bin/env bash
# The checks that need a GPU, run on a GPU machine in one call (README, Performance): the tests that skip on a
# CPU, and the forward and page benchmarks with --device cuda. Each step is timed out on its own and a missing
# package skips only its step (the machine reaches no registry).
#   here:   bash scripts/device_tree.sh slim everyday-gpt   (a call sends at most 64 MiB: the other models stay here)
#   there:  bash scripts/device_checks.sh "$OUT"      (about 3 minutes; the figures come back as JSON beside a log)
#   here:   bash scripts/device_tree.sh restore
set -uo pipefail
out=${1:?usage: bash scripts/device_checks.sh OUT_FOLDER}
export PYTHONUNBUFFERED=1
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')"
tests=(
  tests/core/test_model.py::test_cuda_trace_stays_on_the_gpu_and_reads_as_cpu_tensors_matching_cpu
  tests/core/test_training.py::test_training_runs_on_cuda
  tests/core/test_long_runs.py::test_amp_trains_on_cuda_and_the_card_names_the_gpu
  tests/service/test_jobs.py::test_a_job_trains_on_cuda_and_saves_a_cpu_checkpoint
)
echo "== CUDA tests"
timeout 240 python3 -m pytest -q -p no:cacheprovider -rs "${tests[@]}" 2>&1 | tail -8
echo "== forward (bench/forward.py --device cuda)"
timeout 120 python3 bench/forward.py --device cuda --lengths 16 64 256 --repeat 7 --json "$out/forward_cuda.json" 2>&1 \
  | tail -12
if python3 -c "import streamlit, plotly, pandas" 2>/dev/null; then
  echo "== pages (bench/page_cost.py --device cuda, the default model)"
  timeout 240 python3 bench/page_cost.py --device cuda --lengths 128 --reruns 3 --model shipped:everyday-gpt 2>&1 \
    | grep -v "Session state" | tail -24
  cp bench/results/page_cost.json "$out/page_cost_cuda.json" 2>/dev/null
else
  echo "== pages skipped: streamlit, plotly or pandas is not installed there"
fi
