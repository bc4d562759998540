"""MLP networks for DQN (Q-network, optionally dueling), DDPG/TD3 (actor, critic) and SAC (Gaussian actor,
its gSDE variant, critic)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import nn


def mlp(in_dim: int, hidden: Sequence[int], out_dim: int | None = None) -> nn.Sequential:
    """Linear+ReLU layers of sizes ``hidden``, then a linear output layer if ``out_dim`` is given."""
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [nn.Linear(in_dim, width), nn.ReLU()]
        in_dim = width
    if out_dim is not None:
        layers.append(nn.Linear(in_dim, out_dim))
    return nn.Sequential(*layers)


def numpy_params(module: nn.Module) -> dict[str, np.ndarray]:
    """A host copy of a module's parameters and buffers, keyed like its state_dict."""
    return {k: v.detach().cpu().numpy().copy() for k, v in module.state_dict().items()}


def numpy_sequential(params: Mapping[str, np.ndarray], prefix: str, n_layers: int, x: np.ndarray) -> np.ndarray:
    """numpy forward of an ``mlp(...)`` Sequential with ``n_layers`` modules (Linear at even index)."""
    for i in range(0, n_layers, 2):
        x = x @ params[f"{prefix}.{i}.weight"].T + params[f"{prefix}.{i}.bias"]
        if i + 1 < n_layers:
            np.maximum(x, 0, out=x)
    return x


class QNetwork(nn.Module):
    """Q-values for every discrete action. Dueling: Q = V + A - mean(A) (Wang et al. 2016)."""

    def __init__(self, obs_dim: int, n_actions: int, hidden: Sequence[int], dueling: bool = False) -> None:
        super().__init__()
        self.dueling = dueling
        if dueling:
            self.trunk = mlp(obs_dim, hidden)
            self.value = nn.Linear(hidden[-1], 1)
            self.advantage = nn.Linear(hidden[-1], n_actions)
        else:
            self.trunk = mlp(obs_dim, hidden, n_actions)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if obs.dim() > 2:  # image observations through an MLP (network=mlp): flattened, as float, as they are
            obs = obs.flatten(1).float()
        h = self.trunk(obs)
        if not self.dueling:
            return h
        a = self.advantage(h)
        return self.value(h) + a - a.mean(dim=1, keepdim=True)

    def forward_numpy(self, params: Mapping[str, np.ndarray], obs: np.ndarray) -> np.ndarray:
        if obs.ndim > 2:
            obs = obs.reshape(len(obs), -1).astype(np.float32)
        h = numpy_sequential(params, "trunk", len(self.trunk), obs)
        if not self.dueling:
            return h
        a = h @ params["advantage.weight"].T + params["advantage.bias"]
        v = h @ params["value.weight"].T + params["value.bias"]
        return v + a - a.mean(axis=1, keepdims=True)


class Actor(nn.Module):
    """Deterministic policy: tanh output scaled to the action bounds."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: Sequence[int], low: Sequence[float], high: Sequence[float]) -> None:
        super().__init__()
        self.net = mlp(obs_dim, hidden, action_dim)
        low_t, high_t = torch.tensor(low, dtype=torch.float32), torch.tensor(high, dtype=torch.float32)
        self.register_buffer("scale", (high_t - low_t) / 2)
        self.register_buffer("center", (high_t + low_t) / 2)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(obs)) * self.scale + self.center

    def forward_numpy(self, params: Mapping[str, np.ndarray], obs: np.ndarray) -> np.ndarray:
        return np.tanh(numpy_sequential(params, "net", len(self.net), obs)) * params["scale"] + params["center"]


LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0  # Stable-Baselines3's clamp of a squashed Gaussian's log std
TANH_EPS = 1e-6  # in log(1 - tanh(u)^2 + eps), as Stable-Baselines3 and CleanRL write the squashing correction


class GaussianActor(nn.Module):
    """SAC's stochastic policy: a diagonal Gaussian over pre-squash actions ``u``, squashed by tanh and
    scaled to the action bounds: ``a = tanh(u) * scale + center``, ``u = mu + std * eps``.

    ``forward`` (and ``forward_numpy``) return the mean and the clamped log std side by side, shape
    (N, 2 * action_dim): what an acting copy computes; the algorithm's action rules make actions of
    it with the executor's draws. The learner calls :meth:`sample` with noise it drew itself.
    """

    def __init__(self, obs_dim: int, action_dim: int, hidden: Sequence[int], low: Sequence[float], high: Sequence[float]) -> None:
        super().__init__()
        self.action_dim = action_dim
        # One output layer for mean and log std (its first and second half): the same function and
        # initial distribution as two heads, and a plain MLP, whose flat layout (FlatMLP) and
        # hand-written passes (Learn/blas's MLPPass) a host learner could take as they are.
        self.net = mlp(obs_dim, hidden, 2 * action_dim)
        low_t, high_t = torch.tensor(low, dtype=torch.float32), torch.tensor(high, dtype=torch.float32)
        self.register_buffer("scale", (high_t - low_t) / 2)
        self.register_buffer("center", (high_t + low_t) / 2)

    def _heads(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.net(obs)
        return out[:, :self.action_dim], out[:, self.action_dim:].clamp(LOG_STD_MIN, LOG_STD_MAX)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.cat(self._heads(obs), dim=1)

    def sample(self, obs: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised actions for standard normal ``noise`` (N, action_dim), and their log
        density (N,) as squashed actions in [-1, 1]: the Gaussian's at ``u`` less the tanh's log
        Jacobian. The affine map to the bounds would add the constant ``-sum(log scale)``; it is left
        out, as in Stable-Baselines3 (whose policy acts in [-1, 1]), so a target entropy means the same
        whatever the bounds."""
        mu, log_std = self._heads(obs)
        y = torch.tanh(mu + log_std.exp() * noise)
        gaussian = -0.5 * noise.square() - log_std - 0.5 * math.log(2 * math.pi)
        log_prob = (gaussian - torch.log(1 - y.square() + TANH_EPS)).sum(dim=1)
        return y * self.scale + self.center, log_prob

    def forward_numpy(self, params: Mapping[str, np.ndarray], obs: np.ndarray) -> np.ndarray:
        out = numpy_sequential(params, "net", len(self.net), obs)
        np.clip(out[:, self.action_dim:], LOG_STD_MIN, LOG_STD_MAX, out=out[:, self.action_dim:])
        return out


