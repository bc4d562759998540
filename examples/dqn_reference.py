"""DQN on CartPole-v1 with hetrl's primitives, top to bottom: what the inline executor does
(src/hetrl/runtime/inline.py), written out like a CleanRL script.

A placement names a backend and a device for each primitive; the factory builds them; the loop
calls them in the protocol's order. Change a Slot below (Act on "torch", Learn on "torch" or on
"cuda") and the same loop trains the same agent elsewhere. Run: python examples/dqn_reference.py
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from hetrl.algos import DQNConfig, make_algorithm
from hetrl.envs import env_spec
from hetrl.evaluation import evaluate_policy
from hetrl.primitives import build
from hetrl.protocol import LEARN_INPUTS, Placement, Slot
from hetrl.runtime.nstep import NStepAssembler
from hetrl.runtime.schedule import ReplaySchedule

PLACEMENT = Placement(
    env=Slot("gymnasium", "cpu"),  # EnvStep: N Gymnasium envs stepped in turn
    act=Slot("numba", "cpu"),  # Act + WeightSync: a compiled copy of the Q-network
    replay=Slot("numpy", "cpu"),  # ReplayAdd, ReplaySample, PriorityUpdate: a ring in host arrays
    learn=Slot("numba", "cpu"),  # Learn: DQN's whole update as one compiled call
)


def train(steps: int, seed: int = 0, placement: Placement = PLACEMENT, num_envs: int = 1, **agent: object):
    """Train; returns (the learner, the greedy policy as a host function)."""
    algo = make_algorithm("dqn", env_spec("CartPole-v1"), DQNConfig(**agent))
    cfg = algo.config
    learn = build("Learn", placement.learn, algo, seed)
    replay = build("ReplayAdd", placement.replay, algo, seed)
    env = build("EnvStep", placement.env, algo, seed, num_envs=num_envs)
    policy = build("Act", placement.act, algo, seed, source=learn.learner.policy_network)
    nstep = NStepAssembler(num_envs, cfg.n_step, cfg.gamma)
    schedule = ReplaySchedule.of(cfg)
    rng = np.random.default_rng(seed)  # every random draw: acting and sampling, one stream
    obs, env_steps, iterations, updates_due, synced_at = env.reset(), 0, 0, 0.0, -1

    while env_steps < steps:
        # Act: random before learning starts, else the acting copy, refreshed when the learner moved
        if env_steps < cfg.learning_starts:
            actions = algo.random_actions(rng, num_envs)
        else:
            if synced_at != learn.learner.updates:
                policy.sync()  # WeightSync
                synced_at = learn.learner.updates
            explore, random_actions = algo.draw_exploration(rng, num_envs)
            actions = policy.act(obs, explore, random_actions, algo.exploration(env_steps))
        # EnvStep, n-step assembly, ReplayAdd
        out = env.step(actions)
        ready = nstep(obs, actions, out["rewards"], out["final_obs"], out["terminated"], out["truncated"])
        if ready is not None:
            replay.add(**ready)
        obs = out["next_obs"]
        env_steps, iterations = env_steps + num_envs, iterations + 1
        # ReplaySample, Transfer, Learn, PriorityUpdate: as many as the replay ratio owes
        if env_steps >= cfg.learning_starts and len(replay) >= cfg.batch_size:
            updates_due = schedule.accrue(updates_due, num_envs)
            while schedule.burst_now(iterations) and updates_due >= 1:
                batch = replay.sample(rng.random(cfg.batch_size), cfg.beta(env_steps))
                inputs = {k: batch[k] for k in LEARN_INPUTS}
                if learn.input_kind == "device":  # Transfer: to tensors on the learner's device
                    inputs = {k: torch.as_tensor(v, device=learn.device) for k, v in inputs.items()}
                result = learn.learn(**inputs)
                if cfg.prioritized:
                    td = result["td_errors"]
                    replay.update_priorities(batch["indices"], td.cpu().numpy() if replay.backend == "numpy" else td)
                updates_due -= 1
    env.close()

    network = learn.learner.policy_network
    greedy = build("Act", Slot("numpy", "cpu"), algo, seed, source=network)  # a host copy for evaluation
    greedy.sync()
    return learn.learner, lambda o: algo.greedy_rule(greedy.forward(o))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    learner, greedy = train(args.steps, args.seed)
    returns = evaluate_policy(greedy, "CartPole-v1", episodes=10, seed=args.seed)
    print(f"{learner.updates} updates; greedy return over 10 episodes: {returns.mean():.1f} +- {returns.std():.1f}")
