#!/usr/bin/env bash
# The checks and figures that need a CUDA GPU, in one go (a lent GPU machine is held by the minute).
#
#   bash bench/gpu.sh OUT_DIR [STEPS_DQN] [STEPS_DDPG]
#
# Writes into OUT_DIR: devices.txt (what hetrl sees, meters included), gpu_tests.txt (every test
# marked gpu), profile_<algo>.txt/.json (every primitive on cpu and cuda: Learn, replay, transfers,
# with NVML joules per call), plan_<algo>_<objective>.txt, and train_<algo>_<how>.txt (the run
# summaries: predicted beside measured per-stage times, energy with its meter). Each step goes on
# after a failure of the one before, so one broken part does not hide the others; the exit status
# counts the failed steps.
set -uo pipefail
out=${1:?usage: bash bench/gpu.sh OUT_DIR [STEPS_DQN] [STEPS_DDPG]}
dqn_steps=${2:-20000}
ddpg_steps=${3:-15000}
mkdir -p "$out"
export COLUMNS=160 PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
failed=0

step() {  # step NAME COMMAND...: run, keep the output in OUT_DIR/NAME.txt, count a failure
    local name=$1; shift
    echo "=== $name: $*"
    local start=$SECONDS
    "$@" >"$out/$name.txt" 2>&1
    local rc=$?
    tail -n 40 "$out/$name.txt"
    echo "=== $name: exit $rc after $((SECONDS - start)) s"
    [ $rc -eq 0 ] || failed=$((failed + 1))
}

step devices $py -m hetrl devices
step gpu_tests $py -m pytest -q -m gpu -p no:cacheprovider tests
for job in "dqn CartPole-v1 $dqn_steps" "ddpg Pendulum-v1 $ddpg_steps"; do
    set -- $job
    algo=$1 env=$2 steps=$3
    step "profile_$algo" $py -m hetrl profile "$algo" "$env" --no-progress --out "$out/profile_$algo.json"
    for objective in throughput efficiency; do
        step "plan_${algo}_$objective" $py -m hetrl plan "$algo" "$env" --profile "$out/profile_$algo.json" \
            --objective "$objective" --out "$out/plan_${algo}_$objective.json"
    done
    # the plan's choice, then the learner pinned to each device, for the measured side by side
    step "train_${algo}_auto" $py -m hetrl train "$algo" "$env" --steps "$steps" --executor auto --no-progress \
        --plan "$out/plan_${algo}_throughput.json" --run-dir "$out/runs/${algo}_auto" --set eval_every=0
    for device in cuda cpu; do
        step "train_${algo}_$device" $py -m hetrl train "$algo" "$env" --steps "$steps" --device "$device" \
            --no-progress --run-dir "$out/runs/${algo}_$device" --set eval_every=0
    done
done
rm -rf "$out/runs"  # checkpoints and event files: the summaries above hold the figures
echo "failed steps: $failed"
exit $failed
