"""Early exits in use: where decisions leave an exit network, what they cost, and the threshold.

- :class:`ExitCounter`: an exit network's greedy policy on host arrays (its numpy pass) that counts
  each decision's exit; :class:`ExitStats` turns the counts into the exit histogram and the mean
  multiply-accumulates per decision (exact for conv and linear layers,
  :meth:`hetrl.nets.exits.ExitQNetwork.macs`) beside the network without branches (DQN's).
- :func:`decision_latency`: measured wall time per decision of the run's Act backend on the host
  at a batch size, on observations the policy met; :func:`time_decisions` times several policies
  side by side (alternating blocks), :func:`host_act_backends` lists the host Act backends that
  serve given algorithms.
- :func:`fit_branches`: the branches fit to the trained network (backbone and final head frozen) on
  the run's replay, as RAPID-RL trains its branches on a trained network. Branches that learnt
  beside the backbone (the staged schedule) chase features and greedy actions that move with every
  update, and end far behind what the same branch reaches on the final network (docs/results.md,
  "Which branch"); the sweep fits them first by default, so the threshold it chooses belongs to
  the fitted branches, and stores both.
- :func:`sweep` (``hetrl exits sweep RUN_DIR``): the trade-off of every threshold on *validation*
  episodes, seeded apart from training's envs and from the test episodes ``hetrl eval`` plays
  (``VALIDATION_SEED_OFFSET`` against ``EVAL_SEED_OFFSET``), so the threshold is chosen without
  looking at the episodes it is reported on. Branches of several widths are fit and swept
  (:func:`candidate_widths`: the run's and narrower ones), since how narrow a branch can be and
  still hold the score differs by game. Each (width, threshold) plays the same validation
  episodes (the same seeds); its score ratio is its mean return over the full network's
  (threshold 1: no exit) on them. The choice: the fewest operations among the pairs whose score
  ratio is at least ``min_score_ratio`` once each width's ratios are fit to fall with the
  threshold (:func:`monotone_by_width`, isotonic regression: one noisy validation score does not
  decide).
  It writes ``exits/sweep.md`` (the table), ``exits/sweep.json`` and ``exits/sweep.png`` in the
  run directory, and stores the chosen threshold in the swept checkpoint (the network's
  ``exit_threshold`` buffer) with the branches of the chosen width (:func:`store_threshold`),
  where ``hetrl eval`` and ``hetrl.load`` find them.
"""

from __future__ import annotations

import copy
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hetrl.algos import Algorithm
from hetrl.errors import HetrlError
from hetrl.evaluation import evaluate_policy
from hetrl.files import write_file, write_json, write_text
from hetrl.nets import numpy_params
from hetrl.nets.exits import NEVER, ExitQNetwork, threshold_logit
from hetrl.primitives import build, implementations
from hetrl.protocol import Slot
from hetrl.run import safe_state

VALIDATION_SEED_OFFSET = 2_000_029  # validation episodes: apart from training's seeds and evaluation's (1_000_003)
# down to 0 (every decision leaves at the first exit): where confidence heads are cautious, the
# validation score may hold at thresholds below one half
THRESHOLDS = (NEVER, 0.99, 0.98, 0.95, 0.9, 0.85, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0)
MIN_SCORE_RATIO = 0.9
# standard errors of its validation score ratio by which the chosen point clears MIN_SCORE_RATIO:
# the choice takes the cheapest of some 40 noisy points, and on the edge one lucky validation score
# would decide (docs/results.md, "The sweep chooses the branch width, with a margin ...")
SCORE_MARGIN = 1.0
# an undecided point (cheaper than the choice, its ratio within the margin of the line on either
# side) plays more validation episodes, in steps of the sweep's episodes, up to this many times them
# (sweep's max_episodes): where a branch's score is near the line, more episodes decide it instead
# of the margin keeping the network
MORE_EPISODES = 4
KEPT_OBSERVATIONS = 512  # observations kept per threshold (a uniform sample) to time decisions on
FIT_UPDATES = 20_000  # branch-fit updates before a sweep
FIT_BATCH = 128  # states per branch-fit update
FIT_LR = 1e-3  # Adam's step in the branch fit (the run's lr, tuned for the moving DQN target, underfits it)
FIT_STATES = 50_000  # replay transitions the branch fit draws from, at most
FIT_HELD_OUT = 0.1  # of them, kept apart to measure each branch's agreement with the final head
FIT_PLAY_EPISODES = 40  # episodes of the branches' own play per round of the fit on it (fit_on_own_play)
FIT_PLAY_STATES = 20_000  # of their states kept per round (a uniform sample)
FIT_PLAY_DECISIONS = 100_000  # a round's play stops after this many decisions (long Atari games)
FIT_ROUNDS = 3  # rounds of the fit on the branches' own play (hetrl exits sweep --fit-rounds)
FITTED_KEY = "exit_branches_fitted"  # a checkpoint's entry: its branches are a sweep's fit (store_threshold)
FITTED_BEFORE = "as an earlier sweep fit and stored them"  # BranchFit.before of such a checkpoint's branches
FIT_ROUND_SHARE = 0.5  # each round's updates: this share of the fit's on the replay
FIT_PLAY_SEED_OFFSET = 3_000_017  # the play's episodes: apart from training's, validation's and evaluation's seeds
FIT_CACHE_BYTES = 1 << 30  # the backbone's outputs on the fit's states are kept (computed once) up to this size
# the branch widths a sweep fits by default: the run's own, then narrower ones, each about this share
# of the one before (16 units: 16, 12, 9)
WIDTH_STEP = 0.75
WIDTH_RUNGS = 3


@dataclass
class ExitStats:
    """Where a policy's decisions left the network, and what they cost."""

    threshold: float
    names: list[str]  # each exit's name, the final head last
    counts: list[int]  # decisions per exit
    macs_mean: float  # multiply-accumulates per decision, averaged over the decisions
    baseline_macs: int  # the network without branches (DQN's), per decision

    @property
    def decisions(self) -> int:
        return sum(self.counts)

    @property
    def fractions(self) -> list[float]:
        total = max(1, self.decisions)
        return [c / total for c in self.counts]

    @property
    def ops_ratio(self) -> float:
        return self.macs_mean / self.baseline_macs

    def describe(self) -> str:
        if threshold_logit(self.threshold) == math.inf:
            head = f"exits: none (threshold {self.threshold:g}: the whole network; `hetrl exits sweep` chooses one)"
        else:
            shares = ", ".join(f"{name} {100 * f:.1f}%" for name, f in zip(self.names, self.fractions))
            head = f"exits (threshold {self.threshold:g}) over {self.decisions:,} decisions: {shares}"
        return (f"{head}\noperations: {self.macs_mean:,.0f} multiply-accumulates per decision, {self.ops_ratio:.2f}x "
                f"the {self.baseline_macs:,} of the network without branches")


