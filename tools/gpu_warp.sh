#!/usr/bin/env bash
# The CUDA checks with MuJoCo Warp, in two calls of the device tool (one lent machine, kept
# warm between them), since warp-lang's wheel (149 MB) is larger than one call can carry
# (64 MiB with the working tree). Prepare here, in the repository root:
#   echo /.whl/ /.wa/ /.wb/ | tr ' ' '\n' >> .git/info/exclude
#   pip download (as in tools/gpu_check.sh, cp312) tensordict gymnasium pyvers orjson
#       farama-notifications mujoco mujoco-core mujoco-warp glfw -> .whl/ (glfw: Gymnasium's
#       MuJoCo envs import it; the rendering tests need libEGL too, not carried so far);
#   warp-lang -> unpack it,
#   drop warp/examples, warp/tests and warp/bin/warp-clang.so (Warp's CPU JIT: CUDA needs
#   none), `xz` warp/bin/warp.so (298 MB -> 81 MB) and `split -b 42000000` it: the first part
#   into .wa/, the second beside `tar cJf warp_py.tar.xz warp warp_lang-*.dist-info` in .wb/.
# Then, with no pause between the two calls (the machine goes back after 30 s idle):
#   bash tools/gpu_warp.sh stage1   (carry .whl .wa): installs, stashes part 1, CUDA tests
#   bash tools/gpu_warp.sh stage2   (carry .wb): Warp, its CUDA tests, SPS, training
set -u
OUT=${OUT:-/tmp/gpu_warp}
mkdir -p "$OUT" /tmp/site /tmp/wparts
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1

source tools/gpu_step.sh  # step NAME SECONDS COMMAND...

case "${1:-}" in
stage1)
    cp .wa/* /tmp/wparts/
    python3 -c "
import glob, zipfile
for w in glob.glob('.whl/*.whl'):
    zipfile.ZipFile(w).extractall('/tmp/site')"
    nvidia-smi -L
    python3 -c "import torch, tensordict, mujoco; print('torch', torch.__version__, 'cuda',
torch.cuda.is_available(), 'tensordict', tensordict.__version__, 'mujoco', mujoco.__version__)"
    step tests 200 python3 -m pytest -q -p no:cacheprovider -n 6 \
        tests/rlcore/test_collection_graph.py tests/rlcore/test_sync_free.py \
        tests/rlcore/test_datasets.py tests/rlcore/envs/test_push_cube_view.py \
        tests/rlcore/algos/test_whole_step.py tests/rlcore/envs/test_frame_stack.py \
        tests/rlcore/test_stream_frames.py tests/rlcore/test_presets.py
    ;;
stage2)
    tar xJf .wb/warp_py.tar.xz -C /tmp/site
    cat /tmp/wparts/wso.aa .wb/wso.ab | xz -d > /tmp/site/warp/bin/warp.so || exit 1
    python3 -c "import warp as wp; wp.init(); print('warp', wp.__version__, wp.get_cuda_devices())"
    step train 200 python3 -m benchmarks.warp_halfcheetah --seconds 150 --compile \
        --json "$OUT/train.json"
    step sps 90 python3 -m benchmarks.throughput --device cuda --envs mujoco_halfcheetah \
        --sizes 4096 65536 --parts env bare train --train-num-steps 16 --reps 2 \
        --json "$OUT/sps.json"
    TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 step sps_tf32 60 python3 -m benchmarks.throughput \
        --device cuda --envs mujoco_halfcheetah --sizes 65536 --parts train --compile \
        --train-num-steps 16 --reps 2 --json "$OUT/sps_tf32.json"
    step tests 100 python3 -m pytest -q -p no:cacheprovider -n 4 \
        tests/rlcore/envs/test_contract.py tests/rlcore/envs/test_warp_engine.py \
        tests/rlcore/envs/test_mujoco_batch.py
    ;;
*)
    echo "usage: bash tools/gpu_warp.sh stage1|stage2" >&2
    exit 2
    ;;
esac
echo "=== end $(date +%T)"
