"""One training run of one library on one workload, for ``bench/peers.py``.

Every library trains the same algorithm with the same settings (:data:`WORKLOADS`); only the
training call is timed (imports, construction and evaluation are not), the env steps and gradient
updates actually done are counted, and the final policy is evaluated greedily by one shared
function (:func:`evaluate`) over a plain Gymnasium env, never by a library's own evaluator.

A peer library is imported only inside its runner, so a missing one fails only its own runs.
"""

from __future__ import annotations

import importlib
import inspect
import itertools
import tempfile
import time
from pathlib import Path
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch

Act = Callable[[np.ndarray], np.ndarray]  # a batch of observations (1, obs_dim) -> a batch of actions
EVAL_SEED = 10_000  # evaluation episode i is reset with EVAL_SEED + i, the same for every library


# --- the shared settings ---------------------------------------------------------------------
@dataclass(frozen=True)
class DQNSettings:
    """DQN (Mnih et al. 2015, not double, no dueling) on CartPole-v1, as every library runs it."""

    env_id: str = "CartPole-v1"
    hidden: tuple[int, ...] = (64, 64)
    batch_size: int = 64
    buffer_size: int = 50_000
    lr: float = 5e-4  # Adam
    gamma: float = 0.99
    learning_starts: int = 1_000  # env steps of uniformly random actions before the first update
    train_every: int = 1  # env steps between bursts of gradient updates
    gradient_steps: int = 1  # updates per burst (rl-baselines3-zoo's bursts: e.g. 128 every 256 env steps)
    target_every: int = 500  # env steps between hard copies of the Q-network into the target network
    eps_start: float = 1.0
    eps_end: float = 0.05
    eps_fraction: float = 0.2  # of the run's env steps over which epsilon decays linearly
    max_grad_norm: float = 10.0  # Huber (smooth L1) loss, gradients clipped to this norm

    @property
    def updates_per_env_step(self) -> float:
        return self.gradient_steps / self.train_every

    @property
    def target_every_updates(self) -> int:
        """The target period in gradient updates, for libraries that count it in updates."""
        return max(1, round(self.target_every * self.updates_per_env_step))

    def eps_decay_steps(self, steps: int) -> int:
        return max(1, int(self.eps_fraction * steps))

    def epsilon(self, env_step: int, steps: int) -> float:
        frac = min(1.0, env_step / self.eps_decay_steps(steps))
        return self.eps_start + frac * (self.eps_end - self.eps_start)


@dataclass(frozen=True)
class DDPGSettings:
    """DDPG (Lillicrap et al. 2016) on Pendulum-v1, as every library runs it; TD3 (Fujimoto et al. 2018:
    twin critics, target smoothing 0.2 clipped at 0.5, the actor every second update) and SAC (Haarnoja
    et al. 2018: twin critics, tuned temperature towards -dim(A), starting at 1) share these settings."""

    env_id: str = "Pendulum-v1"
    hidden: tuple[int, ...] = (256, 256)  # actor and critic alike; the critic takes concat(obs, action)
    batch_size: int = 256
    buffer_size: int = 200_000
    lr: float = 1e-3  # Adam, actor and critic
    gamma: float = 0.98
    tau: float = 0.005  # Polyak target updates after every update
    learning_starts: int = 1_000
    train_every: int = 1  # env steps between bursts of updates
    gradient_steps: int = 1  # critic updates per burst
    action_noise: float = 0.1  # Gaussian std, as a fraction of half the action range (SB3's units; not SAC)

    @property
    def updates_per_env_step(self) -> float:
        return self.gradient_steps / self.train_every


@dataclass(frozen=True)
class Workload:
    name: str
    algo: str  # "dqn", "ddpg", "td3" or "sac"
    title: str
    settings: DQNSettings | DDPGSettings


