"""Tuned defaults per (algorithm, env id): the rows of rl-baselines3-zoo, translated to hetrl.

``ZOO`` holds the zoo's hyperparameter files as they are (``rl_zoo3/hyperparams/{dqn,ddpg,td3,sac}.yml``,
rl_zoo3 2.9.2), keys in SB3's names; a key the zoo leaves out takes SB3's default (``SB3_DEFAULTS``).
``translate`` turns a zoo row into hetrl settings (the same keys ``--set`` takes); ``DEVIATIONS``
lists, per row, where hetrl departs from the translation on purpose, each with its reason.
``lookup(algo, env)`` is what ``hetrl train`` uses: the settings and a line saying where they came
from. Precedence (``config.make_config``): the algorithm's generic defaults < this table < a
``--config`` file < ``--set`` / API keyword arguments. A resumed run keeps its own config.json.

How SB3's settings become hetrl's:

- ``n_timesteps`` -> ``steps`` (the run's default budget).
- ``train_freq`` (env steps between training bursts) -> ``train_every``; ``gradient_steps`` per burst
  (``-1``: as many as env steps collected) -> ``replay_ratio = gradient_steps / train_freq``.
- DQN ``target_update_interval`` counts env steps; hetrl's ``target_update_every`` counts gradient
  updates. SB3 checks the interval every env step but trains only at the end of a burst, so the
  target moves once per ``max(target_update_interval, train_freq)`` env steps on average, i.e.
  every ``max(interval, train_freq) * replay_ratio`` updates (CartPole: once per 128-update burst).
- ``exploration_fraction * n_timesteps`` -> ``eps_decay_steps`` (absolute env steps, so extending
  a run does not stretch the schedule); ``exploration_initial_eps``/``final_eps`` -> ``eps_start``/``eps_end``.
- ``policy_kwargs: net_arch`` -> ``hidden`` (SB3 builds actor and critic with the same list).
- ``noise_type, noise_std`` -> ``noise_type, action_noise``: SB3 adds the noise to the action scaled
  to [-1, 1], the unit of hetrl's ``action_noise`` (a fraction of half the action range);
  ``ornstein-uhlenbeck`` is SB3's process with its theta 0.15 and dt 0.01, reset at episode ends.
- SAC: ``ent_coef`` (``auto``, ``auto_X`` or a number) is hetrl's ``ent_coef`` as it is; SB3 updates the
  actor and temperature every gradient step and the target every step (``policy_delay=1``). gSDE
  (``use_sde``, ``log_std_init``, ``use_expln``, ``sde_sample_freq``) keeps its names. The zoo's
  linear learning-rate schedules (``lin_X``) have no hetrl counterpart: a constant ``lr=X`` (a
  deviation, listed).
- SB3's DQN is not double DQN (``double=False``); its loss is Huber with gradient-norm clipping at 10,
  as hetrl's. SB3's DDPG is its TD3 with one critic, no target smoothing and no policy delay, as hetrl's.
- SB3 trains from ``learning_starts`` on even with fewer stored transitions than a batch (it samples
  with replacement); hetrl waits until the replay holds a batch (at most ``batch_size`` env steps later).
"""

from __future__ import annotations

from typing import Any

from hetrl.envs.pixels import ALE_PREFIX

ZOO_SOURCE = "rl-baselines3-zoo"

# SB3 2.x defaults for the keys the zoo rows leave out (DQN, and TD3; DDPG = TD3 with its variant keys)
SB3_DEFAULTS: dict[str, dict[str, Any]] = {
    "dqn": {"learning_rate": 1e-4, "buffer_size": 1_000_000, "learning_starts": 100, "batch_size": 32, "gamma": 0.99,
            "train_freq": 4, "gradient_steps": 1, "target_update_interval": 10_000, "exploration_fraction": 0.1,
            "exploration_initial_eps": 1.0, "exploration_final_eps": 0.05, "max_grad_norm": 10.0, "tau": 1.0,
            "net_arch": [64, 64]},
    "ddpg": {"learning_rate": 1e-3, "buffer_size": 1_000_000, "learning_starts": 100, "batch_size": 256, "tau": 0.005,
             "gamma": 0.99, "train_freq": 1, "gradient_steps": 1, "net_arch": [400, 300], "noise_type": None,
             "noise_std": 0.0},
    "td3": {"learning_rate": 1e-3, "buffer_size": 1_000_000, "learning_starts": 100, "batch_size": 256, "tau": 0.005,
            "gamma": 0.99, "train_freq": 1, "gradient_steps": 1, "net_arch": [400, 300], "noise_type": None,
            "noise_std": 0.0, "policy_delay": 2, "target_policy_noise": 0.2, "target_noise_clip": 0.5},
    "sac": {"learning_rate": 3e-4, "buffer_size": 1_000_000, "learning_starts": 100, "batch_size": 256, "tau": 0.005,
            "gamma": 0.99, "train_freq": 1, "gradient_steps": 1, "ent_coef": "auto", "net_arch": [256, 256],
            "use_sde": False, "log_std_init": -3.0, "use_expln": False, "sde_sample_freq": -1},
}

