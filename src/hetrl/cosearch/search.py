"""The search: a supernet trained on a teacher's states to match its Q-values, its architecture
logits pushed towards candidates that are cheap on the hardware.

Loss (per batch, the architecture sampled as :class:`~hetrl.cosearch.supernet.SuperNet` does)::

    distill_weight * L_distill + td_weight * L_td + hardware_weight * cost(probs) / cost(probs at start)

- ``L_distill`` (:func:`distillation_loss`): ``mse`` (default), the mean squared error between the
  student's and the teacher's Q-values on every action, divided by the variance of the teacher's
  Q-values over its data (so 1 is what predicting their mean scores, whatever the game's reward
  scale); or ``kl``, ``T^2 KL(softmax(Q_teacher / T) || softmax(Q_student / T))`` (policy
  distillation, Rusu et al. 2016; the ``T^2`` of Hinton et al. 2015 keeps the gradient's size
  comparable across ``T``). MSE is the default because what is derived is a Q-network: matching
  the values, not only their order, ranks the candidates by how well they represent the teacher's
  Q-function, the thing DQN retraining learns, and keeps the student's values on the TD loss's
  scale. Distillation is what makes the search work in RL (A3C-S, Fu et al. 2021, arXiv
  2106.06577): a supernet trained on the TD loss alone chases its own moving targets while its
  architecture changes under it.
- ``L_td`` (off by default): DQN's Huber loss on the teacher's transitions, the target
  ``r + discount * max_a Q_student(s', a)`` computed (without gradient) by the same sampled
  architecture: the RL loss beside distillation, with the supernet as its own target network.
- The hardware term: any ``cost(probs) -> scalar`` (:mod:`hetrl.cosearch.cost`: measured latency,
  counted MACs, the FPGA model) of the per-layer candidate probabilities ``softmax(alpha)``, its
  expectation under them (ProxylessNAS, Cai et al. 2019), divided by its value at the start (uniform
  probabilities), so that ``hardware_weight`` (lambda) is unit-free, like the relative MSE: at 0.1,
  cutting the expected cost by a tenth of its starting value is worth 0.01 of the teacher's
  Q-variance left unexplained. It reaches the logits only. A cost with parameters of its own (the
  FPGA model's accelerator in the joint search, :class:`hetrl.cosearch.accelerator.JointSearchCost`)
  adds its budget penalty to the term (``penalty(probs)``), and its parameters (``arch_parameters()``)
  step beside the logits (Adam, ``accelerator_lr``) on the hardware term alone, whatever lambda: the
  accelerator is searched for the agent the search holds, the agent for that accelerator.

Modes: ``one-level`` (weights and logits stepped on the same batch, one backward pass) and
``bi-level`` (DARTS, Liu et al. 2019, first-order: the teacher's data split in two; each step the
weights take a step on a train-split batch, then the logits on a validation-split batch). During
the first ``warmup`` share of the steps only the weights learn (the architecture sampled uniformly),
as FBNet and ProxylessNAS warm their supernets up before searching. The Gumbel-softmax temperature
falls geometrically from ``tau_start`` (FBNet's 5) to ``tau_end``; with hard samples it sets how
soft the gradient through the choice is, not how the choice is drawn.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F

from hetrl.algos.base import adam
from hetrl.algos.distillation import DISTILL, distillation_loss
from hetrl.cosearch.cost import Cost, cost_label, cost_unit
from hetrl.cosearch.options import MODES
from hetrl.cosearch.supernet import TAU_START, SuperNet
from hetrl.cosearch.teacher import TeacherData
from hetrl.nets.searched import Architecture, SearchedQNetwork


@dataclass
class SearchConfig:
    steps: int = 2_000
    batch_size: int = 64
    lr: float = 1e-3  # supernet weights (Adam)
    alpha_lr: float = 1e-2  # architecture logits (Adam; FBNet's rate)
    accelerator_lr: float = 5e-2  # a cost's own logits (the joint FPGA search's accelerator; Adam): a smooth, noise-free loss
    mode: str = "one-level"  # or bi-level
    distill: str = "mse"  # or kl
    distill_temperature: float = 1.0  # kl: T in softmax(Q / T)
    distill_weight: float = 1.0
    td_weight: float = 0.0
    hardware_weight: float = 0.0  # lambda, on the cost divided by its value at the start
    tau_start: float = TAU_START
    tau_end: float = 0.1
    warmup: float = 0.2  # share of the steps that train the weights only
    val_fraction: float = 0.5  # bi-level: the teacher's data kept for the logits' steps
    max_grad_norm: float | None = 10.0  # on the weights' gradient
    seed: int = 0
    device: str = "cpu"
    log_every: int = 50

    def validate(self) -> list[str]:
        problems = []
        if self.mode not in MODES:
            problems.append(f"mode must be one of {', '.join(MODES)} (got {self.mode!r})")
        if self.distill not in DISTILL:
            problems.append(f"distill must be one of {', '.join(DISTILL)} (got {self.distill!r})")
        if self.steps < 1 or self.batch_size < 1 or self.log_every < 1:
            problems.append("steps, batch_size and log_every must be >= 1")
        if min(self.distill_weight, self.td_weight, self.hardware_weight) < 0:
            problems.append("the loss weights must be >= 0")
        if self.distill_weight == 0 and self.td_weight == 0:
            problems.append("distill_weight or td_weight must be > 0: the supernet needs something to learn")
        if not 0 < self.tau_end <= self.tau_start:
            problems.append(f"the temperature falls: 0 < tau_end <= tau_start (got {self.tau_start} -> {self.tau_end})")
        if not 0 <= self.warmup < 1 or not 0 < self.val_fraction < 1:
            problems.append("warmup must be in [0, 1) and val_fraction in (0, 1)")
        return problems

    def temperature(self, step: int) -> float:
        """The Gumbel-softmax temperature at ``step`` (0-based): geometric from tau_start to tau_end."""
        return self.tau_start * (self.tau_end / self.tau_start) ** (step / max(1, self.steps - 1))


class Searcher:
    """The optimisers of one search and its step: weights (Adam, ``lr``) and logits (Adam, ``alpha_lr``)."""

    def __init__(self, supernet: SuperNet, config: SearchConfig, cost: Cost | None = None, q_variance: float = 1.0) -> None:
        if problems := config.validate():
            raise ValueError("; ".join(problems))
        self.net, self.config, self.cost, self.q_variance = supernet, config, cost, q_variance
        self.weight_optimizer = adam(supernet.weights(), config.lr)
        self.alpha_optimizer = adam(supernet.arch_parameters(), config.alpha_lr)
        # a cost with parameters of its own (the FPGA accelerator's, searched jointly): stepped beside the alphas
        self.hardware_parameters: list[torch.nn.Parameter] = list(cost.arch_parameters()) if hasattr(cost, "arch_parameters") else []
        self.hardware_optimizer = adam(self.hardware_parameters, config.accelerator_lr) if self.hardware_parameters else None
        with torch.no_grad():
            start = float(cost(supernet.probs())) if cost is not None else 1.0
        if cost is not None and not start > 0:
            raise ValueError(f"the hardware cost at the start is {start}; it must be > 0 (it scales lambda)")
        self.cost_scale = start

    def task_loss(self, batch: dict[str, torch.Tensor], gates: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        """Distillation, plus the TD loss where ``td_weight`` > 0, of the architecture ``gates``."""
        cfg = self.config
        q = self.net(batch["obs"], gates)
        distill = distillation_loss(q, batch["q"], cfg.distill, cfg.distill_temperature, self.q_variance)
        loss, parts = cfg.distill_weight * distill, {"distill": distill.item()}
        if cfg.td_weight > 0:
            with torch.no_grad():
                next_q = self.net(batch["next_obs"], [g.detach() for g in gates]).max(dim=1).values
                target = batch["rewards"] + batch["discounts"] * next_q
            td = F.huber_loss(q.gather(1, batch["actions"].unsqueeze(1)).squeeze(1), target)
            loss = loss + cfg.td_weight * td
            parts["td"] = td.item()
        return loss, parts

    def hardware_loss(self, parts: dict[str, float] | None = None) -> torch.Tensor:
        """The expected cost under the current probabilities over its value at the start, plus the
        cost's own budget penalty where it has one (the joint FPGA search's); recorded in ``parts``."""
        probs = self.net.probs()
        hardware = self.cost(probs) / self.cost_scale
        if hasattr(self.cost, "penalty"):
            penalty = self.cost.penalty(probs)
            hardware = hardware + penalty
            if parts is not None:
                parts["budget"] = penalty.item()
        if parts is not None:
            parts["hardware"] = hardware.item()
        return hardware

    def step(self, batch: dict[str, torch.Tensor], val_batch: dict[str, torch.Tensor] | None = None,
             search: bool = True) -> dict[str, float]:
        """One step on ``batch`` (bi-level: the logits' on ``val_batch``); ``search=False``: the
        weights only (warm-up)."""
        cfg, net = self.config, self.net
        net.train()
        loss, parts = self.task_loss(batch, net.sample())
        joint = search and cfg.mode == "one-level"  # the logits step on this batch too
        if joint:
            term, accelerator = self._hardware_terms(parts)
            loss = loss + term
        self.weight_optimizer.zero_grad(set_to_none=True)
        self.alpha_optimizer.zero_grad(set_to_none=True)
        if joint:
            self._hardware_gradients(accelerator)
        loss.backward(inputs=net.weights() + (net.arch_parameters() if joint else []))
        if cfg.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(net.weights(), cfg.max_grad_norm)
        self.weight_optimizer.step()
        if joint:
            self._step_architecture()
        elif search:  # bi-level: the logits on held-out data, the weights just stepped (first-order DARTS)
            if val_batch is None:
                raise ValueError("a bi-level step needs a validation batch")
            val_loss, val_parts = self.task_loss(val_batch, net.sample())
            term, accelerator = self._hardware_terms(val_parts)
            self._hardware_gradients(accelerator)
            (val_loss + term).backward(inputs=net.arch_parameters())
            self._step_architecture()
            parts.update({k if k in ("hardware", "budget") else f"val_{k}": v for k, v in val_parts.items()})
        return parts

    def _hardware_terms(self, parts: dict[str, float]) -> tuple[torch.Tensor | float, torch.Tensor | None]:
        """The agent's hardware term (lambda times :meth:`hardware_loss`), and the hardware loss
        itself where the cost has parameters of its own to learn from it (whatever lambda)."""
        if self.cost is None or (self.config.hardware_weight == 0 and not self.hardware_parameters):
            return 0.0, None
        hardware = self.hardware_loss(parts)
        term = self.config.hardware_weight * hardware if self.config.hardware_weight > 0 else 0.0
        return term, hardware if self.hardware_parameters else None

    def _hardware_gradients(self, hardware: torch.Tensor | None) -> None:
        """The cost's own parameters' gradients, of the hardware loss alone (before the agent's
        backward pass frees the graph the two share)."""
        if hardware is None:
            return
        grads = torch.autograd.grad(hardware, self.hardware_parameters, retain_graph=True, allow_unused=True)
        for parameter, grad in zip(self.hardware_parameters, grads, strict=True):
            parameter.grad = torch.zeros_like(parameter) if grad is None else grad

    def _step_architecture(self) -> None:
        self.alpha_optimizer.step()
        if self.hardware_optimizer is not None:
            self.hardware_optimizer.step()


@dataclass
class SearchResult:
    """The derived architecture and network (the supernet's weights), the final probabilities, and
    how the search went (``history``: one row per ``log_every`` steps)."""

    architecture: Architecture
    network: SearchedQNetwork
    choice: list[int]
    probs: list[list[float]]
    history: list[dict[str, Any]]
    config: SearchConfig
    cost: float | None = None  # the derived architecture's (at its one-hot probabilities; a joint FPGA search: its accelerator's)
    expected_cost: float | None = None  # under the final probabilities
    cost_label: str = ""
    cost_unit: str = ""
    distill_loss: float | None = None  # the derived network's, on the teacher's data (bi-level: the validation split)

    def metadata(self) -> dict[str, Any]:
        """How the architecture was found (JSON-able; saved beside it)."""
        return {"search": asdict(self.config), "choice": self.choice, "probs": self.probs, "cost": self.cost,
                "expected_cost": self.expected_cost, "cost_label": self.cost_label, "cost_unit": self.cost_unit,
                "distill_loss": self.distill_loss}


def search(supernet: SuperNet, data: TeacherData, config: SearchConfig, cost: Cost | None = None,
           progress: Callable[[int, dict[str, float]], None] | None = None) -> SearchResult:
    """Train ``supernet`` (in place) on the teacher's ``data`` for ``config.steps`` steps and derive
    its argmax architecture. Seeded by ``config.seed`` (torch's global generator is restored after)."""
    cfg = config
    if problems := cfg.validate():
        raise ValueError("; ".join(problems))
    device = torch.device(cfg.device)
    supernet.to(device)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(cfg.seed)
        generator = torch.Generator().manual_seed(cfg.seed)
        train, val = data.split(1 - cfg.val_fraction, generator) if cfg.mode == "bi-level" else (data, data)
        searcher = Searcher(supernet, cfg, cost, data.q_variance)
        warmup = int(cfg.warmup * cfg.steps)
        history: list[dict[str, Any]] = []

        def draw(part: TeacherData) -> dict[str, torch.Tensor]:
            return part.take(torch.randint(len(part), (cfg.batch_size,), generator=generator), device)

        for step in range(cfg.steps):
            supernet.tau = cfg.temperature(step)
            parts = searcher.step(draw(train), draw(val) if cfg.mode == "bi-level" else None, search=step >= warmup)
            if (step + 1) % cfg.log_every == 0 or step + 1 == cfg.steps:
                history.append(_row(step + 1, supernet, parts, cost))
            if progress is not None:
                progress(step + 1, parts)
    return _result(supernet, val, cfg, cost, history, data.q_variance)


def _row(step: int, supernet: SuperNet, parts: dict[str, float], cost: Cost | None) -> dict[str, Any]:
    with torch.no_grad():
        probs = supernet.probs()
        row = {"step": step, "tau": supernet.tau, **parts, "probs": [p.tolist() for p in probs]}
        if cost is not None:
            row["expected_cost"] = float(cost(probs))
    return row


def _result(supernet: SuperNet, data: TeacherData, cfg: SearchConfig, cost: Cost | None,
            history: list[dict[str, Any]], q_variance: float) -> SearchResult:
    choice = supernet.choice()
    network = supernet.derive(choice).eval()
    with torch.no_grad():
        probs = supernet.probs()
        held = data.take(torch.arange(min(len(data), 4096)), cfg.device)
        loss = float(distillation_loss(network(held["obs"]), held["q"], cfg.distill, cfg.distill_temperature, q_variance))
        if cost is None:
            chosen = None
        elif hasattr(cost, "derived_cost"):  # the joint FPGA search: the derived accelerator's exact interval
            chosen = float(cost.derived_cost(choice))
        else:
            chosen = float(cost(supernet.gates(choice)))
        expected = float(cost(probs)) if cost is not None else None
    return SearchResult(network.architecture, network, choice, [p.tolist() for p in probs], history, cfg, chosen,
                        expected, cost_label(cost), cost_unit(cost), loss)
