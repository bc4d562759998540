"""ActorStart: what starting (and stopping) the local executor's actor processes costs, measured cold.

Before its first transition arrives, a local run waits for the fork server to start and import the
actor code (torch included), for the actors to fork and build their envs, and at the end for them
to stop. On a short run that is a large share of the wall time (about 1.5 s of a 5 s run on this
project's 2-core machine), so the planner weighs it against the faster learning phase.

It is measured in a fresh interpreter, since a fork server already running in the measuring
process (after any earlier local run there) would make it look free: from the executor's creation
to the first transitions the learner receives, plus closing it.

    python -m hetrl.runtime.startup ALGO ENV AGENT_JSON ACTORS    # prints the seconds
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from hetrl.algos import AgentConfig
from hetrl.errors import HetrlError

TIMEOUT_S = 180


def actor_start_seconds(algo: str, env: str, agent: AgentConfig, actors: int) -> float:
    """Seconds to start and stop ``actors`` actor processes of the local executor, in a fresh process."""
    import hetrl

    source_root = str(Path(hetrl.__file__).resolve().parents[1])
    path = os.pathsep.join([source_root, *filter(None, [os.environ.get("PYTHONPATH")])])
    args = [sys.executable, "-m", "hetrl.runtime.startup", algo, env, json.dumps(asdict(agent)), str(actors)]
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT_S,
                              env={**os.environ, "PYTHONPATH": path})
    except subprocess.TimeoutExpired:
        raise HetrlError(f"starting {actors} actor process(es) took over {TIMEOUT_S} s; "
                         "is the machine overloaded? try again, or use --executor inline") from None
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise HetrlError(f"could not measure the local executor's start-up: {done.stderr.strip()[-800:] or 'no output'}")
    return float(lines[-1])


def _measure(algo: str, env: str, agent_json: dict[str, Any], actors: int) -> float:
    import torch

    from hetrl.algos import make_algorithm
    from hetrl.config import config_from_dict
    from hetrl.envs import env_spec
    from hetrl.runtime.local import LocalExecutor
    from hetrl.planner.rule import default_placement

    agent = config_from_dict({"algo": algo, "env": env, "agent": agent_json}, "the profiled agent").agent
    algorithm = make_algorithm(algo, env_spec(env), agent)
    placement = default_placement(torch.device("cpu"), (1, 1), threads=1, mlp_policy=algorithm.mlp_networks())
    start = time.perf_counter()
    executor = LocalExecutor(algorithm, placement, 1, seed=0, actors=actors, log=lambda _: None)
    try:
        while executor.env_steps == 0:
            executor.iteration()
    finally:
        executor.close()
    return time.perf_counter() - start


if __name__ == "__main__":
    algo_name, env_id, agent_text, count = sys.argv[1:5]
    print(f"{_measure(algo_name, env_id, json.loads(agent_text), int(count)):.6f}")