_CLASSIC_CONTINUOUS = {  # ddpg.yml and td3.yml hold the same rows for these envs
    "Pendulum-v1": {"n_timesteps": 20_000, "gamma": 0.98, "buffer_size": 200_000, "learning_starts": 10_000,
                    "noise_type": "normal", "noise_std": 0.1, "gradient_steps": 1, "train_freq": 1,
                    "learning_rate": 1e-3, "net_arch": [400, 300]},
    "MountainCarContinuous-v0": {"n_timesteps": 300_000, "noise_type": "ornstein-uhlenbeck", "noise_std": 0.5,
                                 "gradient_steps": 1, "train_freq": 1, "learning_rate": 1e-3, "batch_size": 256,
                                 "net_arch": [400, 300]},
    "LunarLanderContinuous-v3": {"n_timesteps": 300_000, "gamma": 0.98, "buffer_size": 200_000, "learning_starts": 10_000,
                                 "noise_type": "normal", "noise_std": 0.1, "gradient_steps": 1, "train_freq": 1,
                                 "learning_rate": 1e-3, "net_arch": [400, 300]},
    "BipedalWalker-v3": {"n_timesteps": 1_000_000, "gamma": 0.98, "buffer_size": 200_000, "learning_starts": 10_000,
                         "noise_type": "normal", "noise_std": 0.1, "gradient_steps": 1, "train_freq": 1,
                         "learning_rate": 1e-3, "net_arch": [400, 300]},
}

# the zoo's rows as published (SB3 names; ``policy_kwargs: dict(net_arch=...)`` written as ``net_arch``)
ZOO: dict[str, dict[str, dict[str, Any]]] = {
    "dqn": {
        "CartPole-v1": {"n_timesteps": 50_000, "learning_rate": 2.3e-3, "batch_size": 64, "buffer_size": 100_000,
                        "learning_starts": 1_000, "gamma": 0.99, "target_update_interval": 10, "train_freq": 256,
                        "gradient_steps": 128, "exploration_fraction": 0.16, "exploration_final_eps": 0.04,
                        "net_arch": [256, 256]},
        "MountainCar-v0": {"n_timesteps": 120_000, "learning_rate": 4e-3, "batch_size": 128, "buffer_size": 10_000,
                           "learning_starts": 1_000, "gamma": 0.98, "target_update_interval": 600, "train_freq": 16,
                           "gradient_steps": 8, "exploration_fraction": 0.2, "exploration_final_eps": 0.07,
                           "net_arch": [256, 256]},
        "LunarLander-v3": {"n_timesteps": 100_000, "learning_rate": 6.3e-4, "batch_size": 128, "buffer_size": 50_000,
                           "learning_starts": 0, "gamma": 0.99, "target_update_interval": 250, "train_freq": 4,
                           "gradient_steps": -1, "exploration_fraction": 0.12, "exploration_final_eps": 0.1,
                           "net_arch": [256, 256]},
        "Acrobot-v1": {"n_timesteps": 100_000, "learning_rate": 6.3e-4, "batch_size": 128, "buffer_size": 50_000,
                       "learning_starts": 0, "gamma": 0.99, "target_update_interval": 250, "train_freq": 4,
                       "gradient_steps": -1, "exploration_fraction": 0.12, "exploration_final_eps": 0.1,
                       "net_arch": [256, 256]},
    },
    "ddpg": dict(_CLASSIC_CONTINUOUS),
    "td3": dict(_CLASSIC_CONTINUOUS),
    "sac": {
        "MountainCarContinuous-v0": {"n_timesteps": 50_000, "learning_rate": 3e-4, "buffer_size": 50_000, "batch_size": 512,
                                     "ent_coef": 0.1, "train_freq": 32, "gradient_steps": 32, "gamma": 0.9999, "tau": 0.01,
                                     "learning_starts": 0, "use_sde": True, "log_std_init": -3.67, "use_expln": True,
                                     "net_arch": [64, 64]},
        "Pendulum-v1": {"n_timesteps": 20_000, "learning_rate": 1e-3},
        "LunarLanderContinuous-v3": {"n_timesteps": 500_000, "batch_size": 256, "learning_rate": "lin_7.3e-4",
                                     "buffer_size": 1_000_000, "ent_coef": "auto", "gamma": 0.99, "tau": 0.01,
                                     "train_freq": 1, "gradient_steps": 1, "learning_starts": 10_000, "net_arch": [400, 300]},
        "BipedalWalker-v3": {"n_timesteps": 500_000, "learning_rate": 7.3e-4, "buffer_size": 300_000, "batch_size": 256,
                             "ent_coef": "auto", "gamma": 0.98, "tau": 0.02, "train_freq": 64, "gradient_steps": 64,
                             "learning_starts": 10_000, "use_sde": True, "log_std_init": -3, "use_expln": True,
                             "net_arch": [400, 300]},
    },
}

