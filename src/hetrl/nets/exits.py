"""An early-exit Q-network (RAPID-RL, Kosta et al. 2021): side branches after early blocks of a
DQN backbone, each with a Q head and a confidence head; acting stops at the first branch whose
confidence clears a threshold.

The backbone is one of DQN's networks cut into *blocks*, each a layer and its ReLU: the
convolutions, then the hidden linear layers (the MinAtar network: conv, 128 units; the Nature
CNN: three convs, 512 units; an MLP: its ``hidden`` layers). The final head is the output layer.
A branch sits after block ``k`` (0-based) of ``exits``, or on the input itself (``INPUT``, -1: before
block 0, reading the scaled observation); by default after every block but the last.
The layers are made in the order DQN's network makes them (blocks, then the head; the branches
after), so for one seed the backbone and head start from the same weights as ``dqn``'s.

A branch reads its block's output (flattened): an optional hidden layer (``branch_hidden`` units,
ReLU), then a Q head (one value per action) and a confidence head (one logit; the confidence is
its sigmoid). With ``branch_share`` below 1 it reads only the first share of the block's outputs
(its first filters, or units): acting computes those first, the branch on them, and the rest of
the block only for the samples that go on. On the MinAtar network the single convolution is 0.30x
of a decision's operations, so a branch after the whole of it cannot cost much less; one after
half its filters leaves room for a wider branch at the same operations (docs/results.md). Training
runs the whole block and the branch reads the prefix of its output: the values acting computes,
up to the order of the sums. A fresh confidence head's bias is ``CONFIDENCE_BIAS`` (sigmoid
0.018): an untrained branch is not confident, so a network acting with exits runs whole until its
branches learn.

Passes:

- :meth:`ExitQNetwork.heads`: every head on the whole batch (training): the final Q-values, and per
  branch its Q-values and confidence logits.
- :meth:`ExitQNetwork.final`: the final head alone (the TD targets): the backbone, no branch.
- :meth:`ExitQNetwork.act_forward` (and ``forward``, what Act calls): the Q-values acted on and the
  exit of each sample, at the threshold held in the ``exit_threshold`` buffer (so it travels with
  the weights: checkpoints, WeightSync, actor processes, central inference). A sample exits at the
  first branch whose confidence is strictly above the threshold; the layers after its exit are not
  run for it: at batch 1 the pass returns, at larger batches the exited rows are taken out of the
  batch (gather) and their Q-values written into the output (scatter). Only a sample that goes on
  needs the next branch's confidence, and only a sample that exits needs that branch's Q head.
  A threshold of 1 (``NEVER``) or more never exits: the plain backbone runs, no branch at all.
- :meth:`ExitQNetwork.act_numpy` / ``forward_numpy``: the same on host arrays (Act/numpy, and
  evaluation on the host).

Operations: :meth:`ExitQNetwork.macs` counts the multiply-accumulates of the layers a decision
runs, exactly for convolutions (positions x filters x patch) and linear layers (inputs x outputs);
biases and ReLUs are not counted. ``baseline_macs`` is the network without branches (DQN's).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from hetrl.nets.conv import ConvShape

INPUT = -1  # the exit index of a branch on the observation itself, before any block
NEVER = 1.0  # a threshold no confidence (a sigmoid) exceeds: no exit, the plain backbone
CONFIDENCE_BIAS = -4.0  # a fresh confidence head's bias: sigmoid(-4) = 0.018, not confident

MINATAR_CONVS = ((16, 3, 1),)
NATURE_CONVS = ((32, 8, 4), (64, 4, 2), (64, 3, 1))


def stored_branch_shapes(state: Mapping[str, object], n_branches: int) -> list[tuple[int, int] | None]:
    """Each branch's (hidden units, input features) in an exit network's state dict (None: the
    branch is not in it)."""
    shapes: list[tuple[int, int] | None] = []
    for j in range(n_branches):
        trunk, q = state.get(f"branches.{j}.trunk.0.weight"), state.get(f"branches.{j}.q.weight")
        if trunk is not None:
            shapes.append((int(trunk.shape[0]), int(trunk.shape[1])))  # type: ignore[attr-defined]
        elif q is not None:
            shapes.append((0, int(q.shape[1])))  # type: ignore[attr-defined]
        else:
            shapes.append(None)
    return shapes


def stored_branch_widths(state: Mapping[str, object], n_branches: int) -> list[int | None]:
    """Each branch's hidden units in an exit network's state dict (None: the branch is not in it)."""
    return [shape[0] if shape else None for shape in stored_branch_shapes(state, n_branches)]


def share_outputs(share: float, outputs: int) -> int:
    """How many of a block's ``outputs`` (filters or units) a branch of ``share`` reads: the
    nearest whole number, at least one."""
    if not 0.0 < share <= 1.0:
        raise ValueError(f"a branch's share of its block's outputs must be in (0, 1] (got {share})")
    return max(1, min(outputs, round(share * outputs)))


def threshold_logit(threshold: float) -> float:
    """The confidence logit a threshold on the sigmoid means (exits compare logits: one rule for
    the torch and numpy passes, and no sigmoid computed)."""
    if threshold >= 1.0:
        return math.inf
    if threshold <= 0.0:
        return -math.inf
    return math.log(threshold / (1.0 - threshold))


class Branch(nn.Module):
    """A side exit: optional hidden layer, a Q head and a confidence head (one logit)."""

    def __init__(self, in_features: int, n_actions: int, hidden: int = 0) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(in_features, hidden), nn.ReLU()) if hidden else nn.Identity()
        width = hidden or in_features
        self.q = nn.Linear(width, n_actions)
        self.confidence = nn.Linear(width, 1)
        with torch.no_grad():
            self.confidence.bias.fill_(CONFIDENCE_BIAS)
        self.in_features, self.hidden, self.width = in_features, hidden, width

    def reset_parameters(self) -> None:
        """Fresh weights, as at construction (from torch's global generator)."""
        for layer in (*(m for m in self.trunk.modules() if isinstance(m, nn.Linear)), self.q, self.confidence):
            layer.reset_parameters()
        with torch.no_grad():
            self.confidence.bias.fill_(CONFIDENCE_BIAS)


class ExitQNetwork(nn.Module):
    """A Q-network of ``convs`` (filters, kernel, stride; unpadded) then ``hidden`` linear layers
    (each with ReLU: the blocks) and a final linear head, with a :class:`Branch` after each block
    of ``exits``. ``scale`` divides conv inputs (the env's pixel scale); without convs, image
    observations are flattened as they are (as DQN's MLP does)."""

    def __init__(self, obs_shape: Sequence[int], n_actions: int, convs: Sequence[tuple[int, int, int]],
                 hidden: Sequence[int], scale: float = 1.0, exits: Sequence[int] | None = None,
                 branch_hidden: int = 0, threshold: float = NEVER, branch_share: float = 1.0) -> None:
        super().__init__()
        self.obs_shape, self.n_actions = tuple(int(d) for d in obs_shape), int(n_actions)
        self.scale = float(scale)
        self.geometry: list[ConvShape] = []
        blocks: list[nn.Module] = []
        widths: list[int] = []  # each block's output, flattened
        self.block_outputs: list[int] = []  # each block's filters or units
        if convs:
            if len(self.obs_shape) != 3:
                raise ValueError(f"a conv network needs image observations (C, H, W), not shape {self.obs_shape}")
            channels, height, width = self.obs_shape
            for filters, kernel, stride in convs:
                if height < kernel or width < kernel:
                    raise ValueError(f"a {kernel}x{kernel} convolution does not fit a {height}x{width} input "
                                     f"(observation shape {self.obs_shape})")
                shape = ConvShape(channels, height, width, filters, kernel, stride)
                self.geometry.append(shape)
                blocks.append(nn.Sequential(nn.Conv2d(channels, filters, kernel, stride), nn.ReLU()))
                channels, height, width = filters, shape.out_height, shape.out_width
                widths.append(channels * height * width)
                self.block_outputs.append(filters)
            features = widths[-1]
        else:
            features = int(np.prod(self.obs_shape))
        for units in hidden:
            blocks.append(nn.Sequential(nn.Linear(features, units), nn.ReLU()))
            widths.append(units)
            self.block_outputs.append(units)
            features = units
        self.blocks = nn.ModuleList(blocks)
        self.head = nn.Linear(features, self.n_actions)
        self.n_convs = len(self.geometry)
        self._patch_index = [shape.patch_index() for shape in self.geometry]
        n = len(self.blocks)
        self.exits = tuple(sorted(set(range(n - 1) if exits is None else (int(e) for e in exits))))
        self.input_width = int(np.prod(self.obs_shape))
        if not self.exits:
            raise ValueError(f"no exit: a network of {n} block{'s' if n != 1 else ''} has no block before its last "
                             "to branch after (give it at least two blocks)")
        bad = [e for e in self.exits if not INPUT <= e < n - 1]
        if bad:
            raise ValueError(f"exits {bad} out of range: a branch sits on the input ({INPUT}) or after one of blocks 0..{n - 2} "
                             f"(the network has {n} blocks: {self.n_convs} conv, {len(hidden)} linear; "
                             "after the last comes the final head)")
        self.widths = widths
        self.branches = nn.ModuleList(Branch(self.branch_input(e, branch_share), self.n_actions, branch_hidden)
                                      for e in self.exits)
        self._branch_at = {e: j for j, e in enumerate(self.exits)}
        # plain lists of the same modules (not registered twice): indexing a ModuleList or a
        # Sequential costs microseconds, which a batch-1 pass pays per layer
        self._layers: list[nn.Module] = [block[0] for block in self.blocks]
        self._branch_list: list[Branch] = list(self.branches)
        self.register_buffer("exit_threshold", torch.tensor([float(threshold)], dtype=torch.float32))

    # --- the threshold ------------------------------------------------------------------------
    @property
    def n_exits(self) -> int:
        """The number of exits, the final head included; the final head's exit index is ``len(exits)``."""
        return len(self.exits) + 1

    @property
    def threshold(self) -> float:
        return float(self.exit_threshold[0])

    def set_threshold(self, threshold: float) -> None:
        with torch.no_grad():
            self.exit_threshold.fill_(float(threshold))

    def exit_names(self) -> list[str]:
        names = []
        for j, e in enumerate(self.exits):
            read, outputs = self.branch_outputs(j), self.block_outputs[e] if e != INPUT else 0
            part = f" ({read} of {outputs} {'filters' if e < self.n_convs else 'units'})" if e != INPUT and read < outputs else ""
            names.append("on the input" if e == INPUT else f"after block {e}{part}")
        return names + ["final head"]

    # --- what a branch reads --------------------------------------------------------------------
    def branch_input(self, exit_at: int, share: float = 1.0) -> int:
        """The input features of a branch after block ``exit_at`` that reads ``share`` of its
        outputs (on the input, whatever the share: the whole observation)."""
        if exit_at == INPUT:
            return self.input_width
        return share_outputs(share, self.block_outputs[exit_at]) * self.widths[exit_at] // self.block_outputs[exit_at]

    def branch_outputs(self, j: int) -> int:
        """How many of its block's outputs (filters or units) branch ``j`` reads; on the input, its
        features."""
        e, features = self.exits[j], self._branch_list[j].in_features
        return features if e == INPUT else features * self.block_outputs[e] // self.widths[e]

    def split_at(self, k: int) -> int | None:
        """The outputs of block ``k`` that acting computes before the exit after it, where its
        branch reads fewer than all of them; None where the block runs whole (no branch follows it,
        its branch reads it all, or ``k`` is the input)."""
        j = self._branch_at.get(k)
        if j is None or k == INPUT:
            return None
        read = self.branch_outputs(j)
        return read if read < self.block_outputs[k] else None

    @property
    def branch_shares(self) -> list[float]:
        """Each branch's share of its block's outputs (1 on the input)."""
        return [1.0 if e == INPUT else self.branch_outputs(j) / self.block_outputs[e] for j, e in enumerate(self.exits)]

    # --- the branches' width ------------------------------------------------------------------
    @property
    def branch_widths(self) -> list[int]:
        """Each branch's hidden units (0: linear heads on the block's features)."""
        return [branch.hidden for branch in self._branch_list]

    def set_branch_width(self, hidden: int, j: int | None = None, share: float | None = None) -> None:
        """Fresh branches (all, or branch ``j``) of ``hidden`` units, from torch's global generator,
        on the device and dtype of the rest: the backbone and final head are untouched. ``share``:
        of their block's outputs they read (default: as the old ones)."""
        if hidden < 0:
            raise ValueError(f"a branch's hidden units must be >= 0 (got {hidden})")
        like = self.head.weight
        for k in range(len(self.exits)) if j is None else (j,):
            features = self._branch_list[k].in_features if share is None else self.branch_input(self.exits[k], share)
            self.branches[k] = Branch(features, self.n_actions, hidden).to(like.device, like.dtype)
        self._branch_list = list(self.branches)

    def load_state_dict(self, state_dict: Mapping[str, torch.Tensor], strict: bool = True, assign: bool = False):
        """``nn.Module.load_state_dict``, the branches first made as the state's are: a branch's
        width and share travel with its weights, because ``hetrl exits sweep`` may choose others
        than the run trained with (the backbone and final head must still match)."""
        for j, shape in enumerate(stored_branch_shapes(state_dict, len(self.exits))):
            if shape is None:
                continue
            hidden, features = shape
            old = self._branch_list[j]
            if (hidden, features) == (old.hidden, old.in_features):
                continue
            e = self.exits[j]
            per_output = 1 if e == INPUT else self.widths[e] // self.block_outputs[e]
            full = self.branch_input(e)
            if features % per_output or not 0 < features <= full or (e == INPUT and features != full):
                raise ValueError(f"branch {j}'s stored input of {features} features is no prefix of the "
                                 f"{full} its place ({self.exit_names()[j]}) gives")
            self.set_branch_width(hidden, j, 1.0 if e == INPUT else features // per_output / self.block_outputs[e])
        return super().load_state_dict(state_dict, strict, assign)

    # --- torch passes -------------------------------------------------------------------------
    # Layers are called through torch.nn.functional on the modules' parameters: at batch 1 on the
    # host a module call's own overhead is of the order of the small layers' arithmetic, and an
    # exit saves arithmetic only if the pass around it is lean.
    def _input(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.float()
        if self.n_convs:
            return x / self.scale if self.scale != 1.0 else x
        return x.flatten(1) if x.dim() > 2 else x

    def _block(self, k: int, x: torch.Tensor, lo: int = 0, hi: int | None = None) -> torch.Tensor:
        """Block ``k`` on ``x``; ``lo``/``hi``: only its outputs (filters or units) ``lo:hi``."""
        layer = self._layers[k]
        weight, bias = layer.weight, layer.bias
        if lo or hi is not None:
            weight, bias = weight[lo:hi], bias[lo:hi]
        if k < self.n_convs:
            return F.relu(F.conv2d(x, weight, bias, layer.stride))
        if k == self.n_convs and k > 0:  # the first linear block after the convolutions
            x = x.flatten(1)
        return F.relu(F.linear(x, weight, bias))

    def _branch_features(self, j: int, x: torch.Tensor) -> torch.Tensor:
        branch = self._branch_list[j]
        x = x.flatten(1)
        if x.shape[1] != branch.in_features:  # a branch on a share of its block's outputs: their prefix
            x = x[:, :branch.in_features]
        if branch.hidden:
            layer = branch.trunk[0]
            x = F.relu(F.linear(x, layer.weight, layer.bias))
        return x

    def _linear(self, layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, layer.weight, layer.bias)

    def final(self, obs: torch.Tensor) -> torch.Tensor:
        """The final head's Q-values: the backbone alone, as DQN's network computes them."""
        x = self._input(obs)
        for k in range(len(self.blocks)):
            x = self._block(k, x)
        return self._linear(self.head, x)

    def heads(self, obs: torch.Tensor, detach: bool = False) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
        """Every head on the whole batch: final Q (B, A), and per branch Q (B, A) and confidence
        logits (B,). ``detach``: the branches read the backbone's features without sending it
        gradients (the staged schedule)."""
        x = self._input(obs)
        branch_q, branch_logits = [], []
        for k in range(INPUT, len(self.blocks)):
            if k != INPUT:
                x = self._block(k, x)
            j = self._branch_at.get(k)
            if j is not None:
                q, logit = self.branch_heads(j, x.detach() if detach else x)
                branch_q.append(q)
                branch_logits.append(logit)
        return self._linear(self.head, x), branch_q, branch_logits

    def branch_heads(self, j: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Branch ``j``'s Q-values (B, A) and confidence logits (B,) on its input ``x`` (the output of
        the block it follows, as :meth:`branch_inputs` gives it)."""
        branch = self._branch_list[j]
        f = self._branch_features(j, x)
        return self._linear(branch.q, f), self._linear(branch.confidence, f).squeeze(1)

    @torch.no_grad()
    def branch_inputs(self, obs: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The final Q-values (B, A) and each branch's input, flattened (B, features): what the
        backbone gives the branches, which does not change while only the branches learn."""
        x = self._input(obs)
        inputs: list[torch.Tensor] = []
        for k in range(INPUT, len(self.blocks)):
            if k != INPUT:
                x = self._block(k, x)
            if k in self._branch_at:
                inputs.append(x.flatten(1))
        return self._linear(self.head, x), inputs

    @torch.no_grad()
    def calibrate_exits(self, obs: torch.Tensor | np.ndarray, rates: Sequence[float]) -> list[int]:
        """Shift each confidence head's bias so that, at the stored threshold, ``rates[j]`` of the
        rows of ``obs`` leave at exit j (``rates[-1]``: the final head), the rows left over after
        each branch taken by the largest confidence logits. Returns the count leaving at each exit,
        which differs from ``rates * len(obs)`` only where rows tie on a logit. For the profiler:
        Act timed over ``obs`` then costs what a run at that exit distribution pays."""
        limit = threshold_logit(self.threshold)
        if not math.isfinite(limit):
            raise ValueError(f"no threshold in (0, 1) to calibrate exits against (the stored one is {self.threshold})")
        x = self._input(torch.as_tensor(obs, device=self.exit_threshold.device))
        n = x.shape[0]
        targets = np.diff(np.round(np.cumsum([0.0, *rates]) * n)).astype(int)  # rows per exit, summing to n
        counts = [0] * self.n_exits
        for k in range(INPUT, len(self.blocks)):
            if k != INPUT:
                x = self._block(k, x)
            j = self._branch_at.get(k)
            if j is None:
                continue
            confidence = self._branch_list[j].confidence
            logits = self._linear(confidence, self._branch_features(j, x)).squeeze(1)
            order = torch.argsort(logits, descending=True)
            m = int(min(targets[j], len(order)))
            ranked = logits[order]
            if m == 0:  # nobody leaves: the largest logit lands below the limit
                shift = limit - float(ranked[0]) - 1.0
            elif m == len(order):  # everybody leaves
                shift = limit - float(ranked[-1]) + 1.0
            else:  # the limit falls between the m-th and (m+1)-th largest logits
                shift = limit - 0.5 * (float(ranked[m - 1]) + float(ranked[m]))
            confidence.bias.add_(shift)
            done = (logits + shift) > limit
            counts[j] = int(done.sum())
            x = x[~done]
            if x.shape[0] == 0:
                return counts
        counts[-1] = int(x.shape[0])
        return counts

    def act_forward(self, obs: torch.Tensor, threshold: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Q-values to act on (B, A) and each sample's exit (B,), int64: the branch's index in
        ``exits``, or ``len(exits)`` for the final head. ``threshold``: the buffer's by default."""
        limit = threshold_logit(self.exit_threshold.item() if threshold is None else threshold)
        x = self._input(obs)
        n, last, device = x.shape[0], len(self.exits), x.device
        if limit == math.inf:  # no exit: the plain backbone
            for k in range(len(self.blocks)):
                x = self._block(k, x)
            return self._linear(self.head, x), torch.full((n,), last, dtype=torch.int64, device=device)
        if n == 1:  # one sample: exit or go on, nothing to gather
            for k in range(INPUT, len(self.blocks)):
                j, split = self._branch_at.get(k), self.split_at(k)
                before = x
                if k != INPUT:
                    x = self._block(k, x, 0, split)
                if j is not None:
                    f, branch = self._branch_features(j, x), self._branch_list[j]
                    if self._linear(branch.confidence, f).item() > limit:
                        return self._linear(branch.q, f), torch.full((1,), j, dtype=torch.int64, device=device)
                    if split is not None:  # the rest of the block
                        x = torch.cat([x, self._block(k, before, split)], dim=1)
            return self._linear(self.head, x), torch.full((1,), last, dtype=torch.int64, device=device)
        out = torch.empty((n, self.n_actions), dtype=torch.float32, device=device)
        exit_index = torch.full((n,), last, dtype=torch.int64, device=device)
        rows = torch.arange(n, device=device)  # which samples are still in the pass
        for k in range(INPUT, len(self.blocks)):
            j, split = self._branch_at.get(k), self.split_at(k)
            before = x
            if k != INPUT:
                x = self._block(k, x, 0, split)
            if j is None:
                continue
            f, branch = self._branch_features(j, x), self._branch_list[j]
            done = self._linear(branch.confidence, f).squeeze(1) > limit
            if bool(done.any()):
                leaving = rows[done]
                out[leaving] = self._linear(branch.q, f[done])
                exit_index[leaving] = j
                keep = ~done
                if not bool(keep.any()):
                    return out, exit_index
                x, rows, before = x[keep], rows[keep], before[keep]
            if split is not None:  # the rest of the block, for the samples that go on
                x = torch.cat([x, self._block(k, before, split)], dim=1)
        out[rows] = self._linear(self.head, x)
        return out, exit_index

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """The Q-values acted on, at the stored threshold (what Act/torch and evaluation call)."""
        return self.act_forward(obs)[0]

    # --- numpy passes -------------------------------------------------------------------------
    def _block_numpy(self, params: Mapping[str, np.ndarray], k: int, x: np.ndarray, lo: int = 0,
                     hi: int | None = None) -> np.ndarray:
        """Block ``k`` on flattened rows ``x`` (torch's (C, H, W) order for conv outputs); ``lo``/``hi``:
        only its outputs (filters or units) ``lo:hi``."""
        w, b = params[f"blocks.{k}.0.weight"][lo:hi], params[f"blocks.{k}.0.bias"][lo:hi]
        if k < self.n_convs:
            shape, n = self.geometry[k], len(x)
            # take, not x[:, index]: the same gather at a fifth of the time for one row (the acting case)
            patches = x.take(self._patch_index[k], axis=1).reshape(n * shape.positions, shape.patch).astype(np.float32, copy=False)
            if k == 0 and self.scale != 1.0:
                patches = patches / np.float32(self.scale)
            out = patches @ w.reshape(len(w), -1).T
            out += b
            np.maximum(out, 0, out=out)
            return out.reshape(n, shape.positions, len(w)).transpose(0, 2, 1).reshape(n, -1)
        out = x @ w.T
        out += b
        np.maximum(out, 0, out=out)
        return out

    def _branch_numpy(self, params: Mapping[str, np.ndarray], j: int, x: np.ndarray) -> np.ndarray:
        x = x[:, :self._branch_list[j].in_features]
        if self.exits[j] == INPUT and self.n_convs:  # the raw rows: scaled as the first conv scales its patches
            x = x.astype(np.float32)
            if self.scale != 1.0:
                x /= np.float32(self.scale)
        if self.branches[j].hidden:
            x = x @ params[f"branches.{j}.trunk.0.weight"].T + params[f"branches.{j}.trunk.0.bias"]
            np.maximum(x, 0, out=x)
        return x

    def act_numpy(self, params: Mapping[str, np.ndarray], obs: np.ndarray,
                  threshold: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`act_forward` on host arrays (``params`` keyed like the state dict)."""
        n = len(obs)
        x = obs.reshape(n, -1)
        if not self.n_convs:
            x = x.astype(np.float32, copy=False)
        limit = threshold_logit(float(params["exit_threshold"][0]) if threshold is None else threshold)
        last = len(self.exits)
        if limit == math.inf:  # no exit: the plain backbone
            for k in range(len(self.blocks)):
                x = self._block_numpy(params, k, x)
            return x @ params["head.weight"].T + params["head.bias"], np.full(n, last, dtype=np.int64)
        if n == 1:
            for k in range(INPUT, len(self.blocks)):
                j, split = self._branch_at.get(k), self.split_at(k)
                before = x
                if k != INPUT:
                    x = self._block_numpy(params, k, x, 0, split)
                if j is not None:
                    f = self._branch_numpy(params, j, x)
                    w, b = params[f"branches.{j}.confidence.weight"], params[f"branches.{j}.confidence.bias"]
                    if float(f[0] @ w[0]) + float(b[0]) > limit:
                        q = f @ params[f"branches.{j}.q.weight"].T + params[f"branches.{j}.q.bias"]
                        return q, np.full(1, j, dtype=np.int64)
                    if split is not None:
                        x = np.concatenate([x, self._block_numpy(params, k, before, split)], axis=1)
            return x @ params["head.weight"].T + params["head.bias"], np.full(1, last, dtype=np.int64)
        exit_index = np.full(n, last, dtype=np.int64)
        out: np.ndarray | None = None
        rows = np.arange(n)
        for k in range(INPUT, len(self.blocks)):
            j, split = self._branch_at.get(k), self.split_at(k)
            before = x
            if k != INPUT:
                x = self._block_numpy(params, k, x, 0, split)
            if j is None:
                continue
            f = self._branch_numpy(params, j, x)
            done = (f @ params[f"branches.{j}.confidence.weight"].T + params[f"branches.{j}.confidence.bias"])[:, 0] > limit
            if done.any():
                q = f[done] @ params[f"branches.{j}.q.weight"].T + params[f"branches.{j}.q.bias"]
                if out is None:
                    out = np.empty((n, self.n_actions), dtype=np.float32)
                out[rows[done]] = q
                exit_index[rows[done]] = j
                keep = ~done
                if not keep.any():
                    return out, exit_index
                x, rows, before = x[keep], rows[keep], before[keep]
            if split is not None:
                x = np.concatenate([x, self._block_numpy(params, k, before, split)], axis=1)
        q = x @ params["head.weight"].T + params["head.bias"]
        if out is None:  # nobody exited
            return q, exit_index
        out[rows] = q
        return out, exit_index

    def forward_numpy(self, params: Mapping[str, np.ndarray], obs: np.ndarray) -> np.ndarray:
        return self.act_numpy(params, obs)[0]

    # --- operations ---------------------------------------------------------------------------
    def block_macs(self) -> list[int]:
        """Multiply-accumulates of each block for one sample."""
        out = []
        for k, block in enumerate(self.blocks):
            if k < self.n_convs:
                s = self.geometry[k]
                out.append(s.positions * s.filters * s.patch)
            else:
                out.append(block[0].in_features * block[0].out_features)
        return out

    def branch_macs(self, j: int) -> tuple[int, int]:
        """(confidence, Q head) multiply-accumulates of branch ``j`` for one sample; its hidden
        layer, which both read, is counted with the confidence (every visit runs it)."""
        b = self.branches[j]
        trunk = b.in_features * b.hidden if b.hidden else 0
        return trunk + b.width, b.width * self.n_actions

    @property
    def baseline_macs(self) -> int:
        """One decision of the network without branches (DQN's): every block and the final head."""
        return sum(self.block_macs()) + self.head.in_features * self.n_actions

    def macs(self, exit_index: int, exits_on: bool = True) -> int:
        """One decision's multiply-accumulates when it leaves at ``exit_index`` (``len(exits)``: the
        final head): the blocks up to the exit, every confidence head on the way, and the Q head it
        leaves by. ``exits_on=False`` (a threshold of ``NEVER``): no branch runs, the baseline."""
        last = len(self.exits)
        if not exits_on:
            if exit_index != last:
                raise ValueError("without exits every decision leaves at the final head")
            return self.baseline_macs
        if not 0 <= exit_index <= last:
            raise ValueError(f"exit index {exit_index} out of range 0..{last}")
        blocks = self.block_macs()
        confidences = sum(self.branch_macs(j)[0] for j in range(min(exit_index + 1, last)))
        if exit_index == last:
            return self.baseline_macs + confidences
        e = self.exits[exit_index]
        # the block the branch follows, as far as the branch reads it (its share of the outputs)
        part = 0 if e == INPUT else blocks[e] * self.branch_outputs(exit_index) // self.block_outputs[e]
        return sum(blocks[:max(e, 0)]) + part + confidences + self.branch_macs(exit_index)[1]

    def mean_macs(self, counts: Sequence[int], exits_on: bool = True) -> float:
        """Mean multiply-accumulates per decision of a histogram of exits (``counts`` per exit)."""
        total = sum(counts)
        if total == 0:
            return float("nan")
        if not exits_on:
            return float(self.baseline_macs)
        return sum(c * self.macs(j) for j, c in enumerate(counts)) / total