SDE_EPS = 1e-6  # Stable-Baselines3's epsilon of gSDE: in the variance and in expln


class SDEActor(nn.Module):
    """SAC's policy with generalized state-dependent exploration (gSDE; Raffin, Kober and Stulp 2022,
    "Smooth exploration for robotic reinforcement learning"), as Stable-Baselines3 writes it
    (``StateDependentNoiseDistribution`` with ``full_std``, features not learned through the noise).

    The pre-squash action is ``u = mu(s) + z(s) @ (sigma * E)``: ``z(s)`` the last hidden layer's
    features (detached in the noise), ``sigma`` a learned (features x actions) matrix of standard
    deviations (``exp(log_std)``, or ``expln`` with ``use_expln``), ``E`` a matrix of standard normals.
    While ``E`` is held, the noise is a smooth function of the state: an actor holds it for several env
    steps (``hetrl.algos.exploration.HeldDraws``); the learner draws one per update (as SB3 resets its
    noise every gradient step). Given ``s``, ``u`` is Gaussian with variance ``z(s)^2 @ sigma^2``,
    whose density the log probability uses. ``mu`` is clipped to [-2, 2] (SB3's ``clip_mean``).

    ``forward`` (and ``forward_numpy``) return ``mu`` and the noise's per-feature scales side by side,
    shape (N, A + F * A): columns A + f * A + a hold ``z_f(s) * sigma[f, a]``, so that an action rule
    makes the noise from them and a held ``E`` (flattened alike) without the actor's parameters.
    """

    CLIP_MEAN = 2.0

    def __init__(self, obs_dim: int, action_dim: int, hidden: Sequence[int], low: Sequence[float], high: Sequence[float],
                 log_std_init: float = -3.0, use_expln: bool = False) -> None:
        super().__init__()
        self.action_dim, self.features, self.use_expln = action_dim, hidden[-1], use_expln
        self.latent = mlp(obs_dim, hidden)
        self.mu = nn.Linear(hidden[-1], action_dim)
        self.log_std = nn.Parameter(torch.full((hidden[-1], action_dim), float(log_std_init)))
        low_t, high_t = torch.tensor(low, dtype=torch.float32), torch.tensor(high, dtype=torch.float32)
        self.register_buffer("scale", (high_t - low_t) / 2)
        self.register_buffer("center", (high_t + low_t) / 2)

    def std(self) -> torch.Tensor:
        """sigma: exp(log_std), or with ``use_expln`` exp below 0 and log1p(x) + 1 above (grows slowly)."""
        if not self.use_expln:
            return self.log_std.exp()
        below = self.log_std.exp() * (self.log_std <= 0)
        above = (torch.log1p(self.log_std * (self.log_std > 0) + SDE_EPS) + 1.0) * (self.log_std > 0)
        return below + above

    def _mean(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = self.latent(obs)
        return self.mu(z).clamp(-self.CLIP_MEAN, self.CLIP_MEAN), z

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        mu, z = self._mean(obs)
        return torch.cat([mu, (z.unsqueeze(2) * self.std()).flatten(1)], dim=1)

    def sample(self, obs: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised actions for one (features x actions) matrix of standard normals ``noise``
        shared by the batch, and their log density (N,) as squashed actions in [-1, 1]
        (:meth:`GaussianActor.sample` says why the map to the bounds is left out)."""
        mu, z = self._mean(obs)
        z, std = z.detach(), self.std()
        u = mu + z @ (std * noise)
        sigma = torch.sqrt(z.square() @ std.square() + SDE_EPS)
        gaussian = -0.5 * ((u - mu) / sigma).square() - sigma.log() - 0.5 * math.log(2 * math.pi)
        y = torch.tanh(u)
        log_prob = (gaussian - torch.log(1 - y.square() + TANH_EPS)).sum(dim=1)
        return y * self.scale + self.center, log_prob

    def forward_numpy(self, params: Mapping[str, np.ndarray], obs: np.ndarray) -> np.ndarray:
        z = numpy_sequential(params, "latent", len(self.latent), obs)
        mu = np.clip(z @ params["mu.weight"].T + params["mu.bias"], -self.CLIP_MEAN, self.CLIP_MEAN)
        log_std = params["log_std"]
        if self.use_expln:
            std = np.where(log_std <= 0, np.exp(np.minimum(log_std, 0)), np.log1p(np.maximum(log_std, 0) + SDE_EPS) + 1.0)
        else:
            std = np.exp(log_std)
        return np.concatenate([mu, (z[:, :, None] * std).reshape(len(z), -1)], axis=1).astype(np.float32, copy=False)


class Critic(nn.Module):
    """Q(s, a) for continuous actions; ``n`` independent heads (2 for TD3's twin critics)."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: Sequence[int], n: int = 1) -> None:
        super().__init__()
        self.heads = nn.ModuleList(mlp(obs_dim + action_dim, hidden, 1) for _ in range(n))

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> list[torch.Tensor]:
        x = torch.cat([obs, actions], dim=1)
        return [head(x).squeeze(1) for head in self.heads]
