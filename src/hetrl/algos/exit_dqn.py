"""Early-exit DQN (``exit-dqn``): DQN whose Q-network has side branches that may answer early
(RAPID-RL, Kosta et al. 2021; the network is :class:`hetrl.nets.exits.ExitQNetwork`).

Everything but the network and the loss is DQN's: exploration, replay, targets, the protocol and
every executor. The final head learns by DQN's loss. Each branch learns

- its Q head (``exit_target``): by policy distillation ("policy", the default; Rusu et al. 2016,
  arXiv 1511.06295): the KL divergence from the final head's sharpened policy,
  ``softmax(Q_final / exit_distill_temperature)``, to ``softmax(Q_branch)``, so the branch learns
  the final head's choice of action and nothing else; from the same TD targets as the final head
  on the taken action ("td"); by regression (Huber) on the final head's Q-values on every action
  ("distill"); or TD and regression together ("both"). A branch exists to take the final head's
  greedy action, and its output is only ever used through its argmax: regressing all Q-values
  spends the branch's few weights on values that never decide (docs/results.md measures the
  agreement each target reaches);
- its confidence head: whether the branch's greedy action equals the final head's on the batch's
  states (binary cross-entropy on the logit), so a threshold on the confidence bounds how often an
  exit changes the action; with ``exit_confidence_tolerance`` > 0, whether the final head values
  the branch's action within that share of the state's spread of Q-values (best minus worst) of
  its best: where the final head's Q-values nearly tie, another action than its argmax costs
  little, and an exit there is as safe as one that agrees (docs/results.md).

Schedules (``exit_schedule``):

- ``"staged"`` (default): the backbone and the final head learn by DQN's loss alone; the
  branches learn on the backbone's features without sending it gradients (detached), from update
  ``exit_stage_start`` on (stage 1: DQN alone; stage 2: the branches fit the features the DQN
  learns). The final head therefore learns exactly as plain ``dqn`` does for the same seed (the
  branches add no gradient to the backbone and are clipped apart), so the exits can only trade
  score for operations at the threshold the sweep picks, never lower the final head's score.
- ``"joint"``: one loss, DQN's plus ``exit_loss_weight`` times the branches' mean, from the first
  update; the branches' gradients reach the early blocks, which learn features that serve an
  early decision too, at some risk to the final head (the early blocks now serve two masters).

``staged`` is the default because the comparison the method is judged by (operations and score
against the baseline DQN at the same budget) then has an exact baseline inside every run: the
final head is the baseline DQN, and the sweep measures what the exits cost against it.

Acting: ``act_with_exits`` (default false) acts during training with exits at ``exit_threshold``;
otherwise training acts with the whole network (no branch runs). The threshold rides in the
network's ``exit_threshold`` buffer; ``hetrl exits sweep RUN_DIR`` picks one on validation episodes
and writes it into the checkpoint, where evaluation and a loaded policy find it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from hetrl.algos.dqn import DQN, NETWORKS, DQNConfig, DQNLearner
from hetrl.errors import HetrlError
from hetrl.nets.exits import (
    CONFIDENCE_BIAS,
    MINATAR_CONVS,
    NATURE_CONVS,
    NEVER,
    ExitQNetwork,
    stored_branch_shapes,
)

SCHEDULES = ("staged", "joint")
TARGETS = ("policy", "both", "td", "distill")
STATE_TARGETS = ("policy", "distill")  # learnt from states alone, labelled by the final head (no transitions)


@dataclass
class ExitDQNConfig(DQNConfig):
    exits: tuple[int, ...] | None = None  # blocks (0-based: convs, then hidden layers) a branch follows, -1 the input itself; none: every block but the last
    exit_hidden: int = 16  # a hidden layer in each branch (units; ReLU) that both heads read; 0: linear heads on the block's features
    exit_share: float = 1.0  # of its block's outputs (filters or units) a branch reads: computed first, the rest only for decisions that go on; a branch on the input reads it all
    exit_schedule: str = "staged"  # staged (branches on detached features, the final head is plain DQN) or joint
    exit_stage_start: int = 0  # staged: updates before the branches start learning
    exit_target: str = "policy"  # what a branch's Q head learns: policy (the final head's greedy policy, KL), td (the TD targets), distill (the final head's Q, Huber), both (td and distill)
    exit_distill_temperature: float = 0.01  # policy: T in the final head's softmax(Q / T) (Rusu et al. 2016's best)
    exit_confidence_tolerance: float = 0.0  # what a confidence head predicts: the final head values the branch's action within this share of the state's Q spread of its best; 0: the same action
    exit_loss_weight: float = 1.0  # the branches' loss beside DQN's (joint: how hard they pull on the shared blocks)
    act_with_exits: bool = False  # act during training with exits (at exit_threshold); false: the whole network
    exit_threshold: float = 0.9  # the confidence an exit needs while training acts with exits
    # the share of decisions leaving at each exit (branches in order, then the final head) at which
    # the profiler times Act when training acts with exits, as `hetrl exits sweep` measures it on
    # validation episodes; none: the dearest path (every confidence head runs, the final head answers)
    exit_rates: tuple[float, ...] | None = None

    COST_FREE = DQNConfig.COST_FREE | {"exit_target", "exit_distill_temperature", "exit_loss_weight",
                                        "exit_stage_start", "exit_confidence_tolerance"}

    def validate(self) -> list[str]:
        problems = super().validate()
        if self.teacher:
            problems.append(f"teacher={self.teacher}: distillation from a teacher run is dqn's; exit-dqn's branches "
                            "distil its own final head (exit_target); drop teacher or use algo dqn")
        if self.network not in NETWORKS:
            problems.append("exit-dqn builds its branches into hetrl's own networks (auto, minatar, nature, mlp), "
                            f"not a user's factory or a searched architecture ({self.network})")
        if self.dueling:
            problems.append("exit-dqn has no dueling head; set dueling=false")
        if self.exit_schedule not in SCHEDULES:
            problems.append(f"exit_schedule must be one of {', '.join(SCHEDULES)} (got {self.exit_schedule!r})")
        if self.exit_target not in TARGETS:
            problems.append(f"exit_target must be one of {', '.join(TARGETS)} (got {self.exit_target!r})")
        if not self.exit_distill_temperature > 0:
            problems.append(f"exit_distill_temperature must be > 0 (got {self.exit_distill_temperature})")
        if not 0 <= self.exit_confidence_tolerance <= 1:
            problems.append(f"exit_confidence_tolerance must be in [0, 1], a share of a state's spread of Q-values "
                            f"(got {self.exit_confidence_tolerance}); 0: a confident branch takes the final head's action")
        if self.exit_hidden < 0:
            problems.append(f"exit_hidden must be >= 0 (got {self.exit_hidden})")
        if not 0 < self.exit_share <= 1:
            problems.append(f"exit_share must be in (0, 1]: the share of its block's outputs a branch reads (got {self.exit_share})")
        if self.exit_stage_start < 0:
            problems.append(f"exit_stage_start must be >= 0 (got {self.exit_stage_start})")
        if self.exit_loss_weight < 0:
            problems.append(f"exit_loss_weight must be >= 0 (got {self.exit_loss_weight})")
        if not 0 <= self.exit_threshold <= 1:
            problems.append(f"exit_threshold must be in [0, 1] (got {self.exit_threshold})")
        if self.exit_rates is not None and (min(self.exit_rates, default=-1.0) < 0
                                            or abs(sum(self.exit_rates) - 1.0) > 1e-3):
            problems.append(f"exit_rates must be shares >= 0 summing to 1, one per exit and the final head last "
                            f"(got {self.exit_rates}); `hetrl exits sweep RUN` prints a run's")
        if self.exits is not None and (not self.exits or min(self.exits) < -1):
            problems.append(f"exits must list block indices >= 0, or -1 for a branch on the input (got {self.exits}); "
                            "none: after every block but the last")
        return problems


class ExitDQNLearner(DQNLearner):
    """DQN's learner (its targets, periodic target refresh and checkpoint layout) with the
    branches' losses added to the step."""

    q: ExitQNetwork
    q_target: ExitQNetwork

    def __init__(self, algo: ExitDQN, device: torch.device, seed: int) -> None:
        super().__init__(algo, device, seed)
        self.cfg: ExitDQNConfig = algo.config
        trunk = [p for name, p in self.q.named_parameters() if not name.startswith("branches.")]
        self._clip_groups = ([trunk, list(self.q.branches.parameters())] if self.cfg.exit_schedule == "staged"
                             else [list(self.q.parameters())])

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """DQN's, refusing branches of another width or share than this learner's: its optimizer
        and gradient-clip groups hold the parameters it was built with (the acting copies too), so
        branches ``hetrl exits sweep`` chose are resumed by building the run with them (the
        ValueError becomes the checkpoint-misfit error naming ``exit_hidden`` or ``exit_share``)."""
        stored = stored_branch_shapes(state["q"], len(self.q.exits))
        if [s[0] if s else None for s in stored] != self.q.branch_widths:
            raise ValueError(f"the checkpoint's branches have {[s[0] if s else None for s in stored]} hidden units, "
                             f"this run's {self.q.branch_widths} (exit_hidden)")
        features = [branch.in_features for branch in self.q.branches]
        if [s[1] if s else None for s in stored] != features:
            raise ValueError(f"the checkpoint's branches read {[s[1] if s else None for s in stored]} features, this "
                             f"run's {features} (exit_share {self.cfg.exit_share:g})")
        super().load_state_dict(state)

    def branches_learn(self) -> bool:
        return self.cfg.exit_schedule == "joint" or self.updates >= self.cfg.exit_stage_start

    def step(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        cfg = self.cfg
        actions, weights = batch["actions"].unsqueeze(1), batch["weights"]
        learn_branches = self.branches_learn()
        if learn_branches:
            final, branch_q, branch_logits = self.q.heads(batch["obs"], detach=cfg.exit_schedule == "staged")
        else:
            final, branch_q, branch_logits = self.q.final(batch["obs"]), [], []
        q = final.gather(1, actions).squeeze(1)
        with torch.no_grad():
            next_q_all = self.q_target.final(batch["next_obs"])
            if cfg.double:
                best = self.q.final(batch["next_obs"]).argmax(dim=1, keepdim=True)
                next_q = next_q_all.gather(1, best).squeeze(1)
            else:
                next_q = next_q_all.max(dim=1).values
            target = batch["rewards"] + batch["discounts"] * next_q
        td = target - q
        loss = (weights * F.huber_loss(q, target, reduction="none")).mean()
        if learn_branches:
            loss = loss + cfg.exit_loss_weight * self.branch_loss(final.detach(), branch_q, branch_logits, actions,
                                                                 target, weights)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.max_grad_norm is not None:
            for group in self._clip_groups:
                torch.nn.utils.clip_grad_norm_(group, cfg.max_grad_norm)
        self.optimizer.step()
        return {"td_errors": td.detach().abs(), "loss": loss.detach()}

    def branch_loss(self, final: torch.Tensor, branch_q: list[torch.Tensor], branch_logits: list[torch.Tensor],
                    actions: torch.Tensor, target: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """The branches' mean loss under this run's ``exit_target`` (:func:`branch_loss`)."""
        return branch_loss(final, branch_q, branch_logits, actions, target, weights, self.cfg.exit_target,
                           self.cfg.exit_distill_temperature, self.cfg.exit_confidence_tolerance)


def branch_loss(final: torch.Tensor, branch_q: list[torch.Tensor], branch_logits: list[torch.Tensor],
                actions: torch.Tensor, target: torch.Tensor, weights: torch.Tensor, kind: str = "policy",
                temperature: float = 0.01, tolerance: float = 0.0) -> torch.Tensor:
    """The branches' mean loss: each Q head's (``kind``, an ``exit_target``: policy distillation,
    TD on the taken ``actions`` towards ``target``, and/or regression on ``final``) plus its
    confidence's (BCE towards whether its greedy action is the final head's, or with ``tolerance``
    > 0 valued by the final head within that share of the state's Q spread of its best). ``final``:
    the final head's Q-values, detached; ``weights``: per-sample (PER) weights."""
    greedy = final.argmax(dim=1)
    if tolerance > 0:
        best = final.max(dim=1).values
        slack = tolerance * (best - final.min(dim=1).values)
    total = final.new_zeros(())
    teacher = F.softmax(final / temperature, dim=1) if kind == "policy" else None
    for qb, logits in zip(branch_q, branch_logits):
        if teacher is not None:
            kl = F.kl_div(F.log_softmax(qb, dim=1), teacher, reduction="none").sum(dim=1)
            total = total + (weights * kl).mean()
        if kind in ("td", "both"):
            taken = qb.gather(1, actions).squeeze(1)
            total = total + (weights * F.huber_loss(taken, target, reduction="none")).mean()
        if kind in ("distill", "both"):
            total = total + (weights * F.huber_loss(qb, final, reduction="none").mean(dim=1)).mean()
        chosen = qb.detach().argmax(dim=1)
        if tolerance > 0:
            agrees = (best - final.gather(1, chosen.unsqueeze(1)).squeeze(1) <= slack).float()
        else:
            agrees = (chosen == greedy).float()
        total = total + F.binary_cross_entropy_with_logits(logits, agrees)
    return total / max(1, len(branch_q))


class ExitDQN(DQN):
    name = "exit-dqn"
    Config = ExitDQNConfig
    early_exits = True
    config: ExitDQNConfig

    def build_learner(self, device: torch.device, seed: int) -> ExitDQNLearner:
        return ExitDQNLearner(self, device, seed)

    def mlp_networks(self) -> bool:
        return False  # a branched network: the MLP-only host backends (numba) do not serve it

    def numpy_policy(self) -> bool:
        return True  # ExitQNetwork has a numpy forward that exits early too

    def acting_threshold(self) -> float:
        """The threshold a fresh network acts with: training's (exits only with act_with_exits)."""
        return self.config.exit_threshold if self.config.act_with_exits else NEVER

    def profiled_policy(self, network: nn.Module, observations: torch.Tensor | None = None) -> nn.Module:
        """A copy whose exits the profiler can predict (its random observations would otherwise
        exit at random). Without ``exit_rates``, every confidence head says the fresh value
        (``CONFIDENCE_BIAS``) whatever the input: with ``act_with_exits`` (and a threshold above
        sigmoid(-4)) every decision runs every confidence head and leaves at the final head, the
        dearest path, which a run pays until its branches learn; without, the plain backbone. With
        ``exit_rates`` (and ``act_with_exits``), each confidence head's bias is set so that, of
        ``observations`` (the profiler's pool, which it cycles through), exactly those shares leave
        at each exit: Act is timed at the exit distribution the sweep validated."""
        net = copy.deepcopy(network)
        rates = self.config.exit_rates
        if rates is None or observations is None or not self.config.act_with_exits:
            with torch.no_grad():
                for branch in net.branches:
                    branch.confidence.weight.zero_()
                    branch.confidence.bias.fill_(CONFIDENCE_BIAS)
            return net
        if len(rates) != net.n_exits:
            raise HetrlError(f"exit_rates has {len(rates)} shares but the network has {net.n_exits} exits, the final "
                             f"head included ({', '.join(net.exit_names())}); give one share each, in that order")
        net.calibrate_exits(observations, rates)
        return net

    def make_networks(self) -> dict[str, nn.Module]:
        cfg, spec, kind = self.config, self.spec, self.network_kind
        if kind == "mlp":
            convs, hidden, scale = (), tuple(cfg.hidden), 1.0
        else:
            convs, hidden = (NATURE_CONVS, (512,)) if kind == "nature" else (MINATAR_CONVS, (128,))
            scale = spec.pixel_scale
        try:
            net = ExitQNetwork(spec.obs_shape, spec.n_actions, convs, hidden, scale, cfg.exits, cfg.exit_hidden,
                               self.acting_threshold(), cfg.exit_share)
        except ValueError as exc:
            raise HetrlError(f"exit-dqn's {kind} network on {spec.env_id}: {exc}") from None
        return {"q": net}

