"""Learn / triton: DQN's update for MLP Q-networks as 2L + 2 hand-written Triton kernels, replayed as
one CUDA graph (a hard target copy, when due, is a second one).

A captured graph removes the host's launch cost, but each kernel still costs the GPU a few
microseconds, and torch's update, even compiled, is some 50 kernels for a two-hidden-layer
Q-network (docs/results.md). :mod:`hetrl.nets.triton_dqn` writes it in 8: one per layer forward for
both networks at once, one for the TD targets and loss, one per layer backward, one for clipping,
Adam and Polyak averaging. The parameters, gradients and Adam's moments are flat vectors
(:class:`hetrl.nets.fused_mlp.FlatMLP`'s layout, as Learn/numba keeps them on the host) whose views
are the torch modules' parameters, so acting, evaluation and checkpoints see the same numbers. The
update computes what ``DQNLearner.update`` computes, to float32 rounding, and checkpoints keep its
format: a run resumes on any DQN learner.

The graph, its static inputs and the staging of host batches are Learn/cudagraph's
(:class:`~hetrl.primitives.learn_cudagraph.GraphedLearner`, given this learner to capture). The
kernels compile at the first update, in its warm-up; a machine where Triton cannot compile them
(no C compiler for its launcher) raises :class:`CannotRunHere`, so the profiler leaves the backend out.

It covers what Learn/numba covers: DQN with a ReLU MLP Q-network, no dueling head, no early exits,
no teacher. The primitive runs on CUDA devices only; the learner alone also runs on CPU tensors
where Triton's interpreter is on (``TRITON_INTERPRET=1``): the tests' check on a machine without a GPU.
"""

from __future__ import annotations

import copy
import importlib.util
import math
from typing import Any

import torch

from hetrl.algos.base import Algorithm, TorchLearner, seeded_init
from hetrl.algos.dqn import DQN, DQNCheckpoint, DQNConfig, flat_mlp_refusal
from hetrl.errors import CannotRunHere
from hetrl.nets import QNetwork
from hetrl.nets.fused_mlp import BETAS, EPS, FlatAdam, FlatMLP
from hetrl.primitives.learn_cudagraph import LearnCudagraph
from hetrl.protocol import implements

ROWS_PER_PROGRAM = 64  # td_loss
ADAM_BLOCK = 1024


class DeviceFlatAdam(FlatAdam):
    """FlatAdam's moments as torch vectors on the learner's device, its step count a device integer
    that the update's kernels advance (read back only for a checkpoint)."""

    def __init__(self, size: int, views: Any, lr: float, device: torch.device) -> None:
        self.count = torch.zeros(1, dtype=torch.int32, device=device)
        super().__init__(0, views, lr)
        self.m, self.v = torch.zeros(size, device=device), torch.zeros(size, device=device)

    @property  # type: ignore[override]
    def steps(self) -> int:
        return int(self.count.item())

    @steps.setter
    def steps(self, value: int) -> None:
        self.count.fill_(int(value))