# where hetrl departs from the translated zoo row on purpose: {algo: {env: {key: (value, reason)}}}
DEVIATIONS: dict[str, dict[str, dict[str, tuple[Any, str]]]] = {
    # the zoo's CartPole row learns, then collapses and relearns: its greedy policy rests on action
    # gaps of ~0.1% of Q (~100 everywhere, the discounted sum of a never-ending episode), which
    # the jitter of Adam at lr 2.3e-3 (a step ~lr per weight whatever the batch) flips, and with
    # hard target copies Q drifts past 100, the largest possible value (docs/results.md)
    "dqn": {"CartPole-v1": {
        "lr": (2.5e-4, "Adam's stationary jitter scales with lr; at 2.3e-3 the greedy policy flips between evaluations"),
        "tau": (0.005, "Polyak targets every update instead of a hard copy every 128 updates: with hard copies Q rose "
                       "past 1/(1 - gamma) = 100, the largest possible return, at every lr tried"),
        "double": (True, "hetrl's default (SB3's DQN has max targets); with Polyak targets it kept Q below 100 and the final "
                         "policy solved in 9 of 10 seeds"),
        "steps": (100_000, "at lr 2.5e-4 the policy is first solved at 20k-85k env steps (median 60k), past the zoo's 50k"),
    }},
    "sac": {"LunarLanderContinuous-v3": {
        "lr": (7.3e-4, "the zoo decays the learning rate linearly from 7.3e-4 to 0 (lin_7.3e-4); hetrl's lr is constant")}},
}

# envs that need an optional extra of hetrl (checked when the env is made: hetrl.envs.spec)
BOX2D_ENVS = ("LunarLander-v3", "LunarLanderContinuous-v3", "BipedalWalker-v3", "BipedalWalkerHardcore-v3", "CarRacing-v3")


