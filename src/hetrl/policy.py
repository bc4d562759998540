"""A trained policy to ship: load it from a run, act with it, export it.

    policy = hetrl.load("runs/dqn_CartPole-v1_s0_...")        # the run's newest checkpoint
    action = policy.predict(obs)                                # greedy; deterministic=False explores
    policy.export("policy.pt")                                  # TorchScript, or "policy.onnx" for ONNX

The policy is the algorithm's acting network with its greedy rule (DQN's argmax, DDPG's actor),
on the host, independent of where the run learned. An exported file holds the network and the
rule as one module that maps a batch of observations to actions, with the observation and
action spec beside it (``hetrl_spec``: a TorchScript extra file, ONNX metadata).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from hetrl.algos import Algorithm
from hetrl.errors import HetrlError, check_seed
from hetrl.files import atomic_path, write_file
from hetrl.nets.exits import ExitQNetwork
from hetrl.run.saved_network import load_network
from hetrl.training import host_forward

FORMATS = {".pt": "torchscript", ".onnx": "onnx"}


class GreedyModule(nn.Module):
    """The acting network and the algorithm's greedy rule as one module: observations -> actions."""

    def __init__(self, algo: Algorithm, network: nn.Module) -> None:
        super().__init__()
        self.network = network
        self._rule = algo.greedy_torch

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self._rule(self.network(obs))


class Policy:
    """The greedy (or exploring) policy of a checkpoint, acting on host arrays."""

    def __init__(self, algo: Algorithm, network: nn.Module, source: Path, seed: int = 0) -> None:
        self.algo, self.network, self.source = algo, network.eval().requires_grad_(False), source
        self.spec = algo.spec
        self._forward = host_forward(network)
        self._rng = np.random.default_rng(seed)

    def predict(self, obs: Any, deterministic: bool = True) -> np.ndarray:
        """Actions for one observation (returns one action) or a batch (returns a batch).
        ``deterministic=False`` explores as training did at its end (DQN: epsilon at its floor;
        DDPG/TD3: Gaussian noise at its scale)."""
        try:
            x = np.asarray(obs, dtype=self.spec.obs_dtype)
        except (TypeError, ValueError) as exc:
            raise HetrlError(f"predict: observations must be numbers ({self.spec.obs_dtype}, shape {self.spec.obs_shape} "
                             f"or a batch of them), not {type(obs).__name__} ({exc})") from None
        if x.dtype.kind == "f" and not np.isfinite(x).all():
            raise HetrlError("predict: the observations hold NaN or infinite values; a network's actions from them mean "
                             "nothing, so check what produced them")
        single = x.shape == self.spec.obs_shape
        if single:
            x = x[None]
        if x.shape[1:] != self.spec.obs_shape:
            raise HetrlError(f"predict: observations of shape {x.shape[1:]} given, the policy takes {self.spec.obs_shape}")
        out = self._forward(x)
        if deterministic:
            actions = self.algo.greedy_rule(out)
        else:
            explore, random_actions = self.algo.draw_exploration(self._rng, len(x))
            actions = self.algo.action_rule(out, explore, random_actions, self.algo.exploration(10**12))
        return actions[0] if single else actions

    def module(self) -> GreedyModule:
        """The greedy policy as a torch module (observations -> actions), on the host."""
        return GreedyModule(self.algo, self.network)

    def spec_dict(self) -> dict[str, Any]:
        """What an exported file says about its inputs and outputs."""
        return {"algo": self.algo.name, "env": self.spec.env_id, "checkpoint": self.source.name,
                "observation": {"shape": list(self.spec.obs_shape), "dtype": self.spec.obs_dtype},
                "action": {"shape": list(self.spec.action_shape), "dtype": self.spec.action_dtype,
                           **({"n": self.spec.n_actions} if self.spec.discrete else
                              {"low": list(self.spec.action_low), "high": list(self.spec.action_high)})},
                "hetrl_agent": asdict(self.algo.config)}

    def export(self, path: str | Path, format: str | None = None) -> Path:
        """Write the greedy policy as a self-contained file: TorchScript (``.pt``) or ONNX
        (``.onnx``; needs the ``onnx`` extra), with the observation and action spec inside."""
        path = Path(path)
        format = format or FORMATS.get(path.suffix.lower())
        if format not in FORMATS.values():
            raise HetrlError(f"cannot tell the export format of {path.name}; name it .pt (TorchScript) or .onnx, "
                             "or pass --format torchscript|onnx")
        if isinstance(self.network, ExitQNetwork):
            # tracing would freeze the exits the example input takes; ONNX has no early return either
            raise HetrlError("exporting an exit-dqn policy is not supported yet (its early exits are data-dependent "
                             "control flow); use hetrl.load(...).predict, which exits early")
        module = self.module()
        example = torch.zeros((1, *self.spec.obs_shape), dtype=getattr(torch, self.spec.obs_dtype))
        spec = json.dumps(self.spec_dict())
        if format == "torchscript":
            traced = torch.jit.trace(module, example)
            return write_file(path, lambda f: torch.jit.save(traced, f, _extra_files={"hetrl_spec.json": spec}))
        try:
            import onnx
            import onnxscript  # noqa: F401  torch's torch.export-based exporter writes through it
        except ImportError:
            raise HetrlError("ONNX export needs the onnx packages: pip install 'hetrl[onnx]'") from None
        batch = torch.export.Dim("batch")
        program = torch.onnx.export(module, (example,), input_names=["obs"], output_names=["actions"],
                                    dynamic_shapes=({0: batch},), dynamo=True, verbose=False)
        with atomic_path(path) as tmp:
            program.save(str(tmp))
            model = onnx.load(str(tmp))
            model.metadata_props.add(key="hetrl_spec", value=spec)
            onnx.save(model, str(tmp))
        return path


def load(run: str | Path, checkpoint: str | Path | None = None, seed: int = 0) -> Policy:
    """The policy of a run directory, or of a checkpoint file. ``checkpoint``: ``"best"``
    (checkpoints/best.pt, the best evaluation during training), ``"final"`` (the newest periodic
    checkpoint) or a file; by default the best where the run has one, else the final, as
    ``hetrl eval`` picks."""
    check_seed("seed", seed)
    algo, network, source = load_network(run, checkpoint)
    return Policy(algo, network, source, seed)