class DQNTritonLearner(DQNCheckpoint, TorchLearner):
    """DQN's learner whose ``step`` launches :mod:`hetrl.nets.triton_dqn`'s kernels on flat vectors."""

    # the products' tiles (rows, columns, reduction; tl.dot takes 16 or more on each side) and warps
    # per program, one choice for every layer: at these widths the kernels cost about their launch.
    # bench/cudagraph_update.py --triton-tiles measures others
    tiles: tuple[int, int, int, int] = (32, 64, 32, 4)

    def __init__(self, algo: DQN, device: torch.device, seed: int) -> None:
        cfg: DQNConfig = algo.config  # LearnTriton.unsupported has ruled out a dueling head
        with seeded_init(seed):  # the same initial weights as the torch learner for this seed
            self.q: QNetwork = algo.make_networks()["q"]
        self.q_target = copy.deepcopy(self.q).requires_grad_(False)
        self.device = torch.device(device)
        self.layout = layout = FlatMLP(self.q.trunk)
        n = layout.size
        self.flat = torch.zeros(2 * n, device=self.device)  # the online network's parameters, then the target's
        self.params, self.target = self.flat[:n], self.flat[n:]
        layout.adopt(self.params)
        FlatMLP(self.q_target.trunk).adopt(self.target)
        self.grads = torch.zeros(n, device=self.device)
        self.optimizer = DeviceFlatAdam(n, layout.views, cfg.lr, self.device)
        self.cfg, self.updates = cfg, 0
        self.dims = [int(d) for d in layout.dims]
        self.w_off, self.b_off = [int(o) for o in layout.w_off], [int(o) for o in layout.b_off]
        self.bm, self.bn, self.bk, self.warps = self.tiles
        self.n_dw = [math.ceil(self.dims[l + 1] / self.bm) * math.ceil(self.dims[l] / self.bn) for l in range(len(self.dims) - 1)]
        self.part_off = [sum(self.n_dw[:l]) for l in range(len(self.n_dw))]
        self.parts = torch.zeros(max(1, sum(self.n_dw)), device=self.device)  # each weight tile's sum of squares
        self.loss = torch.zeros((), device=self.device)
        self._batch = -1
        self._ready = False  # whether the kernels ran once (compiled) in this process
        from hetrl.nets import triton_dqn  # imports Triton: only here

        self.kernels = triton_dqn

    @property
    def policy_network(self) -> QNetwork:
        return self.q

    def optimizers(self) -> list[torch.optim.Optimizer]:
        return []  # Adam runs inside the kernels (DeviceFlatAdam holds its state)

    def _scratch(self, batch: int) -> None:
        """Activation and gradient buffers for a batch size, made once (a run's batch size does not change)."""
        if batch == self._batch:
            return
        self._batch = batch
        self.online_rows = 2 * batch if self.cfg.double else batch
        rows, dims, dev = self.online_rows + batch, self.dims, self.device
        self.acts = [torch.empty(rows, d, device=dev) for d in dims[1:]]  # every layer's output, both networks
        self.grads_out = [torch.empty(batch, d, device=dev) for d in dims[1:]]  # dLoss/d(each layer's output)
        self.td = torch.empty(batch, device=dev)
        self.terms = torch.empty(batch, device=dev)

    def step(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        if self._ready:
            self._launch(batch)
        else:
            try:  # the first launch compiles every kernel
                self._launch(batch)
            except Exception as exc:  # noqa: BLE001 - Triton raises several kinds (CompilationError, RuntimeError, ...)
                reason = (str(exc).strip().splitlines() or [""])[0][:300]
                raise CannotRunHere(f"Triton could not compile or launch the DQN update's kernels ({type(exc).__name__}: "
                                    f"{reason}); use the cudagraph learner (backend cudagraph for learn in a plan.json)") from exc
            self._ready = True
        return {"td_errors": self.td, "loss": self.loss}

    def _launch(self, batch: dict[str, torch.Tensor]) -> None:
        from triton import next_power_of_2 as pow2  # imported with the kernels (__init__)

        cfg, k, dims = self.cfg, self.kernels, self.dims
        BM, BN, BK, warps = self.bm, self.bn, self.bk, self.warps  # noqa: N806 - the kernels' names for them
        size = self.layout.size
        obs, next_obs = batch["obs"], batch["next_obs"]
        b = len(batch["actions"])
        self._scratch(b)
        layers = len(dims) - 1
        x = obs.reshape(b, -1)
        x_next = next_obs.reshape(b, -1)
        rows = max(self.online_rows, b)
        for l in range(layers):
            grid = (math.ceil(rows / BM), math.ceil(dims[l + 1] / BN), 2)
            first = l == 0
            k.linear_forward[grid](x if first else self.acts[l - 1], x_next, self.flat, self.acts[l], self.w_off[l],
                                   self.b_off[l], size, b, self.online_rows, dims[l], dims[l + 1],
                                   FIRST=first, RELU=l < layers - 1, BM=BM, BN=BN, BK=BK, num_warps=warps)
        k.td_loss[(math.ceil(b / ROWS_PER_PROGRAM),)](
            self.acts[-1], batch["actions"], batch["rewards"], batch["discounts"], batch["weights"], self.grads_out[-1],
            self.td, self.terms, self.optimizer.count, b, self.online_rows, dims[-1],
            DOUBLE=cfg.double, BR=ROWS_PER_PROGRAM, BA=max(2, pow2(dims[-1])))
        for l in range(layers - 1, -1, -1):
            h = x if l == 0 else self.acts[l - 1]  # its first b rows: the online network on obs
            below = l > 0
            n_dx = math.ceil(b / BM) * math.ceil(dims[l] / BN) if below else 0
            k.linear_backward[(self.n_dw[l] + n_dx,)](
                self.grads_out[l], h, self.flat, self.grads, self.grads_out[l - 1] if below else self.grads,
                self.parts, self.w_off[l], self.b_off[l], b, dims[l], dims[l + 1], self.n_dw[l], self.part_off[l],
                BM=BM, BN=BN, BK=BK, num_warps=warps)
        clip = cfg.max_grad_norm is not None
        k.clip_adam[(math.ceil(size / ADAM_BLOCK),)](
            self.flat, self.grads, self.optimizer.m, self.optimizer.v, self.optimizer.count, self.parts, self.terms,
            self.loss, size, size, len(self.parts), b, cfg.lr, BETAS[0], BETAS[1], math.log(BETAS[0]),
            math.log(BETAS[1]), EPS, cfg.max_grad_norm if clip else 0.0, cfg.tau,
            CLIP=clip, POLYAK=cfg.tau < 1.0, BLOCK=ADAM_BLOCK, PARTS=pow2(len(self.parts)), LB=pow2(b))

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        out = super().update(batch)
        return {k: v.clone() for k, v in out.items()}  # step returns its buffers, which the next update overwrites

    def periodic_due(self) -> bool:
        """A hard copy every ``target_update_every`` updates; Polyak averaging runs inside the update's Adam kernel."""
        return self.cfg.tau >= 1.0 and self.updates % self.cfg.target_update_every == 0

    def periodic(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        self.target.copy_(self.params)
        return {}


@implements(Learn="learn")
class LearnTriton(LearnCudagraph):
    """Learn on a CUDA device with DQN's update as a few Triton kernels, replayed as a CUDA graph."""

    backend = "triton"

    @classmethod
    def unsupported(cls, algorithm: Any) -> str | None:
        fix = "use the cudagraph or torch learner (backend cudagraph or torch for learn in a plan.json)"
        reason = flat_mlp_refusal(algorithm, "triton", fix)
        if reason is None and importlib.util.find_spec("triton") is None:
            return f"the triton learner needs Triton, which is not installed (pip install triton); {fix}"
        return reason

    @staticmethod
    def make_learner(algorithm: Algorithm, device: torch.device, seed: int) -> TorchLearner:
        return DQNTritonLearner(algorithm, device, seed)  # type: ignore[arg-type]
