#!/usr/bin/env bash
# The pixel workloads on a lent GPU machine, in one go sized for a short lease (issues 17, 22, 23).
#
#   bash bench/gpu_pixels.sh OUT_DIR
#   STEPS="tests cudagraph sweep" bash bench/gpu_pixels.sh OUT_DIR    # some of the steps
#
# Steps (STEPS, in this order by default: tests cudagraph triton gemms sweep pixels scale), each writing into OUT_DIR:
# - tests: devices.txt and gpu_tests.txt (every test marked gpu);
# - cudagraph: cudagraph_update.txt/.json (one update per network on Learn/cudagraph and
#   Learn/cudagraph-compiled, the latter with and without its narrow-products pass, and Learn/triton
#   on the DQN MLPs: time, kernels);
# - triton: triton_tiles.txt/.json (Learn/triton's DQN 64x64 and 256x256 updates at several tile
#   shapes, TRITON_TILES);
# - gemms: update_gemms.txt (each product of a DQN 256x256 update alone in a CUDA graph, at 2, 6
#   and 18 actions: Q-heads of CartPole, MinAtar and Atari);
# - sweep: sweep.txt and sweep/sweep.json, sweep.png (`hetrl sweep` on Atari Breakout over
#   SWEEP_ACTORS, NVML energy and the GPU's busy share; plan SWEEP_PLAN, the fixed rule by default,
#   which needs no profile);
# - pixels: bench.md and bench_pixels_cuda.json (bench/pixels.py --device cuda: MinAtar and Atari
#   Breakout, hetrl against SB3 and the CleanRL-style script, every network on the GPU);
# - scale: bench.md and bench_pixels_scale_gpu.json (bench/pixels_scale.py --gpu on Atari Breakout).
# pixels and scale let hetrl plan (plan=auto): its first run profiles the workload on the machine,
# which on a 16-core H100 machine took over 3 minutes for Atari (docs/results.md): their limits
# (PIXELS_S, SCALE_S) must leave room for it. Each step has its own time limit (seconds) and the
# next one runs after a failure; the exit status counts the failed steps. The run lengths are
# short: figures of a check, not the full runs.
set -uo pipefail
out=${1:?usage: bash bench/gpu_pixels.sh OUT_DIR}
mkdir -p "$out"
export COLUMNS=160 PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
failed=0
SWEEP_ACTORS=${SWEEP_ACTORS:-1,2,4,8,15}
SCALE_ACTORS=${SCALE_ACTORS:-1 4 15}

step() {  # step NAME SECONDS COMMAND...: run with a time limit, keep the output in OUT_DIR/NAME.txt
    local name=$1 limit=$2; shift 2
    echo "=== $name (limit ${limit} s): $*"
    local start=$SECONDS
    timeout -k 5 "$limit" "$@" >"$out/$name.txt" 2>&1
    local rc=$?
    tail -n 30 "$out/$name.txt"
    echo "=== $name: exit $rc after $((SECONDS - start)) s"
    [ $rc -eq 0 ] || failed=$((failed + 1))
}

want() { [[ " ${STEPS:-tests cudagraph triton gemms sweep pixels scale} " == *" $1 "* ]]; }

if want tests; then
    step devices 30 $py -m hetrl devices
    step gpu_tests ${TESTS_S:-150} $py -m pytest -q -m gpu -p no:cacheprovider --continue-on-collection-errors tests
fi
want cudagraph && step cudagraph_update ${CUDAGRAPH_S:-240} $py bench/cudagraph_update.py --calls 300 --narrow-pass on off \
    --out "$out/cudagraph_update.json"
# shellcheck disable=SC2086
want triton && step triton_tiles ${TRITON_S:-150} $py bench/cudagraph_update.py --backends triton --cases dqn-64x64-b64 \
    dqn-256x256-b64 --calls 300 --triton-tiles ${TRITON_TILES:-32x64x32x4 16x64x32x4 64x64x32x4 16x32x32x2 32x128x32x4} \
    --out "$out/triton_tiles.json"
want gemms && step update_gemms ${GEMMS_S:-60} bash -c "for a in 2 6 18; do $py bench/update_gemms.py --actions \$a || exit; done"
want sweep && step sweep ${SWEEP_S:-120} $py -m hetrl sweep dqn ALE/Breakout-v5 --actors "$SWEEP_ACTORS" --steps 6000 \
    --set learning_starts=1000 --set num_envs=4 --set device=cuda --set plan=${SWEEP_PLAN:-rule} --out "$out/sweep"
want pixels && step pixels ${PIXELS_S:-420} $py bench/pixels.py --device cuda --seeds 0 --workloads minatar-breakout atari-breakout \
    --minatar-steps 12000 --atari-steps 8000 --eval-episodes 5 --out "$out/bench.md"
# shellcheck disable=SC2086
want scale && step pixels_scale ${SCALE_S:-300} $py bench/pixels_scale.py --gpu --workloads atari-breakout --actors $SCALE_ACTORS \
    --n-envs 1 4 --atari-steps 5000 --atari-warmup 1000 --eval-episodes 0 --out "$out/bench.md"
rm -rf "$out/sweep"/actors_*  # run directories: sweep.json holds the figures
echo "failed steps: $failed"
exit $failed
