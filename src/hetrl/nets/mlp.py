"""MLP networks for DQN (Q-network, optionally dueling) and DDPG/TD3 (actor, critic)."""

from __future__ import annotations

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


def _numpy_sequential(params: Mapping[str, np.ndarray], prefix: str, n_layers: int, x: np.ndarray) -> np.ndarray:
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
        h = _numpy_sequential(params, "trunk", len(self.trunk), obs)
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
        return np.tanh(_numpy_sequential(params, "net", len(self.net), obs)) * params["scale"] + params["center"]


class Critic(nn.Module):
    """Q(s, a) for continuous actions; ``n`` independent heads (2 for TD3's twin critics)."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: Sequence[int], n: int = 1) -> None:
        super().__init__()
        self.heads = nn.ModuleList(mlp(obs_dim + action_dim, hidden, 1) for _ in range(n))

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> list[torch.Tensor]:
        x = torch.cat([obs, actions], dim=1)
        return [head(x).squeeze(1) for head in self.heads]
