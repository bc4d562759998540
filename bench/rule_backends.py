"""The fixed rule's host backends (``--plan rule``): Learn and Act on the compiled host backends
(Learn/blas, Act/numba) against torch's, which the rule used before, per call, measured side by
side in one run; the rule's choice (``hetrl.planner.rule.host_backends``) is marked.

For each workload (algorithm and env, with the tuned settings a new run gets: its network and
batch size), this times on the host, at ``--threads`` torch threads:

- Learn: ``learn`` on a batch of the run's batch size (random transitions of the env's shapes), on
  Learn/torch, and on Learn/torch-channels-last and Learn/blas where they serve the algorithm;
- Act (conv policies): the greedy ``forward`` at batch 1 on Act/torch and on Act/numba where it
  serves (an MLP policy acts with numpy under the rule either way, so it is not timed here).

Each figure is the median over ``--rounds`` rounds, the backends alternating within a round (each
round: ``profile.time_calls``'s median of 7 timed blocks), so a change in the machine's load falls
on both alike. The ratio is torch's time over the compiled backend's (above 1: it is faster).

    python bench/rule_backends.py                         # every workload below, one thread
    python bench/rule_backends.py --workloads td3:Pendulum-v1 --threads 2 --rounds 5
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics

import numpy as np
import torch

from hetrl.algos import make_algorithm
from hetrl.config import config_from_dict
from hetrl.envs import env_spec
from hetrl.planner.rule import host_backends
from hetrl.primitives import build, get
from hetrl.profile import synthetic_transitions, time_calls
from hetrl.protocol import Slot

WORKLOADS = ("dqn:CartPole-v1", "dqn:Acrobot-v1", "td3:Pendulum-v1", "sac:Pendulum-v1", "dqn:MinAtar/Breakout-v1",
             "dqn:MinAtar/SpaceInvaders-v1", "exit-dqn:MinAtar/Breakout-v1", "dqn:ALE/Breakout-v5")
LEARN_BACKENDS = ("torch", "torch-channels-last", "blas")  # torch first: the others are compared with it


def measure(workload: str, rounds: int, threads: int) -> list[dict]:
    algo_name, env = workload.split(":", 1)
    config = config_from_dict({"algo": algo_name, "env": env}, "bench", tuned=True)
    algo = make_algorithm(algo_name, env_spec(env), config.agent)
    learn, act = host_backends(algo)
    rng = np.random.default_rng(0)
    batch = {**synthetic_transitions(algo, config.agent.batch_size, rng), "weights": np.ones(config.agent.batch_size, np.float32)}
    calls = {}
    for backend in LEARN_BACKENDS:
        if get("Learn", backend).unsupported(algo):
            continue
        learner = build("Learn", Slot(backend, "cpu", threads), algo, 0)
        feed = batch if get("Learn", backend).takes_host_arrays else {k: torch.as_tensor(v) for k, v in batch.items()}
        calls[("Learn", backend)] = lambda learner=learner, feed=feed: learner.learn(**feed)
    if not algo.mlp_networks():
        obs = synthetic_transitions(algo, 1, rng)["obs"]
        source = build("Learn", Slot("torch", "cpu", threads), algo, 0).learner.policy_network
        for backend in ("torch", "numba"):
            if get("Act", backend).unsupported(algo):
                continue
            policy = build("Act", Slot(backend, "cpu"), algo, 0, source=source)
            calls[("Act", backend)] = lambda policy=policy: policy.forward(obs)
    times: dict[tuple[str, str], list[float]] = {key: [] for key in calls}
    for _ in range(rounds):
        for key, fn in calls.items():
            times[key].append(time_calls(fn, lambda: None)[0])
    rows = []
    others = {"Learn": [b for b in LEARN_BACKENDS[1:] if ("Learn", b) in times], "Act": ["numba"]}
    for primitive, chosen in (("Learn", learn), ("Act", act)):
        if (primitive, "torch") not in times:
            continue
        torch_s = statistics.median(times[(primitive, "torch")])
        for compiled in others[primitive] or [None]:
            other_s = statistics.median(times[(primitive, compiled)]) if (primitive, compiled) in times else None
            rows.append({"workload": workload, "primitive": primitive, "size": config.agent.batch_size if primitive == "Learn" else 1,
                         "compiled": compiled, "rule": chosen, "torch_us": 1e6 * torch_s,
                         "compiled_us": None if other_s is None else 1e6 * other_s,
                         "ratio": None if other_s is None else torch_s / other_s})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), help="algo:env (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{platform.processor() or platform.machine()}, torch {torch.__version__}, {args.threads} thread(s); "
          f"load average before {os.getloadavg()[0]:.2f}; {args.rounds} rounds, backends alternating\n")
    print("| workload | primitive | batch | torch us/call | other backend us/call | torch / it | the rule's |")
    print("|---|---|---:|---:|---:|---:|---|")
    for workload in args.workloads:
        for r in measure(workload, args.rounds, args.threads):
            other = "-" if r["compiled_us"] is None else f"{r['compiled_us']:,.1f} ({r['compiled']})"
            ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}x"
            print(f"| {r['workload']} | {r['primitive']} | {r['size']} | {r['torch_us']:,.1f} | {other} | {ratio} | "
                  f"{r['rule']} |", flush=True)
    print(f"\nload average after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
