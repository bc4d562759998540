#!/usr/bin/env bash
# The pixel workloads on a lent GPU machine, in one go sized for a short lease (issues 17, 22, 23).
#
#   bash bench/gpu_pixels.sh OUT_DIR
#
# Writes into OUT_DIR: devices.txt, gpu_tests.txt (every test marked gpu), cudagraph_update.txt (one
# Learn/cudagraph update per network: wall time and its kernels), sweep/ and sweep.txt (`hetrl sweep`
# on Atari Breakout over the actor counts in SWEEP_ACTORS, with NVML energy and the GPU's busy
# share), and bench.md with the raw JSON beside it: bench/pixels.py --device cuda (MinAtar and Atari
# Breakout, hetrl against SB3 and the CleanRL-style script with every network on the GPU) and
# bench/pixels_scale.py --gpu (Atari Breakout, hetrl's executors against SB3's n_envs). Each step has
# its own time limit (seconds, the variables below) and the next one runs after a failure; the exit
# status counts the failed steps. The run lengths are short: figures of a check, not the full runs.
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

step devices 30 $py -m hetrl devices
step gpu_tests ${TESTS_S:-100} $py -m pytest -q -m gpu -p no:cacheprovider --continue-on-collection-errors tests
step cudagraph_update ${CUDAGRAPH_S:-40} $py bench/cudagraph_update.py --calls 300 --out "$out/cudagraph_update.json"
step pixels ${PIXELS_S:-160} $py bench/pixels.py --device cuda --seeds 0 --workloads minatar-breakout atari-breakout \
    --minatar-steps 12000 --atari-steps 8000 --eval-episodes 5 --out "$out/bench.md"
step sweep ${SWEEP_S:-75} $py -m hetrl sweep dqn ALE/Breakout-v5 --actors "$SWEEP_ACTORS" --steps 6000 \
    --set learning_starts=1000 --set num_envs=0 --out "$out/sweep"
# shellcheck disable=SC2086
step pixels_scale ${SCALE_S:-140} $py bench/pixels_scale.py --gpu --workloads atari-breakout --actors $SCALE_ACTORS \
    --n-envs 1 4 --atari-steps 5000 --atari-warmup 1000 --eval-episodes 0 --out "$out/bench.md"
rm -rf "$out/sweep"/actors_*  # run directories: sweep.json holds the figures
echo "failed steps: $failed"
exit $failed