WORKLOADS: dict[str, Workload] = {
    w.name: w for w in (
        Workload("dqn", "dqn", "DQN CartPole-v1, 1 update per env step", DQNSettings(train_every=1)),
        Workload("dqn-r0.25", "dqn", "DQN CartPole-v1, 1 update per 4 env steps", DQNSettings(train_every=4)),
        Workload("ddpg", "ddpg", "DDPG Pendulum-v1, 1 update per env step", DDPGSettings()),
        # rl-baselines3-zoo's hyperparams/dqn.yml row for CartPole-v1 (the row hetrl.tuned starts from). The zoo's
        # target copy every 10 env steps falls between bursts, so the target moves once per burst: every 256 env steps
        # here, which libraries counting in updates take as every 128 updates (SB3's run is the same either way)
        Workload("dqn-zoo", "dqn", "DQN CartPole-v1, rl-baselines3-zoo's settings (256x256, 128 updates per 256 env steps)",
                 DQNSettings(hidden=(256, 256), buffer_size=100_000, lr=2.3e-3, train_every=256, gradient_steps=128,
                             target_every=256, eps_fraction=0.16, eps_end=0.04)),
    )
}


@dataclass
class Trained:
    """What a runner hands back: counts, the timed seconds, and a greedy policy to evaluate."""

    env_steps: int
    updates: int
    seconds: float
    act: Act
    version: str
    extra: dict[str, Any] = field(default_factory=dict)


# --- shared evaluation and FLOP counting -----------------------------------------------------
def evaluate(act: Act, env_id: str, episodes: int = 10, seed: int = EVAL_SEED) -> list[float]:
    """Undiscounted returns of ``episodes`` greedy episodes; episode i starts from ``seed + i``."""
    env = gym.make(env_id)
    discrete = isinstance(env.action_space, gym.spaces.Discrete)
    returns = []
    with torch.no_grad():
        for i in range(episodes):
            obs, _ = env.reset(seed=seed + i)
            total, done = 0.0, False
            while not done:
                action = np.asarray(act(np.asarray(obs, dtype=np.float32)[None]))[0]
                obs, reward, terminated, truncated, _ = env.step(int(action) if discrete else action.astype(np.float32))
                total += float(reward)
                done = terminated or truncated
            returns.append(total)
    env.close()
    return returns


def mlp_forward_flops(sizes: list[int], batch: int) -> int:
    """Multiply-add FLOPs (2 per MAC) of the linear layers of an MLP with layer ``sizes``."""
    return 2 * batch * sum(a * b for a, b in itertools.pairwise(sizes))


# Forward passes' worth of each network per update, backward counted as 2x forward (the usual count):
# (policy or Q-network, critic). DQN: the Q-network on obs with its backward (3) and the target on
# next_obs (1). DDPG: target actor and critic (1 + 1), the critic's loss (3), the actor's loss through
# the critic (3 + 3). TD3: two critics and two target critics, the actor's step every second update.
# SAC: the actor on next_obs (1), two target critics (2), two critics (6), the actor's step through
# both critics every update (3 + 6).
PASSES = {"dqn": (4.0, 0.0), "ddpg": (4.0, 7.0), "td3": (1 + 3 / 2, 2 + 6 + 3 / 2), "sac": (4.0, 14.0)}


def learn_seconds(result: Any) -> float:
    """Seconds a hetrl run spent in its Learn primitive (its timer: calls x mean microseconds)."""
    calls, us = next(((calls, us) for name, calls, us, _ in result.timers if name == "Learn"), (0, 0.0))
    return calls * us / 1e6


def forward_macs(net: torch.nn.Module, obs: Any) -> int:
    """Multiply-accumulates of one forward pass of a plain network (conv and linear layers) on
    ``obs``, counted by hooks on its layers as it runs (biases and activations left out)."""
    total = 0
    hooks = []

    def count(module: Any, args: Any, out: Any) -> None:
        nonlocal total
        if isinstance(module, torch.nn.Conv2d):
            total += out.numel() * module.in_channels * module.kernel_size[0] * module.kernel_size[1] // module.groups
        else:
            total += out.numel() // out.shape[-1] * module.in_features * module.out_features

    for m in net.modules():
        if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)):
            hooks.append(m.register_forward_hook(count))
    try:
        with torch.no_grad():
            net(torch.as_tensor(obs))
    finally:
        for h in hooks:
            h.remove()
    return total