def translate(algo: str, row: dict[str, Any]) -> dict[str, Any]:
    """hetrl settings (``--set`` keys) for the zoo row ``row`` of ``algo`` (see the module docstring)."""
    z = {**SB3_DEFAULTS[algo], **row}
    lr = z["learning_rate"]
    if isinstance(lr, str):  # the zoo's "lin_X" schedule: X, a deviation the table lists
        lr = lr.removeprefix("lin_")
    gradient_steps = z["train_freq"] if z["gradient_steps"] == -1 else z["gradient_steps"]
    ratio = gradient_steps / z["train_freq"]
    out: dict[str, Any] = {
        "steps": int(z["n_timesteps"]), "lr": float(lr), "batch_size": int(z["batch_size"]),
        "buffer_size": int(z["buffer_size"]), "learning_starts": int(z["learning_starts"]), "gamma": float(z["gamma"]),
        "train_every": int(z["train_freq"]), "replay_ratio": ratio, "hidden": tuple(z["net_arch"]),
    }
    if algo == "dqn":
        out.update({
            "target_update_every": max(1, round(max(z["target_update_interval"], z["train_freq"]) * ratio)),
            "tau": float(z["tau"]), "double": False, "max_grad_norm": float(z["max_grad_norm"]),
            "eps_start": float(z["exploration_initial_eps"]), "eps_end": float(z["exploration_final_eps"]),
            "eps_decay_steps": int(round(z["exploration_fraction"] * z["n_timesteps"])),
        })
    elif algo == "sac":
        out.update({"tau": float(z["tau"]), "ent_coef": str(z["ent_coef"]), "policy_delay": 1, "use_sde": bool(z["use_sde"])})
        if z["use_sde"]:
            out.update({"log_std_init": float(z["log_std_init"]), "use_expln": bool(z["use_expln"]),
                        "sde_sample_freq": int(z["sde_sample_freq"])})
    else:
        if z["noise_type"] not in (None, "normal", "ornstein-uhlenbeck"):
            raise ValueError(f"no translation for SB3 noise type {z['noise_type']!r}")
        out.update({"tau": float(z["tau"]), "action_noise": float(z["noise_std"] if z["noise_type"] else 0.0),
                    "noise_type": z["noise_type"] or "normal"})
        if algo == "td3":
            out.update({"policy_delay": int(z["policy_delay"]), "target_noise": float(z["target_policy_noise"]),
                        "target_noise_clip": float(z["target_noise_clip"])})
    return out


def _build() -> dict[tuple[str, str], dict[str, Any]]:
    table = {}
    for algo, rows in ZOO.items():
        for env, row in rows.items():
            settings = translate(algo, row)
            settings.update({k: v for k, (v, _) in DEVIATIONS.get(algo, {}).get(env, {}).items()})
            table[(algo, env)] = settings
    return table


# (algo, env id) -> hetrl settings; other sources (e.g. MinAtar rows) add entries here with their SOURCE
TUNED: dict[tuple[str, str], dict[str, Any]] = _build()
SOURCE: dict[tuple[str, str], str] = {key: ZOO_SOURCE for key in TUNED}


def lookup(algo: str, env: str) -> tuple[dict[str, Any], str]:
    """The tuned settings for ``algo`` on ``env`` (empty if none) and a line naming their origin."""
    key = (algo.lower(), env)
    if key in TUNED:
        return dict(TUNED[key]), f"tuned for {env}, from {SOURCE[key]}"
    family = (key[0], env_family(env))
    if family in FAMILY_TUNED:
        return dict(FAMILY_TUNED[family]), f"tuned for {env} as an Atari game, from {FAMILY_SOURCE[family]}"
    tuned_envs = sorted(e for a, e in TUNED if a == key[0]) + family_labels(key[0])
    return {}, f"generic {key[0]} defaults (no tuned row for {env}; rows exist for {', '.join(tuned_envs) or 'no env'})"


def deviations(algo: str, env: str) -> dict[str, tuple[Any, str]]:
    """Where the row departs from the zoo's values: key -> (value, reason)."""
    return dict(DEVIATIONS.get(algo.lower(), {}).get(env, {}))


# --- MinAtar: DQN's reference agent -----------------------------------------------------------
# Young and Tian (2019), the MinAtar repository's ``examples/dqn.py``, translated to hetrl's
# settings (for every MinAtar game: the reference uses one agent for all five).
#
# Translations and choices:
#
# - ``target_update_every``: the reference copies the target every 1,000 env steps with one update
#   per env step (``train_every=1``, ``replay_ratio=1``), so 1,000 updates.
# - Epsilon: the reference decays 1 -> 0.1 over the 100k frames after its 5,000-step replay start;
#   hetrl's schedule counts env steps from 0, so it ends at 105,000.
# - Optimizer: the reference uses centred RMSProp (lr 2.5e-4, alpha 0.95, eps 0.01); hetrl's
#   learners, checkpoints and host re-implementations are Adam-shaped, so this uses Adam at
#   lr 1e-4, the learning rate Dopamine's MinAtar DQN (Obando-Ceron and Castro 2021, "Revisiting
#   Rainbow") and CleanRL's Atari DQN use with Adam.
# - ``double``: False, as in the reference (plain DQN targets), so that curves compare with its.
# - ``max_grad_norm``: None (the reference does not clip); the loss is Huber in both.
DQN_MINATAR: dict[str, Any] = {
    "batch_size": 32,
    "buffer_size": 100_000,
    "learning_starts": 5_000,
    "train_every": 1,
    "replay_ratio": 1.0,
    "target_update_every": 1_000,
    "tau": 1.0,
    "gamma": 0.99,
    "lr": 1e-4,
    "double": False,
    "eps_start": 1.0,
    "eps_end": 0.1,
    "eps_decay_steps": 105_000,
    "max_grad_norm": None,
    "steps": 5_000_000,  # the reference trains 5M frames
    "network": "auto",  # the MinAtar network (one 3x3 conv of 16 filters, 128 units) for 10x10 images
}