class ExitCounter:
    """The greedy policy of ``network`` (an :class:`ExitQNetwork`) at ``threshold`` (default: its
    own), on host arrays, counting each decision's exit; keeps a uniform sample of the observations
    it acted on (``keep``) for timing. The pass is Act/numba's compiled one where that backend
    serves the network (the one a run acts with on the host, and many times faster than numpy's
    over the thousands of validation episodes a sweep plays), else :meth:`ExitQNetwork.act_numpy`."""

    def __init__(self, algo: Algorithm, network: ExitQNetwork, threshold: float | None = None, keep: int = 0,
                 seed: int = 0) -> None:
        if not isinstance(network, ExitQNetwork):
            raise HetrlError(f"{algo.name}'s network has no exits; exit statistics are for exit-dqn runs")
        self.algo, self.network = algo, network
        self.threshold = network.threshold if threshold is None else float(threshold)
        self._pass = exit_pass(algo, network, self.threshold)
        self.counts = np.zeros(network.n_exits, dtype=np.int64)
        self.keep, self.kept, self.seen = keep, [], 0
        self._rng = np.random.default_rng(seed)

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        q, exits = self._pass(obs)
        self.counts += np.bincount(exits, minlength=len(self.counts))
        for row in obs if self.keep else ():  # reservoir sampling: every decision equally likely kept
            self.seen += 1
            if len(self.kept) < self.keep:
                self.kept.append(row.copy())
            else:
                j = int(self._rng.integers(self.seen))
                if j < self.keep:
                    self.kept[j] = row.copy()
        return self.algo.greedy_rule(q)

    def stats(self) -> ExitStats:
        net, counts = self.network, self.counts.tolist()
        exits_on = threshold_logit(self.threshold) < math.inf
        return ExitStats(self.threshold, net.exit_names(), counts, net.mean_macs(counts, exits_on), net.baseline_macs)

    def observations(self) -> np.ndarray:
        return np.stack(self.kept) if self.kept else np.zeros((0, *self.network.obs_shape), np.float32)


def exit_pass(algo: Algorithm, network: ExitQNetwork,
              threshold: float) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Q-values and each row's exit of ``network`` at ``threshold`` on host arrays: Act/numba's
    compiled pass where that backend serves ``algo``'s network, else the numpy pass."""
    if "numba" in host_act_backends(algo):
        return acting_policy(algo, network, "numba", threshold).act_forward
    params = numpy_params(network)
    return lambda obs: network.act_numpy(params, obs, threshold)


def decision_latency(algo: Algorithm, network: ExitQNetwork, threshold: float, obs: np.ndarray, batch: int,
                     backend: str = "torch", seconds: float = 0.2) -> tuple[float, float, float]:
    """Seconds per decision (median, 10th and 90th percentiles over timed blocks) of the Act
    backend's forward on the host at ``batch``, cycling through ``obs`` (the states the policy met,
    so the exits are the ones it takes), with one torch thread (as an actor runs)."""
    return time_decisions({"policy": acting_policy(algo, network, backend, threshold)}, obs, batch, seconds)["policy"]


def acting_policy(algo: Algorithm, network: torch.nn.Module, backend: str, threshold: float | None = None) -> Any:
    """Act/``backend`` on the host over a copy of ``network`` (an exit network's at ``threshold``)."""
    acting = copy.deepcopy(network).cpu()
    if threshold is not None:
        acting.set_threshold(threshold)
    return build("Act", Slot(backend, "cpu"), algo, 0, source=acting)


def host_act_backends(*algos: Algorithm) -> list[str]:
    """The Act backends that run on the host and serve every one of ``algos``."""
    return [name for name, impl in implementations("Act").items()
            if impl.runs_on("cpu") and not any(impl.unsupported(a) for a in algos)]