def no_checkpoint_in_loop(steps: int) -> int:
    """A ``checkpoint_every`` that no checkpoint inside a run of ``steps`` env steps reaches. The loop
    ends at the first iteration at or past ``steps``, which overshoots by up to one iteration's env
    steps (16 on Atari's inline plan), so ``steps + 1`` did not do: such a run wrote a checkpoint,
    its whole frame replay included, inside the timed loop (docs/benchmarks.md). The final
    checkpoint is always written, after the loop."""
    return 2 * steps + 1


def dqn_update_flops(net: torch.nn.Module, obs_shape: tuple[int, ...], batch: int) -> int:
    """FLOPs of one DQN update of ``net`` (any Q-network: conv and linear layers counted), by the
    convention of :func:`update_flops` (:data:`PASSES`: the online and target forward passes, the
    backward as 2x forward)."""
    return int(PASSES["dqn"][0] * 2 * forward_macs(net, torch.zeros(1, *obs_shape)) * batch)


def update_flops(algo: str, obs_dim: int, out_dim: int, hidden: tuple[int, ...], batch: int) -> int:
    """FLOPs of one update of ``algo``'s linear layers (:data:`PASSES`); ``out_dim``: DQN's action
    count, else the action's dimension. Adam, activations and the temperature are left out."""
    policy_out = 2 * out_dim if algo == "sac" else out_dim  # SAC's actor: a mean and a log std per dimension
    policy = mlp_forward_flops([obs_dim, *hidden, policy_out], batch)
    critic = mlp_forward_flops([obs_dim + out_dim, *hidden, 1], batch)
    p, c = PASSES[algo]
    return int(p * policy + c * critic)


def ddpg_update_flops(obs_dim: int, act_dim: int, settings: DDPGSettings) -> int:
    """FLOPs of one DDPG update, counting linear layers only (backward ~ 2x forward).

    Target: actor and critic forward (1 + 1). Critic loss: critic forward + backward (3).
    Actor loss: actor forward + backward (3) and critic forward + backward through it (3).
    Together 4 actor forwards and 7 critic forwards' worth; Adam and activations are left out.
    """
    h = list(settings.hidden)
    actor = mlp_forward_flops([obs_dim, *h, act_dim], settings.batch_size)
    critic = mlp_forward_flops([obs_dim + act_dim, *h, 1], settings.batch_size)
    return 4 * actor + 7 * critic


def ddpg_update_flops_performed(obs_dim: int, act_dim: int, settings: DDPGSettings) -> int:
    """FLOPs of the linear layers that one DDPG update must compute, where :func:`ddpg_update_flops`
    counts the usual ``backward = 2x forward``: the actor's step needs only the critic's gradient for
    the action inputs (no critic weight gradient, which the next critic step would overwrite), and no
    gradient for a network's observation inputs is needed anywhere. hetrl's Learn/blas computes this."""
    h = list(settings.hidden)
    actor, critic = [obs_dim, *h, act_dim], [obs_dim + act_dim, *h, 1]
    b = settings.batch_size
    fwd = mlp_forward_flops
    critic_update = 3 * fwd(critic, b) - fwd(critic[:2], b)  # forward, weight gradients, input gradients above layer 0
    actor_step = (fwd(actor, b) + fwd(critic, b) + fwd(critic[1:], b) + 2 * b * act_dim * h[0]  # Q(s, mu(s)), dQ/da
                  + 2 * fwd(actor, b) - fwd(actor[:2], b))  # the actor's weight gradients and input gradients above layer 0
    return fwd(actor, b) + fwd(critic, b) + critic_update + actor_step


def matmul_peak(sizes: tuple[int, ...], repeats: int = 3, device: str = "cpu") -> dict[str, float]:
    """Best fp32 GFLOP/s of ``torch.mm`` of square matrices on ``device`` (on the CPU, at the current
    torch thread count; on CUDA, TF32 off, timed between synchronisations)."""
    best: dict[str, float] = {}
    gen = torch.Generator().manual_seed(0)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 on both kinds of device
    for n in sizes:
        a, b = torch.randn(n, n, generator=gen).to(device), torch.randn(n, n, generator=gen).to(device)
        torch.mm(a, b)  # warm-up
        sync()
        fastest = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            torch.mm(a, b)
            sync()
            fastest = min(fastest, time.perf_counter() - start)
        best[str(n)] = 2 * n**3 / fastest / 1e9
    return best