MINATAR_SOURCE = "the MinAtar reference agent (Young and Tian 2019)"
for _game in ("Asterix", "Breakout", "Freeway", "Seaquest", "SpaceInvaders"):
    for _version in ("v0", "v1"):
        TUNED[("dqn", f"MinAtar/{_game}-{_version}")] = dict(DQN_MINATAR)
        SOURCE[("dqn", f"MinAtar/{_game}-{_version}")] = MINATAR_SOURCE


# --- Atari: the zoo's "atari" row, for every ALE id ----------------------------------------------
# rl-baselines3-zoo gives its ``atari`` row to every env whose entry point is ale-py's AtariEnv,
# wrapped in SB3's AtariWrapper with a 4-frame stack; hetrl's Atari preprocessing
# (hetrl.envs.pixels: no-op starts, frame skip 4 with max-pool, 84x84 grayscale, 4 frames, clipped
# rewards, life loss as terminal in training) is that wrapper's, so every ``ALE/`` id takes this row.
# The translation is the MLP rows' (target every 1,000 env steps at 1 update per 4: 250 updates;
# epsilon 1 -> 0.01 over the first 1M of 10M steps). ``net_arch`` does not apply: the network is
# chosen from the observations (the Nature CNN for 84x84 frames), as the zoo's CnnPolicy is.
ATARI_FAMILY = "atari"
ZOO_ATARI: dict[str, Any] = {
    "n_timesteps": 10_000_000, "buffer_size": 100_000, "learning_rate": 1e-4, "batch_size": 32,
    "learning_starts": 100_000, "target_update_interval": 1_000, "train_freq": 4, "gradient_steps": 1,
    "exploration_fraction": 0.1, "exploration_final_eps": 0.01,
}
DQN_ATARI: dict[str, Any] = {k: v for k, v in translate("dqn", ZOO_ATARI).items() if k != "hidden"} | {"network": "auto"}
FAMILY_TUNED: dict[tuple[str, str], dict[str, Any]] = {("dqn", ATARI_FAMILY): DQN_ATARI}
FAMILY_SOURCE: dict[tuple[str, str], str] = {("dqn", ATARI_FAMILY): f"{ZOO_SOURCE}'s atari row"}


def family_labels(algo: str) -> list[str]:
    """How the families of rows ``algo`` has are named where the rows are listed."""
    return [f"every {ALE_PREFIX} id" for a, _ in FAMILY_TUNED if a == algo]


def env_family(env: str) -> str | None:
    """The family of rows ``env`` takes where it has no row of its own (Atari games), or None."""
    return ATARI_FAMILY if env.startswith(ALE_PREFIX) else None


# --- exit-dqn: DQN's rows ------------------------------------------------------------------------
# The early-exit DQN is judged against the baseline DQN at the same budget, so it starts from the
# very same settings (its own, the exit_* ones, keep their defaults).
for (_algo, _env), _row in list(TUNED.items()):
    if _algo == "dqn":
        TUNED[("exit-dqn", _env)] = dict(_row)
        SOURCE[("exit-dqn", _env)] = f"dqn's row: {SOURCE[(_algo, _env)]}"
for (_algo, _family), _row in list(FAMILY_TUNED.items()):
    if _algo == "dqn":
        FAMILY_TUNED[("exit-dqn", _family)] = dict(_row)
        FAMILY_SOURCE[("exit-dqn", _family)] = f"dqn's row: {FAMILY_SOURCE[(_algo, _family)]}"
