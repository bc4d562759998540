"""ActorStart: what starting (and stopping) the local executor's actor processes costs, measured cold.

Before its first transition arrives, a local run waits for the fork server to start and import the
actor code (torch included), for the actors to fork and build their envs, and at the end for them
to stop. On a short run that is a large share of the wall time (about 1.5 s of a 5 s run on this
project's 2-core machine), so the planner weighs it against the faster learning phase.

It is measured in a fresh interpreter, since a fork server already running in the measuring
process (after any earlier local run there) would make it look free: from the executor's creation
to the first transitions the learner receives, plus closing it. The interpreter finds what this
process imports (``fresh_python_env``), so a user's env module is found as the actors find it; an
env only this process can make is never measured (its runs stay inline).

    python -m hetrl.runtime.startup ALGO ENV_JSON AGENT_JSON ACTORS    # prints the seconds
    # ENV_JSON: the env source's settings, {"env": ..., "env_kwargs": {...}, "wrappers": [...]}
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import asdict
from typing import Any

from hetrl.algos import AgentConfig
from hetrl.envs.source import EnvSource
from hetrl.errors import HetrlError
from hetrl.runtime.processes import fresh_python_env

TIMEOUT_S = 180


def actor_start_seconds(algo: str, env: str | EnvSource, agent: AgentConfig, actors: int) -> float:
    """Seconds to start and stop ``actors`` actor processes of the local executor, in a fresh process."""
    settings = (env if isinstance(env, EnvSource) else EnvSource(env)).settings()
    args = [sys.executable, "-m", "hetrl.runtime.startup", algo, json.dumps(settings), json.dumps(asdict(agent)), str(actors)]
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT_S, env=fresh_python_env())
    except subprocess.TimeoutExpired:
        raise HetrlError(f"starting {actors} actor process(es) took over {TIMEOUT_S} s; "
                         "is the machine overloaded? try again, or use --executor inline") from None
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise HetrlError(f"could not measure the local executor's start-up: {done.stderr.strip()[-800:] or 'no output'}")
    return float(lines[-1])


def _measure(algo: str, env: dict[str, Any], agent_json: dict[str, Any], actors: int) -> float:
    import torch

    from hetrl.algos import make_algorithm
    from hetrl.config import config_from_dict
    from hetrl.envs import env_source, env_spec
    from hetrl.runtime.local import LocalExecutor
    from hetrl.planner.rule import default_placement

    agent = config_from_dict({"algo": algo, "env": env["env"], "agent": agent_json}, "the profiled agent").agent
    algorithm = make_algorithm(algo, env_spec(env_source(**env)), agent)
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
    algo_name, env_text, agent_text, count = sys.argv[1:5]
    print(f"{_measure(algo_name, json.loads(env_text), json.loads(agent_text), int(count)):.6f}")
