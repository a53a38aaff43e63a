#!/usr/bin/env bash
# The checks to run on a CUDA machine, in one go, ~9 minutes: the tests that CI (CPU only)
# skips as "needs CUDA", then the GPU lines of benchmarks/README.md (*fast_path*).
#
# Made for a machine that has a CUDA torch but none of this project's other packages and
# no package index: build the pure-Python wheels here, carry them as .whl/, and run
#   .venv/bin/pip download --no-deps --only-binary=:all: --python-version 3.12 -d .whl \
#       tensordict==0.15.3 gymnasium==1.4.0 pyvers orjson farama-notifications
#   OUT=<folder for the logs> bash tools/gpu_check.sh
# (the cp312 tag: the GPU machines so far ran Python 3.12; match theirs). Where the
# packages are installed already, the wheel step is skipped. Writes logs and JSON under
# $OUT; prints the tail of each.
set -u
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
if [ -d .whl ] && ls .whl/*.whl > /dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD
else
    export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1
nvidia-smi -L
python3 -c "import torch, tensordict; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'tensordict', tensordict.__version__)"

source tools/gpu_step.sh  # step NAME SECONDS COMMAND...

# Every CUDA-only test, and the compiled paths' CPU tests on the CUDA torch.
step tests 200 python3 -m pytest -q -p no:cacheprovider \
    tests/rlcore/test_collection_graph.py tests/rlcore/test_sync_free.py \
    tests/rlcore/test_datasets.py tests/rlcore/envs/test_push_cube_view.py \
    tests/rlcore/algos/test_whole_step.py
step collector 90 python3 -m benchmarks.throughput --device cuda --envs cartpole push_cube \
    --sizes 4096 16384 65536 --parts env act collector collector_graphed --reps 3 \
    --json "$OUT/collector.json"
step train 100 python3 -m benchmarks.throughput --device cuda --envs cartpole push_cube \
    --sizes 4096 16384 65536 --parts train --compile --reps 3 --json "$OUT/train.json"
step minibatch 75 python3 -m benchmarks.fused_step --device cuda --rows 4096 32768 --reps 5 \
    --steps 20 --bf16 --json "$OUT/minibatch.json"
# TF32 matrix products (no code change: the override makes cuBLAS use them for float32), the
# lever the +train / env-only lines wait on; compare with `minibatch` above.
TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 step minibatch_tf32 60 python3 -m benchmarks.fused_step \
    --device cuda --rows 4096 32768 --reps 5 --steps 20 --json "$OUT/minibatch_tf32.json"
step presets 75 python3 -m benchmarks.fast_path --sections presets --json "$OUT/presets.json"
echo "=== end $(date +%T)"