LIBRARY_MODULES = {"hetrl": "hetrl", "hetrl-auto": "hetrl", "hetrl-baseline": "hetrl", "sb3": "stable_baselines3", "tianshou": "tianshou", "torchrl": "torchrl"}


def library_version(lib: str) -> str:
    """The version of ``lib`` (importing it: an ImportError says why it cannot run)."""
    if lib == "cleanrl":
        return f"torch {torch.__version__}"  # the script is this repository's own
    module = importlib.import_module(LIBRARY_MODULES[lib])
    version = str(getattr(module, "__version__", "unknown"))
    if lib == "hetrl-baseline":  # which checkout: its folder
        version += f" ({Path(module.__file__).resolve().parents[2]})"
    return version



def _torch_act(fn: Callable[[torch.Tensor], torch.Tensor], device: str = "cpu") -> Act:
    """A numpy-in, numpy-out policy from a torch function of a float32 batch on ``device``."""
    def act(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return fn(torch.as_tensor(obs, dtype=torch.float32, device=device)).cpu().numpy()
    return act


def _cpu_only(lib: str, device: str) -> None:
    """Refuse a device this benchmark has not wired ``lib`` to (its run is reported as not measured)."""
    if device != "cpu":
        raise RuntimeError(f"this benchmark runs {lib} on the CPU only (its {device} wiring is not written)")


def _dqn_or_ddpg(lib: str, w: Workload) -> None:
    """Refuse what this benchmark has not wired ``lib`` to: TD3, SAC, bursts of several updates."""
    if w.algo not in ("dqn", "ddpg") or w.settings.gradient_steps != 1:
        raise RuntimeError(f"this benchmark runs {lib} on DQN and DDPG with one update per burst only")


def _parameters(cls: type) -> set[str]:
    return set(inspect.signature(cls.__init__).parameters)


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


# --- hetrl -----------------------------------------------------------------------------------
def run_hetrl(w: Workload, steps: int, seed: int, threads: int, device: str, executor: str = "inline",
              plan: str = "auto") -> Trained:
    """hetrl's own session (what ``hetrl.train`` runs), built first and then timed in ``train``.
    ``plan``: auto (from this machine's profile, the fixed rule where none can be made) or rule.

    ``executor="inline"`` pins the learner to ``device``, as the peers are pinned; ``"auto"`` lets
    the plan choose the executor and, on a machine with a GPU, the learner's device too.

    The timed call includes what hetrl always does at the end of a run: one checkpoint, a one-episode
    evaluation, the returns plot and summary.json. The loop alone is reported as ``loop_seconds``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot  # imported untimed, as every library's imports are; the end-of-run plot itself is timed

    import hetrl
    from hetrl.config import make_config
    from hetrl.errors import HetrlError
    from hetrl.training import Session, greedy_policy

    s = w.settings
    common: dict[str, Any] = {
        "steps": steps, "seed": seed, "threads": threads, "eval_every": 0, "eval_episodes": 1,
        "checkpoint_every": no_checkpoint_in_loop(steps),  # the final one is always written, after the timed loop
        "executor": executor,  # inline: one process, as every peer; auto: the plan picks (actor processes too)
        "device": device if executor == "inline" else "auto",
        "hidden": s.hidden, "batch_size": s.batch_size, "buffer_size": s.buffer_size, "lr": s.lr,
        "gamma": s.gamma, "learning_starts": s.learning_starts, "train_every": s.train_every,
        "replay_ratio": s.updates_per_env_step,  # a burst of train_every * replay_ratio = gradient_steps updates
    }
    if isinstance(s, DQNSettings):
        common.update(double=False, dueling=False, tau=1.0, target_update_every=s.target_every_updates,
                      eps_start=s.eps_start, eps_end=s.eps_end, eps_decay_steps=s.eps_decay_steps(steps),
                      max_grad_norm=s.max_grad_norm)
    elif w.algo == "sac":
        # use_sde off: the peers' SAC is the plain Gaussian one, where hetrl's tuned rows turn gSDE on for some envs
        common.update(tau=s.tau, max_grad_norm=None, ent_coef="auto", policy_delay=1, use_sde=False)
    else:
        td3 = w.algo == "td3"
        common.update(tau=s.tau, action_noise=s.action_noise, max_grad_norm=None, twin_critics=td3,
                      target_noise=0.2 if td3 else 0.0, target_noise_clip=0.5, policy_delay=2 if td3 else 1)
    overrides = [f"{k}={','.join(map(str, v)) if isinstance(v, tuple) else v}" for k, v in common.items()]
    with tempfile.TemporaryDirectory(prefix="hetrl_peers_") as tmp:
        try:
            session = Session.create(make_config(w.algo, s.env_id, None, [*overrides, f"plan={plan}"]), f"{tmp}/run")
        except HetrlError as exc:  # e.g. no profile of this thread count: fall back to the fixed rule
            if plan == "rule":
                raise
            plan = f"rule ({exc})"
            session = Session.create(make_config(w.algo, s.env_id, None, [*overrides, "plan=rule"]), f"{tmp}/run2")
        if threads:  # the plan may pick its own count; the benchmark holds it equal (0: the plan's own, bench/grid.py)
            torch.set_num_threads(threads)
        result, seconds = _timed(lambda: session.train(progress=False))
    policy = greedy_policy(session.algo, session.executor.policy_network)
    how = result.executor + (f", {result.actors} actor{'s' if result.actors != 1 else ''}" if result.actors else "")
    return Trained(result.env_steps, result.updates, seconds, policy, hetrl.__version__,
                   {"loop_seconds": result.wall_s, "plan": f"{plan}; {how}", "placement": result.placement,
                    "learn_seconds": learn_seconds(result), "learn_backend": session.placement.learn.backend,
                    "learn_threads": torch.get_num_threads()})


def run_hetrl_auto(w: Workload, steps: int, seed: int, threads: int, device: str) -> Trained:
    """hetrl with ``executor=auto``: the plan may run actors in their own processes."""
    return run_hetrl(w, steps, seed, threads, device, executor="auto")


# --- Stable-Baselines3 -----------------------------------------------------------------------
def run_sb3(w: Workload, steps: int, seed: int, threads: int, device: str) -> Trained:
    import stable_baselines3 as sb3

    s = w.settings
    env = gym.make(s.env_id)
    arch = {"net_arch": list(s.hidden)}
    if isinstance(s, DQNSettings):
        model = sb3.DQN(
            "MlpPolicy", env, learning_rate=s.lr, buffer_size=s.buffer_size, learning_starts=s.learning_starts,
            batch_size=s.batch_size, tau=1.0, gamma=s.gamma, train_freq=(s.train_every, "step"), gradient_steps=s.gradient_steps,
            target_update_interval=s.target_every, exploration_fraction=s.eps_fraction,
            exploration_initial_eps=s.eps_start, exploration_final_eps=s.eps_end, max_grad_norm=s.max_grad_norm,
            policy_kwargs=arch, seed=seed, device=device, verbose=0,
        )
    else:
        from stable_baselines3.common.noise import NormalActionNoise

        dim = env.action_space.shape[0]
        common = dict(learning_rate=s.lr, buffer_size=s.buffer_size, learning_starts=s.learning_starts,
                      batch_size=s.batch_size, tau=s.tau, gamma=s.gamma, train_freq=(s.train_every, "step"),
                      gradient_steps=s.gradient_steps, policy_kwargs=arch, seed=seed, device=device, verbose=0)
        if w.algo == "sac":
            model = sb3.SAC("MlpPolicy", env, ent_coef="auto", **common)
        else:
            noise = NormalActionNoise(np.zeros(dim), s.action_noise * np.ones(dim))  # SB3 adds it to the action scaled to [-1, 1]
            cls = {"ddpg": sb3.DDPG, "td3": sb3.TD3}[w.algo]
            model = cls("MlpPolicy", env, action_noise=noise, **common)
    _, seconds = _timed(lambda: model.learn(total_timesteps=steps))

    def act(obs: np.ndarray) -> np.ndarray:
        return model.predict(obs, deterministic=True)[0]

    return Trained(model.num_timesteps, model._n_updates, seconds, act, sb3.__version__)


# --- CleanRL-style single-file scripts -------------------------------------------------------
def run_cleanrl(w: Workload, steps: int, seed: int, threads: int, device: str) -> Trained:
    s = w.settings
    if isinstance(s, DQNSettings):
        import cleanrl_dqn as script

        args: Any = script.Args(
            env_id=s.env_id, seed=seed, total_timesteps=steps, hidden=s.hidden, learning_rate=s.lr,
            buffer_size=s.buffer_size, gamma=s.gamma, target_network_frequency=s.target_every,
            batch_size=s.batch_size, start_e=s.eps_start, end_e=s.eps_end, exploration_fraction=s.eps_fraction,
            learning_starts=s.learning_starts, train_frequency=s.train_every, gradient_steps=s.gradient_steps,
            max_grad_norm=s.max_grad_norm, device=device,
        )
        (net, stats), seconds = _timed(lambda: script.train(args))
        act = _torch_act(lambda x: net(x).argmax(dim=1), device)
    else:
        if w.algo == "sac":
            raise RuntimeError("the CleanRL-style scripts of this benchmark have no SAC (bench/cleanrl_ddpg.py: DDPG and TD3)")
        import cleanrl_ddpg as script

        td3 = w.algo == "td3"
        args = script.Args(
            env_id=s.env_id, seed=seed, total_timesteps=steps, hidden=s.hidden, learning_rate=s.lr,
            buffer_size=s.buffer_size, gamma=s.gamma, tau=s.tau, batch_size=s.batch_size,
            exploration_noise=s.action_noise, learning_starts=s.learning_starts, policy_frequency=2 if td3 else 1,
            train_frequency=s.train_every, gradient_steps=s.gradient_steps, td3=td3, device=device,
        )
        (net, stats), seconds = _timed(lambda: script.train(args))
        act = _torch_act(net, device)
    return Trained(stats["env_steps"], stats["updates"], seconds, act, library_version("cleanrl"))


# --- Tianshou --------------------------------------------------------------------------------
def run_tianshou(w: Workload, steps: int, seed: int, threads: int, device: str) -> Trained:
    """Tianshou's off-policy trainer (no test collector), after ``learning_starts`` random steps
    collected by its collector: the trainer itself has no warm-up setting."""
    _cpu_only("Tianshou", device)
    _dqn_or_ddpg("Tianshou", w)
    import tianshou
    from tianshou.algorithm.optim import AdamOptimizerFactory
    from tianshou.data import Collector, VectorReplayBuffer
    from tianshou.env import DummyVectorEnv
    from tianshou.trainer import OffPolicyTrainerParams
    from tianshou.utils.net.common import Net

    s = w.settings
    torch.manual_seed(seed)
    np.random.seed(seed)
    envs = DummyVectorEnv([lambda: gym.make(s.env_id)])
    envs.seed(seed)
    space = envs.get_env_attr("action_space")[0]
    obs_dim = int(np.prod(envs.get_env_attr("observation_space")[0].shape))
    training_fn: Callable[[int, int], None] | None = None
    if isinstance(s, DQNSettings):
        from tianshou.algorithm import DQN
        from tianshou.algorithm.modelfree.dqn import DiscreteQLearningPolicy

        class ClippedDQN(DQN):
            """Tianshou's DQN with the gradient-norm clipping the other libraries apply."""

            def _create_policy_optimizer(self, optim):  # type: ignore[no-untyped-def]
                return self._create_optimizer(self.policy, optim, max_grad_norm=s.max_grad_norm)

        net = Net(state_shape=obs_dim, action_shape=int(space.n), hidden_sizes=list(s.hidden))
        policy: Any = DiscreteQLearningPolicy(model=net, action_space=space, eps_training=s.eps_start, eps_inference=0.0)
        algorithm: Any = ClippedDQN(policy=policy, optim=AdamOptimizerFactory(lr=s.lr), gamma=s.gamma,
                                    target_update_freq=s.target_every_updates, is_double=False, huber_loss_delta=1.0)

        def training_fn(epoch: int, env_step: int) -> None:
            policy.set_eps_training(s.epsilon(env_step + s.learning_starts, steps))

        def act(obs: np.ndarray) -> np.ndarray:
            with torch.no_grad():
                return net(obs)[0].argmax(dim=1).numpy()
    else:
        from tianshou.algorithm import DDPG
        from tianshou.algorithm.modelfree.ddpg import ContinuousDeterministicPolicy
        from tianshou.exploration import GaussianNoise
        from tianshou.utils.net.continuous import ContinuousActorDeterministic, ContinuousCritic

        act_dim = int(np.prod(space.shape))
        actor = ContinuousActorDeterministic(preprocess_net=Net(state_shape=obs_dim, hidden_sizes=list(s.hidden)),
                                             action_shape=space.shape, max_action=1.0)
        critic = ContinuousCritic(preprocess_net=Net(state_shape=obs_dim, action_shape=act_dim,
                                                     hidden_sizes=list(s.hidden), concat=True))
        # action_scaling: the actor acts in [-1, 1], so the noise std is in half-range units as elsewhere
        policy = ContinuousDeterministicPolicy(actor=actor, exploration_noise=GaussianNoise(sigma=s.action_noise),
                                               action_space=space, action_scaling=True, action_bound_method="clip")
        algorithm = DDPG(policy=policy, policy_optim=AdamOptimizerFactory(lr=s.lr), critic=critic,
                         critic_optim=AdamOptimizerFactory(lr=s.lr), tau=s.tau, gamma=s.gamma)

        def act(obs: np.ndarray) -> np.ndarray:
            with torch.no_grad():
                return policy.map_action(actor(obs)[0].numpy())

    collector = Collector(algorithm, envs, VectorReplayBuffer(s.buffer_size, 1), exploration_noise=True)
    collector.reset()
    params = OffPolicyTrainerParams(
        training_collector=collector, test_collector=None, max_epochs=1, epoch_num_steps=steps - s.learning_starts,
        collection_step_num_env_steps=s.train_every, update_step_num_gradient_steps_per_sample=1.0 / s.train_every,
        batch_size=s.batch_size, training_fn=training_fn, logger=None, verbose=False, show_progress=False,
    )

    def train() -> Any:
        collector.collect(n_step=s.learning_starts, random=True)
        return algorithm.create_trainer(params).run(reset_collectors=False)

    stats, seconds = _timed(train)
    # train_step is the collector's count, the random warm-up steps included
    return Trained(stats.train_step, stats.update_step, seconds, act, tianshou.__version__)


# --- TorchRL ---------------------------------------------------------------------------------
def run_torchrl(w: Workload, steps: int, seed: int, threads: int, device: str) -> Trained:
    """TorchRL's collector, replay buffer, loss module and target updater, in the loop of its own
    examples (sota-implementations), with ``train_every`` frames per collector batch."""
    _cpu_only("TorchRL", device)
    _dqn_or_ddpg("TorchRL", w)
    import torchrl
    from tensordict import TensorDict
    from torchrl.collectors import Collector
    from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
    from torchrl.envs.libs.gym import GymEnv, set_gym_backend
    from torchrl.modules import MLP

    s = w.settings
    torch.manual_seed(seed)
    with set_gym_backend("gymnasium"):
        env = GymEnv(s.env_id, device="cpu")
    env.set_seed(seed)
    obs_dim = env.observation_spec["observation"].shape[-1]
    action_spec = env.action_spec_unbatched if hasattr(env, "action_spec_unbatched") else env.action_spec
    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(s.buffer_size), batch_size=s.batch_size)
    updates = 0
    if isinstance(s, DQNSettings):
        from tensordict.nn import TensorDictSequential
        from torchrl.data import Composite
        from torchrl.modules import EGreedyModule, QValueActor
        from torchrl.objectives import DQNLoss, HardUpdate

        net = MLP(in_features=obs_dim, out_features=action_spec.space.n, num_cells=list(s.hidden),
                  activation_class=torch.nn.ReLU)
        model = QValueActor(module=net, spec=Composite(action=action_spec), in_keys=["observation"])
        greedy = EGreedyModule(spec=action_spec, eps_init=s.eps_start, eps_end=s.eps_end,
                               annealing_num_steps=s.eps_decay_steps(steps))
        explore: Any = TensorDictSequential(model, greedy)
        loss = DQNLoss(model, loss_function="smooth_l1", delay_value=True, double_dqn=False, action_space=action_spec)
        loss.make_value_estimator(gamma=s.gamma)
        # HardUpdate copies when its counter, counting 0..interval, reaches the interval: a period of interval + 1
        target = HardUpdate(loss, value_network_update_interval=s.target_every_updates - 1)
        params = list(loss.parameters())
        optimizer = torch.optim.Adam(params, lr=s.lr)

        def update(batch: TensorDict) -> None:
            value = loss(batch)["loss"]
            optimizer.zero_grad()
            value.backward()
            torch.nn.utils.clip_grad_norm_(params, s.max_grad_norm)
            optimizer.step()
            target.step()

        def anneal(frames: int) -> None:
            greedy.step(frames)

        act = _torch_act(lambda x: net(x).argmax(dim=1))
    else:
        from tensordict.nn import TensorDictModule, TensorDictSequential
        from torchrl.modules import AdditiveGaussianModule, TanhModule, ValueOperator
        from torchrl.objectives import DDPGLoss, SoftUpdate

        act_dim = action_spec.shape[-1]
        actor_net = MLP(in_features=obs_dim, out_features=act_dim, num_cells=list(s.hidden), activation_class=torch.nn.ReLU)
        actor = TensorDictSequential(
            TensorDictModule(actor_net, in_keys=["observation"], out_keys=["param"]),
            TanhModule(in_keys=["param"], out_keys=["action"], spec=action_spec),
        )
        critic = ValueOperator(MLP(in_features=obs_dim + act_dim, out_features=1, num_cells=list(s.hidden),
                                   activation_class=torch.nn.ReLU), in_keys=["observation", "action"])
        half_range = float((action_spec.space.high - action_spec.space.low).max()) / 2
        explore = TensorDictSequential(actor, AdditiveGaussianModule(
            spec=action_spec, sigma_init=1.0, sigma_end=1.0, mean=0.0, std=s.action_noise * half_range))
        loss = DDPGLoss(actor_network=actor, value_network=critic, loss_function="l2", delay_actor=True, delay_value=True)
        loss.make_value_estimator(gamma=s.gamma)
        target = SoftUpdate(loss, tau=s.tau)
        opt_actor = torch.optim.Adam(list(loss.actor_network_params.flatten_keys().values()), lr=s.lr)
        opt_critic = torch.optim.Adam(list(loss.value_network_params.flatten_keys().values()), lr=s.lr)

        def update(batch: TensorDict) -> None:
            critic_loss, *_ = loss.loss_value(batch)
            opt_critic.zero_grad()
            critic_loss.backward()
            opt_critic.step()
            actor_loss, *_ = loss.loss_actor(batch)
            opt_actor.zero_grad()
            actor_loss.backward()
            opt_actor.step()
            target.step()

        def anneal(frames: int) -> None:
            pass

        def act(obs: np.ndarray) -> np.ndarray:
            with torch.no_grad():
                td = actor(TensorDict(observation=torch.as_tensor(obs, dtype=torch.float32), batch_size=[len(obs)]))
            return td["action"].numpy()

    # The policy needs no env transform (no recurrent state): keep the env as it is, without the warning.
    quiet = {"auto_register_policy_transforms": False} if "auto_register_policy_transforms" in _parameters(Collector) else {}
    collector = Collector(env, explore, frames_per_batch=s.train_every, total_frames=steps,
                          init_random_frames=s.learning_starts, device="cpu", **quiet)

    def train() -> int:
        nonlocal updates
        frames = 0
        for data in collector:
            data = data.reshape(-1)
            buffer.extend(data)
            frames += data.numel()
            anneal(data.numel())
            if frames > s.learning_starts:
                update(buffer.sample())
                updates += 1
        collector.shutdown()
        return frames

    frames, seconds = _timed(train)
    return Trained(frames, updates, seconds, act, torchrl.__version__)


RUNNERS: dict[str, Callable[[Workload, int, int, int, str], Trained]] = {
    "hetrl": run_hetrl,
    "hetrl-auto": run_hetrl_auto,
    "hetrl-baseline": run_hetrl,  # another checkout's src (peers.py --baseline-src): before and after a change
    "sb3": run_sb3,
    "cleanrl": run_cleanrl,
    "tianshou": run_tianshou,
    "torchrl": run_torchrl,
}


def settings_rows(w: Workload) -> dict[str, Any]:
    """The workload's settings as a flat mapping (for the report)."""
    return asdict(w.settings)