def time_decisions(policies: Mapping[str, Any], obs: np.ndarray, batch: int, seconds: float = 0.2,
                   blocks: int = 7) -> dict[str, tuple[float, float, float]]:
    """Seconds per decision (median, 10th and 90th percentiles over ``blocks`` timed blocks) of each
    Act's ``forward`` at ``batch``, cycling through ``obs``, with one torch thread. The policies' blocks
    alternate, so a change in the machine's load (a shared host) falls on all of them alike."""
    from hetrl.profile import torch_threads

    if len(obs) == 0:
        raise HetrlError("no observations to time decisions on")
    reps = max(1, -(-batch // len(obs)))
    pool = np.concatenate([obs] * reps) if reps > 1 else obs
    batches = [pool[i:i + batch] for i in range(0, len(pool) - batch + 1, batch)]
    with torch_threads(1):
        inner = {}
        for name, policy in policies.items():
            for k in range(3):
                policy.forward(batches[k % len(batches)])
            start = time.perf_counter()
            policy.forward(batches[0])
            inner[name] = max(len(batches), int(seconds / blocks / max(time.perf_counter() - start, 1e-9)))
        times: dict[str, list[float]] = {name: [] for name in policies}
        for _ in range(blocks):
            for name, policy in policies.items():
                forward, n = policy.forward, inner[name]
                start = time.perf_counter()
                for k in range(n):
                    forward(batches[k % len(batches)])
                times[name].append((time.perf_counter() - start) / n / batch)
    out = {}
    for name, t in times.items():
        p10, median, p90 = np.percentile(t, [10, 50, 90])
        out[name] = (float(median), float(p10), float(p90))
    return out


def score_ratio_se(returns: np.ndarray, baseline: np.ndarray) -> float:
    """The standard error of :func:`score_ratio` of ``returns`` over ``baseline``, episodes paired
    (the same seeds): of their mean difference, over the baseline's mean; 0 where undefined (fewer
    than two episodes, or a baseline mean of 0)."""
    returns, baseline = np.asarray(returns, dtype=np.float64), np.asarray(baseline, dtype=np.float64)
    if len(returns) < 2 or len(returns) != len(baseline) or baseline.mean() == 0:
        return 0.0
    return float((returns - baseline).std(ddof=1) / math.sqrt(len(returns)) / abs(baseline.mean()))


def score_ratio(mean: float, baseline: float) -> float:
    """``mean`` over ``baseline`` for a positive baseline; 1 + (mean - baseline) / |baseline| in
    general (the same for a positive one, and a fall below a negative baseline counts as below 1);
    for a baseline of 0: 1 if not below it, else 0."""
    if baseline == 0:
        return 1.0 if mean >= 0 else 0.0
    return 1.0 + (mean - baseline) / abs(baseline)


@dataclass
class SweepPoint:
    threshold: float
    return_mean: float
    return_std: float
    score_ratio: float
    macs_mean: float
    ops_ratio: float
    exit_fractions: list[float]
    latency_b1_us: float | None = None  # per decision at batch 1 (median)
    latency_b1_spread_us: tuple[float, float] | None = None  # 10th, 90th percentiles
    latency_batch_us: float | None = None  # per decision at the executor's batch
    latency_ratio_b1: float | None = None  # over the full network's
    latency_ratio_batch: float | None = None
    branch_width: int | None = None  # the branches' hidden units; None: the whole network (threshold 1), no branch
    branch_share: float = 1.0  # of its block's outputs each branch reads (exit_share)
    score_ratio_se: float = 0.0  # standard error of score_ratio over the validation episodes (paired with the baseline's)
    returns: list[float] = field(default_factory=list)  # each validation episode's return
    decisions: int = 0  # the decisions exit_fractions count (0: not recorded, a sweep before it was)

    @property
    def episodes(self) -> int:
        """The validation episodes the point played (an undecided one plays more: :func:`decide`)."""
        return len(self.returns)


@dataclass
class BranchFit:
    """What :func:`fit_branches` did: on how many states, from where, and each branch's agreement
    with the final head's greedy action on held-out states before and after."""

    updates: int
    states: int
    source: str
    agreement_before: list[float]
    agreement_after: list[float]
    widths: list[int] = field(default_factory=list)  # the fitted branches' hidden units
    share: float = 1.0  # of its block's outputs each fitted branch reads
    rounds: int = 0  # rounds of the fit on the branches' own play (fit_on_own_play)
    play_states: int = 0  # states of that play added to the training states
    tolerance: float = 0.0  # the confidence heads' exit_confidence_tolerance in the fit
    # before: the checkpoint's branches (as wide as the fitted ones, or not); after: the fitted ones
    before: str = "as trained"  # what the checkpoint's branches were: as trained, or FITTED_BEFORE

    def describe(self, names: Sequence[str]) -> str:
        moved = ", ".join(f"{name} {100 * a:.1f}% -> {100 * b:.1f}%"
                          for name, a, b in zip(names, self.agreement_before, self.agreement_after))
        units = f"{'/'.join(str(w) for w in dict.fromkeys(self.widths))}-unit " if self.widths else ""
        units += f"{share_label(self.share)} " if self.share != 1.0 else ""
        play = (f" and {self.play_states:,} of their own play's ({self.rounds} round{'s' if self.rounds != 1 else ''})"
                if self.rounds else "")
        play += (f", confidence within {self.tolerance:g} of each state's Q spread of the final head's best"
                 if self.tolerance else "")
        return (f"{units}branches fit to the trained network: {self.updates:,} updates on {self.states:,} states "
                f"({self.source}){play}; agreement with the final head's action on held-out states, {self.before} -> "
                f"fit: {moved}")


@dataclass
class SweepResult:
    run_dir: str
    checkpoint: str
    env: str
    episodes: int
    seed_offset: int
    batch: int
    backend: str
    baseline_macs: int
    exit_names: list[str]
    min_score_ratio: float
    chosen: float
    points: list[SweepPoint] = field(default_factory=list)
    stored: bool = False
    fits: list[BranchFit] = field(default_factory=list)  # one per width, before its sweep; none: as trained
    trained_width: int = 0  # the run's branches as it trained them (its exit_hidden)
    widths: list[int] = field(default_factory=list)  # the branch widths swept
    chosen_width: int = 0  # the branch width stored with the chosen threshold
    trained_share: float = 1.0  # the run's exit_share
    shares: list[float] = field(default_factory=list)  # each swept width's share (beside ``widths``)
    chosen_share: float = 1.0  # the share of the branches stored with the chosen threshold
    margin: float = 0.0  # standard errors the chosen point's score ratio had to clear min_score_ratio by
    max_episodes: int = 0  # validation episodes an undecided point could play in all (decide; 0: a sweep before it)
    decide_rounds: int = 0  # rounds of more episodes the sweep played (decide)

    def point(self, threshold: float, width: int | None = None, share: float | None = None) -> SweepPoint:
        """The point of ``threshold`` (and branch ``width`` and ``share``; the whole network's point has none)."""
        return next(p for p in self.points
                    if p.threshold == threshold and (p.branch_width is None or (
                        (width is None or p.branch_width == width) and (share is None or p.branch_share == share))))

    @classmethod
    def load(cls, path: str | Path) -> SweepResult:
        """A sweep as :func:`sweep` wrote it (``exits/sweep.json``)."""
        try:
            data = json.loads(Path(path).read_text())
            points = [SweepPoint(**p) for p in data.pop("points")]
            fits = [BranchFit(**f) for f in data.pop("fits", [])]
            return cls(**data, points=points, fits=fits)
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise HetrlError(f"{path} is not a sweep hetrl exits sweep wrote ({type(exc).__name__}: {exc}); "
                             "sweep the run again") from None

    @property
    def chosen_point(self) -> SweepPoint:
        return self.point(self.chosen, self.chosen_width, self.chosen_share)

    @property
    def fit(self) -> BranchFit | None:
        """The fit of the branches stored (the chosen width's and share's)."""
        return next((f for f in self.fits if f.widths and f.widths[0] == self.chosen_width
                     and f.share == self.chosen_share), None)

    @property
    def candidates(self) -> list[tuple[int, float]]:
        """The (width, share) of each branch candidate swept."""
        return list(zip(self.widths, self.shares or [self.trained_share] * len(self.widths)))


BranchKey = tuple[int, float]  # a branch candidate: hidden units, share of its block's outputs


def branch_key(point: SweepPoint) -> BranchKey | None:
    """A point's branch candidate; None for the whole network's point (no branch)."""
    return None if point.branch_width is None else (point.branch_width, point.branch_share)


def share_label(share: float) -> str:
    return f"on {share:.3g} of the block"


def branch_label(key: BranchKey | None) -> str:
    """``16 units``, ``32 units on 0.5 of the block``; the whole network's point: ``-``."""
    if key is None:
        return "-"
    width, share = key
    return f"{width} units" + (f" {share_label(share)}" if share != 1.0 else "")


def candidate_widths(trained: int, rungs: int = WIDTH_RUNGS) -> tuple[int, ...]:
    """The branch widths a sweep fits by default: ``trained`` and narrower ones, each about
    ``WIDTH_STEP`` of the one before, ``rungs`` in all (16: 16, 12, 9); linear heads (0): only 0.
    A narrower branch costs fewer operations per exit and may hold less of the final head's policy:
    which width is cheapest at the score is the validation episodes' to say, game by game."""
    widths = [int(trained)]
    while widths[-1] > 1 and len(widths) < rungs:
        widths.append(max(1, min(widths[-1] - 1, round(widths[-1] * WIDTH_STEP))))
    return tuple(widths)


def candidate_branches(trained_width: int, trained_share: float = 1.0, shares: Sequence[float] | None = None,
                       widths: Sequence[int] | None = None) -> list[BranchKey]:
    """The branches (width, share) a sweep fits: at each share of ``shares`` (default the run's
    alone), each width of ``widths``, or by default :func:`candidate_widths` of the run's width
    scaled by ``trained_share / share``: a branch on half the filters, twice as wide, does the same
    branch operations on half the block's."""
    out: list[BranchKey] = []
    for share in (trained_share,) if shares is None else shares:
        ladder = widths if widths is not None else candidate_widths(max(1, round(trained_width * trained_share / share))
                                                                    if trained_width else 0)
        out += [(int(w), float(share)) for w in ladder]
    return list(dict.fromkeys(out))


def monotone_scores(points: Sequence[SweepPoint]) -> dict[float, float]:
    """Each threshold's score ratio fit to be non-increasing as the threshold falls (isotonic
    regression by pooling adjacent violators): a lower threshold sends more decisions
    to the branches, so its expected score is no higher. A dip or a bump that breaks that order is
    noise of the validation episodes, and is pooled with its neighbours rather than believed alone,
    each point weighted by its episodes (equal where all played as many; :func:`decide` gives
    undecided points more). (scipy's ``isotonic_regression`` does the same, but scipy is not a
    dependency of hetrl.)"""
    ordered = sorted(points, key=lambda p: p.threshold)  # ascending: the fit is non-decreasing
    pools: list[list[float]] = []  # [mean, weight, points]
    for p in ordered:
        pools.append([p.score_ratio, float(max(1, p.episodes)), 1])
        while len(pools) > 1 and pools[-2][0] > pools[-1][0]:
            (m2, n2, k2), (m1, n1, k1) = pools.pop(), pools.pop()
            pools.append([(m1 * n1 + m2 * n2) / (n1 + n2), n1 + n2, k1 + k2])
    fitted = [mean for mean, _, count in pools for _ in range(int(count))]
    return {p.threshold: s for p, s in zip(ordered, fitted)}


def width_curves(points: Sequence[SweepPoint]) -> dict[BranchKey | None, list[SweepPoint]]:
    """Each branch candidate's (width and share: :func:`branch_key`) points, in sweep order, after
    the whole network's point (threshold 1, no branch: shared by every candidate)."""
    whole = [p for p in points if p.threshold >= NEVER]
    keys = dict.fromkeys(branch_key(p) for p in points if p.threshold < NEVER)
    return {key: whole + [p for p in points if p.threshold < NEVER and branch_key(p) == key] for key in keys}


def monotone_by_width(points: Sequence[SweepPoint]) -> dict[tuple[BranchKey | None, float], float]:
    """:func:`monotone_scores` for each branch candidate's thresholds, each with the whole
    network's point (:func:`width_curves`): keyed by (:func:`branch_key`, threshold); the whole
    network's point by (None, 1) at its own ratio."""
    fitted: dict[tuple[BranchKey | None, float], float] = {(None, p.threshold): p.score_ratio for p in points
                                                           if p.threshold >= NEVER}
    for key, curve in width_curves(points).items():
        fitted.update({(key, t): r for t, r in monotone_scores(curve).items() if t < NEVER})
    return fitted


def choose(points: Sequence[SweepPoint], min_score_ratio: float, margin: float = 0.0) -> SweepPoint:
    """The fewest operations among the points whose score ratio, fit monotone in the threshold
    for each branch width (:func:`monotone_by_width`), is at least ``min_score_ratio`` with
    ``margin`` of its standard errors to spare (ties: the higher threshold, then the wider branch);
    the full network's point always qualifies (its ratio is 1). On raw ratios one lucky validation
    score at a low threshold would be chosen although its neighbours, with nearly the same exits,
    fall short; without a margin, the cheapest of many points that pass on the edge is likely one
    whose validation episodes went well, and falls short on others."""
    fitted = monotone_by_width(points)
    ok = [p for p in points if p.threshold >= NEVER
          or fitted[(branch_key(p), p.threshold)] - margin * p.score_ratio_se >= min_score_ratio]
    return min(ok, key=lambda p: (p.ops_ratio, -p.threshold, -(p.branch_width or 0), -p.branch_share))


def undecided(points: Sequence[SweepPoint], min_score_ratio: float, margin: float) -> list[SweepPoint]:
    """The points the validation episodes cannot yet tell: cheaper than :func:`choose`'s choice,
    with a score ratio (fit monotone) within ``margin`` standard errors of ``min_score_ratio`` on
    either side, so that more episodes could make one the choice or rule it out. None without a
    margin: there the ratio alone decides."""
    if not margin:
        return []
    best = choose(points, min_score_ratio, margin)
    fitted = monotone_by_width(points)
    return [p for p in points if p.threshold < NEVER and p.ops_ratio < best.ops_ratio
            and fitted[(branch_key(p), p.threshold)] + margin * p.score_ratio_se >= min_score_ratio]


def decide(algo: Algorithm, nets: Mapping[BranchKey, ExitQNetwork], points: Sequence[SweepPoint], env_id: str,
           seed: int, episodes: int, max_episodes: int, min_score_ratio: float, margin: float, atari: Any = None,
           progress: Callable[[str], None] | None = None) -> int:
    """More validation episodes where the sweep cannot yet tell (:func:`undecided`), in place: each
    round the cheapest undecided point (fewest operations) plays its next ``episodes`` validation
    seeds (up to ``max_episodes`` in all), the whole network's point as many, and its ratio and
    standard error are taken again over all its episodes, paired with the whole network's on the
    same seeds; until no point is undecided or those left have played ``max_episodes``. ``nets``:
    each branch candidate's network (:func:`branch_key`). Returns the rounds played. Why: at a few
    hundred episodes a branch that plays at 0.93-0.96 of the network can sit within a standard
    error of the line, and the margin then keeps the whole network for it (docs/results.md); a few
    points played longer cost far less than every point played longer. Cheapest first, because a
    point decided in becomes the choice, and then no dearer point is undecided any more: playing
    those alongside would be spent for nothing."""
    whole = next(p for p in points if p.threshold >= NEVER)
    rounds = 0
    while todo := [p for p in undecided(points, min_score_ratio, margin) if p.episodes < max_episodes]:
        rounds += 1
        point = min(todo, key=lambda p: p.ops_ratio)
        goal = min(max_episodes, point.episodes + episodes)
        if progress:
            progress(f"round {rounds} of more validation episodes: the cheapest of {len(todo)} undecided point"
                     f"{'s' if len(todo) != 1 else ''} ({branch_label(branch_key(point))} at threshold "
                     f"{point.threshold:g}), up to {goal} episodes")
        net = nets[branch_key(point)]
        _play_more(algo, net, whole, env_id, seed, goal, atari)
        _play_more(algo, net, point, env_id, seed, goal, atari)
        base = np.asarray(whole.returns[:point.episodes])
        point.score_ratio = score_ratio(point.return_mean, float(base.mean()))
        point.score_ratio_se = score_ratio_se(np.asarray(point.returns), base)
    return rounds


def _play_more(algo: Algorithm, network: ExitQNetwork, point: SweepPoint, env_id: str, seed: int, goal: int,
               atari: Any) -> None:
    """``point`` plays its next validation seeds until it has ``goal`` episodes: its returns, mean,
    spread and exits (the decisions of all its episodes) taken again."""
    if point.episodes >= goal:
        return
    counter = ExitCounter(algo, network, point.threshold)
    more = evaluate_policy(counter, env_id, goal - point.episodes, seed, atari,
                           seed_offset=VALIDATION_SEED_OFFSET + point.episodes)
    counter.counts += np.array([round(f * point.decisions) for f in point.exit_fractions], dtype=np.int64)
    stats = counter.stats()  # over the decisions of all its episodes
    point.returns = point.returns + more.tolist()
    returns = np.asarray(point.returns)
    point.return_mean, point.return_std = float(returns.mean()), float(returns.std())
    point.macs_mean, point.ops_ratio, point.exit_fractions = stats.macs_mean, stats.ops_ratio, stats.fractions
    point.decisions = stats.decisions


@torch.no_grad()
def branch_agreement(network: ExitQNetwork, obs: torch.Tensor, chunk: int = 4096) -> list[float]:
    """Per branch, the share of ``obs`` on which its greedy action is the final head's."""
    agree = torch.zeros(len(network.exits))
    for i in range(0, len(obs), chunk):
        final, branch_q, _ = network.heads(obs[i:i + chunk])
        greedy = final.argmax(dim=1)
        agree += torch.tensor([float((q.argmax(dim=1) == greedy).sum()) for q in branch_q])
    return (agree / max(1, len(obs))).tolist()


def fit_branches(network: ExitQNetwork, data: Any, config: Any, updates: int = FIT_UPDATES, seed: int = 0,
                 progress: Callable[[str], None] | None = None, width: int | None = None,
                 share: float | None = None, play: torch.Tensor | None = None, fresh: bool = True,
                 stream: int = 0) -> BranchFit:
    """Fit ``network``'s branches in place to its own final head on ``data`` (a
    :class:`hetrl.cosearch.teacher.TeacherData`: the run's replay states), the backbone and final
    head frozen: fresh branch weights (seeded), then ``updates`` Adam steps (``FIT_LR``, batches of
    ``FIT_BATCH``) of the run's branch loss (``config``: its exit-dqn config, for ``exit_target`` and
    the distillation temperature); TD targets, where the target asks for them, from the frozen final head.
    Agreement is measured on held-out states. The fit starts afresh because a branch that learnt
    beside a moving backbone may keep hidden units that no state activates any more (dead ReLUs),
    which no further descent revives. ``width``: the fresh branches have that many hidden units
    (default: as many as the trained ones; the same width gives the same fresh weights either way);
    ``share``: they read that share of their block's outputs (default: as the trained ones).
    ``play``: observations added to the training part (states the branches' own play visited,
    labelled by the final head: :func:`fit_on_own_play`); the held-out states are always ``data``'s
    (the seed's split), so agreement compares across fits. ``fresh=False`` goes on from the
    branches' weights; ``stream``: which stream of batches the updates draw (another per round)."""
    from hetrl.algos.exit_dqn import STATE_TARGETS, branch_loss
    from hetrl.profile import torch_threads

    if updates < 0:
        raise HetrlError(f"branch-fit updates must be >= 0 (got {updates})")
    if len(data) < 2:
        raise HetrlError(f"the branch fit needs states; got {len(data)}")
    if play is not None and config.exit_target not in STATE_TARGETS:
        raise HetrlError(f"a fit on the branches' own play labels states by the final head alone; exit_target "
                         f"{config.exit_target!r} learns from transitions: fit without play rounds, or use "
                         f"exit_target=policy or distill")
    if not fresh and (width is not None or share is not None):
        raise HetrlError("a fit that goes on from the branches' weights keeps their width and share")
    generator = torch.Generator().manual_seed(seed)
    train, held = data.split(1.0 - FIT_HELD_OUT, generator)
    if stream:
        generator.manual_seed(seed + 7919 * stream)
    if play is not None and len(play):
        train = train.with_states(play.to(train.obs.dtype), "and the branches' own play")
    before = branch_agreement(network, held.obs)
    frozen = [p for p in network.parameters() if not p.requires_grad]  # a loaded policy's are
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if fresh and width is None and share is None:
            for branch in network.branches:
                branch.reset_parameters()
        elif fresh:
            network.set_branch_width(network.branch_widths[0] if width is None else width, share=share)
    params = list(network.branches.parameters())
    for p in params:
        p.requires_grad_(True)
    optimizer = torch.optim.Adam(params, lr=FIT_LR)
    batch_size = FIT_BATCH
    needs_td = config.exit_target in ("td", "both")
    cache = _backbone_outputs(network, train, needs_td)
    # on kept outputs, one thread: the branches' matrices are small, and a pool of threads spinning
    # beside other work on a shared host made the fit over ten times slower (docs/results.md)
    with torch_threads(1 if cache is not None else None):
        for step in range(updates):
            rows = torch.randint(len(train), (batch_size,), generator=generator)
            if cache is not None:  # the frozen backbone's outputs, computed once: no observation gathered
                final_all, inputs, targets = cache
                actions = train.actions[rows]
                final = final_all[rows]
                heads = [network.branch_heads(j, x[rows]) for j, x in enumerate(inputs)]
                branch_q, branch_logits = [q for q, _ in heads], [logit for _, logit in heads]
                target = targets[rows] if targets is not None else final.new_zeros(batch_size)
            else:
                batch = train.take(rows)
                actions = batch["actions"]
                final, branch_q, branch_logits = network.heads(batch["obs"], detach=True)
                final = final.detach()
                target = final.new_zeros(batch_size)
                if needs_td:
                    with torch.no_grad():
                        target = batch["rewards"] + batch["discounts"] * network.final(batch["next_obs"]).max(dim=1).values
            loss = branch_loss(final, branch_q, branch_logits, actions.unsqueeze(1), target,
                               torch.ones(batch_size), config.exit_target, config.exit_distill_temperature,
                               getattr(config, "exit_confidence_tolerance", 0.0))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if progress and (step + 1) % 5000 == 0:
                progress(f"{step + 1:,} of {updates:,} updates")
    for p in network.parameters():
        p.grad = None
    for p in frozen + (params if frozen else []):  # fresh branches of a frozen network are frozen too
        p.requires_grad_(False)
    return BranchFit(updates, len(data), data.source, before, branch_agreement(network, held.obs),
                     network.branch_widths, float(getattr(config, "exit_share", 1.0) if share is None else share),
                     tolerance=float(getattr(config, "exit_confidence_tolerance", 0.0)))


def fit_on_own_play(algo: Algorithm, network: ExitQNetwork, data: Any, env_id: str, seed: int, rounds: int,
                    updates: int = FIT_UPDATES, atari: Any = None, progress: Callable[[str], None] | None = None,
                    width: int | None = None, share: float | None = None, config: Any = None) -> BranchFit:
    """:func:`fit_branches` on ``data`` (the run's replay), then ``rounds`` rounds of DAgger (Ross et al.
    2011): the branches' own policy (every decision at the first branch, threshold 0) plays
    ``FIT_PLAY_EPISODES`` episodes (seeds apart from training's, validation's and the test episodes;
    at most ``FIT_PLAY_DECISIONS`` decisions), a uniform sample of the states it met
    (``FIT_PLAY_STATES`` a round) joins the training states, labelled by the frozen final head, and
    the fit goes on ``FIT_ROUND_SHARE`` of ``updates`` from the branches' weights. Why: the replay
    holds the states the epsilon-greedy training policy visited; a branch that takes the decisions
    drifts to others, where its errors compound (docs/results.md). ``config``: the branch loss's
    settings (default: ``algo``'s)."""
    if rounds < 0:
        raise HetrlError(f"rounds of the branch fit on its own play must be >= 0 (got {rounds})")
    config = algo.config if config is None else config
    fit = fit_branches(network, data, config, updates, seed, progress, width, share)
    played: list[torch.Tensor] = []
    for k in range(1, rounds + 1):
        if progress:
            progress(f"round {k} of {rounds}: {FIT_PLAY_EPISODES} episodes of the branches' own play")
        counter = ExitCounter(algo, network, 0.0, keep=FIT_PLAY_STATES, seed=seed + k)
        evaluate_policy(counter, env_id, FIT_PLAY_EPISODES, seed, atari,
                        seed_offset=FIT_PLAY_SEED_OFFSET + (k - 1) * FIT_PLAY_EPISODES,
                        should_stop=lambda: counter.seen >= FIT_PLAY_DECISIONS)
        played.append(torch.as_tensor(counter.observations()))
        last = fit_branches(network, data, config, round(FIT_ROUND_SHARE * updates), seed, progress,
                            play=torch.cat(played), fresh=False, stream=k)
        fit.agreement_after, fit.updates = last.agreement_after, fit.updates + last.updates
    fit.rounds, fit.play_states = rounds, sum(len(x) for x in played)
    return fit


@torch.no_grad()
def _backbone_outputs(network: ExitQNetwork, data: Any, needs_td: bool,
                      chunk: int = 4096) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor | None] | None:
    """The frozen backbone's outputs on every state of ``data``: the final Q-values, each branch's
    input and (``needs_td``) the TD targets; None where they would pass ``FIT_CACHE_BYTES`` (the
    Nature CNN's early feature maps on 45,000 states), and the fit computes them per batch."""
    features = sum(branch.in_features for branch in network.branches)
    if 4 * len(data) * (features + network.n_actions + 1) > FIT_CACHE_BYTES:
        return None
    finals, inputs, targets = [], [[] for _ in network.branches], []
    for i in range(0, len(data), chunk):
        final, xs = network.branch_inputs(data.obs[i:i + chunk])
        finals.append(final)
        for store, x in zip(inputs, xs):
            store.append(x)
        if needs_td:
            targets.append(data.rewards[i:i + chunk] + data.discounts[i:i + chunk]
                           * network.final(data.next_obs[i:i + chunk]).max(dim=1).values)
    return torch.cat(finals), [torch.cat(x) for x in inputs], torch.cat(targets) if needs_td else None


def sweep_policy(algo: Algorithm, network: ExitQNetwork, env_id: str, seed: int, episodes: int,
                 thresholds: Sequence[float] = THRESHOLDS, atari: Any = None, batch: int = 1, backend: str = "torch",
                 timing: bool = True, timing_seconds: float = 0.2,
                 progress: Callable[[str], None] | None = None, baseline: SweepPoint | None = None,
                 share: float = 1.0) -> list[SweepPoint]:
    """Every threshold's point on the validation episodes: the full network's first, unless
    ``baseline`` is it already (a sweep of another branch candidate: the full network runs no
    branch, so its point is the same), and the ratios are to it. ``share``: the branches' share of
    their block's outputs, as the points record it."""
    values = sorted({float(t) for t in thresholds} | {NEVER}, reverse=True)
    points: list[SweepPoint] = []
    base_return = base_b1 = base_batch = None
    base_returns = np.zeros(0)
    if baseline is not None:
        values = [t for t in values if t < NEVER]
        base_return, base_returns = baseline.return_mean, np.asarray(baseline.returns)
        if baseline.latency_b1_us is not None and baseline.latency_batch_us is not None:
            base_b1, base_batch = 1e-6 * baseline.latency_b1_us, 1e-6 * baseline.latency_batch_us
    width = network.branch_widths[0]
    for threshold in values:
        if progress:
            units = f" (branches of {branch_label((width, share))})" if threshold < NEVER else ""
            progress(f"validation episodes at threshold {threshold:g}{units}")
        counter = ExitCounter(algo, network, threshold, keep=KEPT_OBSERVATIONS if timing else 0, seed=seed)
        returns = evaluate_policy(counter, env_id, episodes, seed, atari, seed_offset=VALIDATION_SEED_OFFSET)
        stats = counter.stats()
        mean = float(returns.mean())
        if base_return is None:
            base_return, base_returns = mean, returns
        point = SweepPoint(threshold, mean, float(returns.std()), score_ratio(mean, base_return), stats.macs_mean,
                           stats.ops_ratio, stats.fractions, branch_width=width if threshold < NEVER else None,
                           branch_share=share if threshold < NEVER else 1.0, score_ratio_se=score_ratio_se(returns, base_returns),
                           returns=returns.tolist(), decisions=stats.decisions)
        if timing:
            obs = counter.observations()
            b1, p10, p90 = decision_latency(algo, network, threshold, obs, 1, backend, timing_seconds)
            bb = decision_latency(algo, network, threshold, obs, batch, backend, timing_seconds)[0] if batch > 1 else b1
            if base_b1 is None:
                base_b1, base_batch = b1, bb
            point.latency_b1_us, point.latency_b1_spread_us, point.latency_batch_us = 1e6 * b1, (1e6 * p10, 1e6 * p90), 1e6 * bb
            point.latency_ratio_b1, point.latency_ratio_batch = b1 / base_b1, bb / base_batch
        points.append(point)
    return points


def executor_batch(run: Any) -> tuple[int, str]:
    """The batch the run's Act served and its backend: envs per actor (times the actors under
    central inference), from the run's plan.json; (1, "torch") without one. A backend that ran on
    a device is timed as torch on the host."""
    from hetrl.planner.plan_file import Plan

    if not run.plan.exists():
        return 1, "torch"
    plan = Plan.load(run.plan)
    batch = plan.num_envs * (plan.actors if plan.executor == "local" and plan.inference == "central" else 1)
    act = plan.placement.act
    backend = act.backend if act.device == "cpu" else "torch"  # the run's host Act served this network
    return max(1, batch), backend


def _replaced(value: Any, new: torch.Tensor) -> Any:
    """``new`` in the form ``value`` is stored in: a tensor, an array, or an encoded numpy array."""
    if isinstance(value, torch.Tensor):
        return new.detach().to(value.dtype).clone()
    if isinstance(value, np.ndarray):
        return new.detach().cpu().numpy().astype(value.dtype)
    return safe_state.encode(new.detach().cpu().numpy().astype(np.dtype(str(value["dtype"]))))  # a numpy copy's


def _stored_array(value: Any) -> bool:
    return isinstance(value, (torch.Tensor, np.ndarray)) or (isinstance(value, dict)
                                                             and value.get(safe_state.TAG) == "ndarray")


def _exit_state(node: Any) -> bool:
    return isinstance(node, dict) and _stored_array(node.get("exit_threshold"))


def _with_branches(node: dict[str, Any], branches: Mapping[str, torch.Tensor], path: Path) -> dict[str, Any]:
    """An exit network's stored state with its ``branches.*`` entries replaced by ``branches`` (of
    any width), in the storage form of the old ones, where the old ones were."""
    old = [k for k in node if k.startswith("branches.")]
    if not old:
        raise HetrlError(f"{path}: an exit network state without branches; the checkpoint does not hold the network "
                         "that was fit")
    template = node[old[0]]
    out = type(node)()  # a module's state dict (an OrderedDict) keeps its version record
    if hasattr(node, "_metadata"):
        out._metadata = node._metadata  # type: ignore[attr-defined]
    for key, value in node.items():
        if key == old[0]:
            out.update({k: _replaced(template, v) for k, v in branches.items()})
        elif key not in old:
            out[key] = value
    return out


def _fresh_branch_moments(optimizer: dict[str, Any], names: Sequence[str], path: Path) -> dict[str, Any]:
    """A stored torch optimizer's state over the parameters ``names`` (the network's, in order; its
    branches last) with the branches' moments dropped: fitted (or re-shaped) branches start their
    Adam statistics afresh, as fresh parameters do."""
    groups = optimizer.get("param_groups", [])
    if len(groups) != 1:
        raise HetrlError(f"{path}: the learner's optimizer has {len(groups)} parameter groups, where exit-dqn's has one; "
                         "this checkpoint cannot take refitted branches (sweep with --no-store)")
    first = next(i for i, name in enumerate(names) if name.startswith("branches."))
    if not all(name.startswith("branches.") for name in names[first:]):
        raise HetrlError(f"{path}: the network's branches are not its last parameters; cannot rewrite its optimizer")
    state = {i: v for i, v in optimizer.get("state", {}).items() if int(i) < first}
    return {**optimizer, "state": state, "param_groups": [{**groups[0], "params": list(range(len(names)))}]}


def store_threshold(path: Path, threshold: float, network: ExitQNetwork | None = None,
                    share: float | None = None) -> int:
    """Write ``threshold`` into every exit network state of checkpoint ``path`` (the policy, the
    learner's networks, an acting copy): the entries named ``exit_threshold``. With ``network``
    (its branches as :func:`fit_branches` left them, of any width), its ``branches.*`` entries
    replace those of the same states too, so a threshold is never stored apart from the branches
    it was chosen for; the learner's Adam moments of the branches start afresh, and the
    checkpoint's own config records their width (``exit_hidden``) and ``share`` where given
    (``exit_share``), so that resuming it under a run of other branches names that setting.
    Returns how many states were written; with ``network``, the checkpoint is marked (``FITTED_KEY``)
    so that a later sweep of it does not call its branches the trained ones."""
    state = safe_state.read(path)  # the file as saved (weights_only): arrays and signed pickles stay encoded
    found = 0
    branches = ({k: v for k, v in network.state_dict().items() if k.startswith("branches.")}
                if network is not None else None)
    names = [name for name, _ in network.named_parameters()] if network is not None else []

    def walk(node: Any) -> Any:
        nonlocal found
        if isinstance(node, dict):
            if _exit_state(node):  # an exit network's state
                value = node["exit_threshold"]
                shape = tuple(value["data"].shape if isinstance(value, dict) else value.shape)
                node["exit_threshold"] = _replaced(value, torch.full(shape, float(threshold)))
                found += 1
                return node if branches is None else _with_branches(node, branches, path)
            if branches is not None and _exit_state(node.get("q")) and isinstance(node.get("optimizer"), dict):
                node["optimizer"] = _fresh_branch_moments(node["optimizer"], names, path)  # a learner's
            for key in list(node):
                node[key] = walk(node[key])
        elif isinstance(node, list):
            node[:] = [walk(item) for item in node]
        elif isinstance(node, tuple):
            return tuple(walk(item) for item in node)
        return node

    walk(state)
    if found and network is not None:
        state[FITTED_KEY] = True
    widths = set(network.branch_widths) if network is not None else set()
    config = state.get("config")
    if len(widths) == 1 and isinstance(config, dict) and isinstance(config.get("agent"), dict):
        config["agent"]["exit_hidden"] = widths.pop()
        if share is not None:
            config["agent"]["exit_share"] = float(share)
    if found:
        write_file(path, lambda f: torch.save(state, f))
    return found


def fitted_before(path: str | Path) -> bool:
    """Whether checkpoint ``path`` holds branches an earlier sweep fit and stored (:func:`store_threshold`)."""
    return bool(safe_state.read(Path(path)).get(FITTED_KEY, False))


def adopt_stored_width(config: Any, state: Mapping[str, Any]) -> None:
    """Set ``config``'s ``exit_hidden`` and ``exit_share`` (an exit-dqn run's, in place) to the
    branches a swept checkpoint ``state`` records (:func:`store_threshold`), so that the networks
    built from it take the checkpoint's state: evaluation plays the branches the sweep stored. A
    resume does not: it goes on training the run as config.json describes it."""
    saved = state.get("config")
    agent = saved.get("agent") if isinstance(saved, dict) else None
    if isinstance(agent, dict) and "exit_hidden" in agent and hasattr(config.agent, "exit_hidden"):
        config.agent.exit_hidden = int(agent["exit_hidden"])
    if isinstance(agent, dict) and "exit_share" in agent and hasattr(config.agent, "exit_share"):
        config.agent.exit_share = float(agent["exit_share"])


def sweep(run_dir: str | Path, checkpoint: str | Path | None = None, episodes: int = 20,
          thresholds: Sequence[float] = THRESHOLDS, min_score_ratio: float = MIN_SCORE_RATIO,
          out: str | Path | None = None, store: bool = True, timing: bool = True, timing_seconds: float = 0.2,
          progress: Callable[[str], None] | None = None, fit_updates: int = FIT_UPDATES,
          widths: Sequence[int] | None = None, margin: float = SCORE_MARGIN,
          shares: Sequence[float] | None = None, fit_rounds: int | None = None,
          confidence_tolerance: float | None = None, max_episodes: int | None = None) -> SweepResult:
    """``hetrl exits sweep``: for each branch candidate (:func:`candidate_branches` of ``widths``
    and ``shares``; by default narrower widths than the trained one, at the trained share), the
    branches fit to the trained network (``fit_updates``; 0: as trained, their width and share
    only), then the trade-off of every threshold on the validation episodes; the choice over every
    (branch, threshold) pair (:func:`choose`), written as a table and a PNG, and the chosen
    threshold, with the chosen branches, stored in the checkpoint (``store``). ``margin``:
    standard errors of its validation score ratio by which the chosen point clears
    ``min_score_ratio``. ``fit_rounds``: rounds of the fit on the branches' own play after the fit
    on the replay (:func:`fit_on_own_play`; default ``FIT_ROUNDS``, none without the fit or for a
    TD target); ``confidence_tolerance``: the fit's ``exit_confidence_tolerance`` (default: the
    run's). ``max_episodes``: the validation episodes a point the sweep cannot yet tell plays in
    all, in steps of ``episodes`` (:func:`decide`; default ``MORE_EPISODES`` times ``episodes``;
    ``episodes``: none more)."""
    from hetrl.algos.exit_dqn import STATE_TARGETS
    from hetrl.cosearch.teacher import Teacher
    from hetrl.policy import load
    from hetrl.run.rundir import RunDir

    if episodes <= 0:
        raise HetrlError(f"episodes must be > 0 (got {episodes})")
    max_episodes = MORE_EPISODES * episodes if max_episodes is None else max_episodes
    if max_episodes < episodes:
        raise HetrlError(f"the most validation episodes a point plays ({max_episodes}) is below the episodes every "
                         f"point plays ({episodes}); give --max-episodes {episodes} or more ({episodes}: none more)")
    if fit_updates < 0:
        raise HetrlError(f"fit updates must be >= 0 (got {fit_updates}); 0 sweeps the branches as trained")
    if fit_rounds is not None and fit_rounds < 0:
        raise HetrlError(f"fit rounds must be >= 0 (got {fit_rounds}); 0 fits on the replay alone")
    if fit_rounds and not fit_updates:
        raise HetrlError(f"{fit_rounds} fit rounds on the branches' own play need the fit: give fit updates > 0")
    if confidence_tolerance is not None and not 0 <= confidence_tolerance <= 1:
        raise HetrlError(f"the confidence tolerance is a share of a state's spread of Q-values in [0, 1] (got "
                         f"{confidence_tolerance}); 0: a confident branch takes the final head's action")
    if confidence_tolerance is not None and not fit_updates:
        raise HetrlError("a confidence tolerance trains the branches' confidence heads: give fit updates > 0")
    bad = [t for t in thresholds if not 0 <= t <= 1]
    if bad:
        raise HetrlError(f"thresholds must be in [0, 1] (got {bad})")
    if not margin >= 0:
        raise HetrlError(f"the margin is a count of standard errors >= 0 (got {margin}); 0: the score ratio alone")
    if widths is not None and (not widths or any(int(w) != w or w < 0 for w in widths)):
        raise HetrlError(f"branch widths must be hidden-unit counts >= 0 (got {list(widths)}); 0: linear heads")
    if shares is not None and (not shares or any(not 0 < x <= 1 for x in shares)):
        raise HetrlError(f"branch shares must be in (0, 1], the share of its block's outputs a branch reads (got {list(shares)})")
    run = RunDir.open(run_dir)
    cfg = run.load_config()
    policy = load(run.path, checkpoint)
    network = policy.network
    if not isinstance(network, ExitQNetwork):
        raise HetrlError(f"{run.path} trained {cfg.algo}, whose network has no exits; sweep an exit-dqn run")
    current = network.branch_widths[0]  # the checkpoint's branches (an earlier sweep may have chosen them)
    current_share = float(getattr(policy.algo.config, "exit_share", 1.0))  # as the checkpoint stored them
    trained = int(getattr(cfg.agent, "exit_hidden", current))  # the width the run trained with
    trained_share = float(getattr(cfg.agent, "exit_share", 1.0))
    if fit_updates:  # the ladder from the run's own branches
        candidates = candidate_branches(trained, trained_share, shares, widths)
    else:  # without the fit, the branches as they are
        candidates = [(int(w), float(x)) for w in (widths or (current,)) for x in (shares or (current_share,))]
        others = [key for key in candidates if key != (current, current_share)]
        if others:
            raise HetrlError(f"branches of {', '.join(branch_label(k) for k in others)} need the fit (the checkpoint's "
                             f"have {branch_label((current, current_share))}); give fit updates > 0, or sweep those only")
    data = None
    was_fitted = fit_updates > 0 and fitted_before(policy.source)
    if fit_updates:
        teacher = Teacher(run.path, checkpoint, policy)  # the run's replay states (or, without one, its play)
        data = teacher.data(FIT_STATES, "auto", cfg.seed)
    fit_config = policy.algo.config
    if confidence_tolerance is not None:
        fit_config = replace(fit_config, exit_confidence_tolerance=float(confidence_tolerance))
    labels_states = fit_config.exit_target in STATE_TARGETS  # a TD target needs transitions
    if fit_rounds is None:
        fit_rounds = FIT_ROUNDS if fit_updates and labels_states else 0
    if fit_rounds and not labels_states:
        raise HetrlError(f"{fit_rounds} fit rounds on the branches' own play: its states carry no transitions, and "
                         f"this run's exit_target {fit_config.exit_target!r} learns from them; give --fit-rounds 0")
    batch, backend = executor_batch(run)
    points: list[SweepPoint] = []
    fits: list[BranchFit] = []
    nets: dict[BranchKey, ExitQNetwork] = {}
    whole: SweepPoint | None = None
    for width, share in candidates:
        net = copy.deepcopy(network) if len(candidates) > 1 else network
        if data is not None:
            if progress:
                progress(f"fitting branches of {branch_label((width, share))} to the trained network "
                         f"({fit_updates:,} updates)")
            fits.append(fit_on_own_play(policy.algo, net, data, cfg.env, cfg.seed, fit_rounds, fit_updates,
                                        policy.spec.atari, progress, width, share, fit_config))
            if was_fitted:
                fits[-1].before = FITTED_BEFORE
        mine = sweep_policy(policy.algo, net, cfg.env, cfg.seed, episodes, thresholds, policy.spec.atari, batch,
                            backend, timing, timing_seconds, progress, baseline=whole, share=share)
        whole = whole or mine[0]
        points += mine
        nets[(width, share)] = net
    rounds = decide(policy.algo, nets, points, cfg.env, cfg.seed, episodes, max_episodes, min_score_ratio, margin,
                    policy.spec.atari, progress)
    best = choose(points, min_score_ratio, margin)
    chosen = branch_key(best) or candidates[0]
    result = SweepResult(str(run.path), str(policy.source), cfg.env, episodes, VALIDATION_SEED_OFFSET, batch, backend,
                         network.baseline_macs, network.exit_names(), min_score_ratio, best.threshold, points,
                         fits=fits, trained_width=trained, widths=[w for w, _ in candidates], chosen_width=chosen[0],
                         margin=margin, trained_share=trained_share, shares=[x for _, x in candidates],
                         chosen_share=chosen[1], max_episodes=max_episodes, decide_rounds=rounds)
    if store:
        stored = nets[chosen] if data is not None else None  # as trained: the threshold alone
        result.stored = store_threshold(Path(policy.source), best.threshold, stored, chosen[1]) > 0
    folder = Path(out) if out is not None else run.path / "exits"
    write_json(folder / "sweep.json", asdict(result))
    write_text(folder / "sweep.md", markdown(result) + "\n")
    plot(result, folder / "sweep.png")
    return result


def markdown(result: SweepResult) -> str:
    """The trade-off as a markdown table (the chosen point marked)."""
    names = " | ".join(result.exit_names)
    branches = "; ".join(branch_label(key) for key in result.candidates) or branch_label((result.trained_width, 1.0))
    lines = [
        (f"Exit thresholds of {result.checkpoint} on {result.episodes} validation episodes of {result.env} "
         f"(seeds apart from the test episodes{more_episodes(result)}); branches of {branches} (the run trained "
         f"{branch_label((result.trained_width, result.trained_share))}); baseline {result.baseline_macs:,} MACs per decision; "
         f"latency: Act/{result.backend} on the host, one thread, batch 1 and batch {result.batch}."),
        "",
        (f"| branch | threshold | return | score ratio ± s.e. | episodes | monotone fit | MACs/decision | ops ratio | "
         f"{names} | us/decision b1 (p10-p90) | latency ratio b1 | us/decision b{result.batch} | latency ratio b{result.batch} |"),
        "|" + "---|" * (12 + len(result.exit_names)),
    ]
    fitted = monotone_by_width(result.points)
    chosen = result.chosen_point
    for p in result.points:
        mark = " **chosen**" if p is chosen else ""
        shares = " | ".join(f"{100 * f:.1f}%" for f in p.exit_fractions)
        if p.latency_b1_us is not None:
            lo, hi = p.latency_b1_spread_us or (p.latency_b1_us, p.latency_b1_us)
            timing = (f"{p.latency_b1_us:.1f} ({lo:.1f}-{hi:.1f}) | {p.latency_ratio_b1:.2f} | "
                      f"{p.latency_batch_us:.1f} | {p.latency_ratio_batch:.2f}")
        else:
            timing = "- | - | - | -"
        units = "- (whole network)" if p.branch_width is None else branch_label(branch_key(p))
        lines.append(f"| {units} | {p.threshold:g}{mark} | {p.return_mean:.2f} ± {p.return_std:.2f} | "
                     f"{p.score_ratio:.3f} ± {p.score_ratio_se:.3f} | {p.episodes or result.episodes} | "
                     f"{fitted[(branch_key(p), p.threshold)]:.3f} | {p.macs_mean:,.0f} | {p.ops_ratio:.3f} | {shares} | "
                     f"{timing} |")
    lines += [""] + [fit.describe(result.exit_names[:-1]) + "." for fit in result.fits]
    where = f"; stored in {result.checkpoint}" if result.stored else " (not stored)"
    units = f"branches of {branch_label((result.chosen_width, result.chosen_share))}, " if chosen.threshold < NEVER else ""
    spare = f" with {result.margin:g} standard error{'s' if result.margin != 1 else ''} to spare" if result.margin else ""
    lines += ["", f"Chosen: {units}threshold {result.chosen:g}, the fewest operations at a score ratio of at least "
                  f"{result.min_score_ratio:g}{spare} on the validation episodes, the ratios of each branch fit to fall "
                  f"with the threshold (isotonic regression){where}.",
              "", f"To plan a run that acts with these exits at this distribution: {planning_settings(result)}"]
    return "\n".join(lines)


def more_episodes(result: SweepResult) -> str:
    """What the sweep's :func:`decide` played, for its report's first line ("" where it could play none)."""
    if result.max_episodes <= result.episodes:
        return ""
    if not result.decide_rounds:
        return f"; no point lay within the margin of the line, so none played more (up to {result.max_episodes} could)"
    rounds = f"{result.decide_rounds} round{'s' if result.decide_rounds != 1 else ''}"
    return (f"; points whose ratio lay within the margin of the line played more, in {rounds}, up to "
            f"{result.max_episodes}")


def planning_settings(result: SweepResult) -> str:
    """The ``--set`` flags under which the profiler times Act at the chosen point's exit shares
    (``exit_rates``) and branch width, so a plan costs acting as the validation episodes measured it."""
    point = result.chosen_point
    if point.threshold >= NEVER:
        return "--set act_with_exits=false (the chosen point is the whole network)"
    rates = ",".join(f"{f:.4g}" for f in point.exit_fractions)
    width = f" --set exit_hidden={result.chosen_width}" if result.chosen_width != result.trained_width else ""
    width += f" --set exit_share={result.chosen_share:g}" if result.chosen_share != result.trained_share else ""
    return f"--set act_with_exits=true --set exit_threshold={point.threshold:g} --set exit_rates={rates}{width}"


def plot(result: SweepResult, path: Path) -> None:
    """Score ratio against operations ratio (and latency ratio), one point per threshold, one line
    per branch width (each from the whole network's point)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    n_whole = sum(p.threshold >= NEVER for p in result.points)
    curves = width_curves(result.points) or {None: list(result.points)}
    for k, (key, curve) in enumerate(curves.items()):
        label = "operations ratio" + (f", {branch_label(key)}" if key is not None else "")
        color = plt.get_cmap("tab10")(k if k < 1 else k + 2)  # not orange or green (latency, chosen)
        ax.plot([p.ops_ratio for p in curve], [p.score_ratio for p in curve], "o-", color=color, label=label)
        if all(p.latency_ratio_b1 is not None for p in curve):
            ax.plot([p.latency_ratio_b1 for p in curve], [p.score_ratio for p in curve], "s--", color=color, alpha=0.5,
                    label=f"latency ratio (batch 1){f', {branch_label(key)}' if key is not None else ''}")
        for p in curve[n_whole:]:
            ax.annotate(f"{p.threshold:g}", (p.ops_ratio, p.score_ratio), textcoords="offset points", xytext=(4, 4),
                        fontsize=7)
    chosen = result.chosen_point
    label = f"chosen ({result.chosen:g}" + (f", {branch_label((result.chosen_width, result.chosen_share))})"
                                           if chosen.threshold < NEVER else ")")
    ax.plot([chosen.ops_ratio], [chosen.score_ratio], "*", color="tab:red", markersize=14, label=label)
    ax.axhline(result.min_score_ratio, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("cost ratio to the full network (operations, latency)")
    ax.set_ylabel("score ratio (validation episodes)")
    ax.set_title(f"exit thresholds and branches: {result.env}")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=7)
    fig.tight_layout()
    write_file(path, lambda f: fig.savefig(f, format="png", dpi=100))
    plt.close(fig)
