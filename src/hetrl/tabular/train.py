"""Data-parallel tabular Q-learning and SARSA over an experience dataset.

The dataset is split into ``units`` shards; each unit learns its own Q-table from its shard
(``epochs`` passes in the chosen order) and the tables are averaged at the end, or every
``merge_every`` updates of each unit, after which every unit continues from the average.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from hetrl.errors import HetrlError, check_int, did_you_mean, field_type_problems
from hetrl.primitives import build, implementations
from hetrl.protocol import Slot
from hetrl.tabular.dataset import TabularDataset
from hetrl.tabular.evaluate import greedy_policy
from hetrl.tabular.fixed_point import DEFAULT_SCALE, FixedPoint, coefficient
from hetrl.tabular.kernels import pack
from hetrl.tabular.merge import merge_tables
from hetrl.tabular.options import ALGOS, FORMATS
from hetrl.tabular.schedule import Order, shard_bounds
from hetrl.tabular.units import AUTO, UpdateRule, resolve_backend

# Without merges or a progress callback the whole run is one call per unit; with a progress
# callback it is cut into about this many calls.
PROGRESS_STEPS = 100


@dataclass(frozen=True)
class TabularConfig:
    """Hyperparameters and placement of a tabular training run."""

    algo: str = "q"  # "q" (Q-learning) or "sarsa"
    number_format: str = "fp32"  # "fp32" or "int32" (fixed point, see hetrl.tabular.fixed_point)
    units: int = 1
    epochs: int = 10
    alpha: float = 0.02
    gamma: float = 0.99
    order: Order = field(default_factory=Order)
    merge_every: int | None = None  # None: merge once, at the end
    scale: int = DEFAULT_SCALE  # int32 only: a Q-value x is stored as round(x * scale)
    backend: str = AUTO
    device: str | None = None  # torch backend only

    def __post_init__(self) -> None:
        problems = field_type_problems(self)
        if problems:
            raise HetrlError("invalid tabular config: " + "; ".join(problems))
        for name, value, choices in (("algo", self.algo, ALGOS), ("format", self.number_format, FORMATS)):
            if value not in choices:
                raise HetrlError(f"unknown {name} {value!r}{did_you_mean(value, choices)}; choose one of {', '.join(choices)}")
        check_int("units", self.units, 1)
        FixedPoint(self.scale)  # validates the scale, used or not (int32 only), so a bad one never passes silently
        if self.epochs < 1:
            raise HetrlError(f"epochs must be >= 1 (got {self.epochs})")
        if not 0.0 < self.alpha <= 1.0:
            raise HetrlError(f"alpha must be in (0, 1] (got {self.alpha}); pass e.g. --alpha 0.1")
        if not 0.0 <= self.gamma <= 1.0:
            raise HetrlError(f"gamma must be in [0, 1] (got {self.gamma}); pass e.g. --gamma 0.99")
        if self.merge_every is not None and self.merge_every < 1:
            raise HetrlError(f"merge_every must be >= 1 update (got {self.merge_every}); omit it to merge at the end")
        if self.number_format == "int32":
            if coefficient(self.alpha, "alpha") == 0:
                raise HetrlError(f"alpha {self.alpha} rounds to 0 in 16-bit fixed point; use alpha >= 2**-17")


@dataclass(frozen=True, eq=False)
class TabularResult:
    """A learned Q-table and how the run went."""

    q: np.ndarray  # float32 [n_states, n_actions] (int32 runs: the decoded table)
    table: np.ndarray  # [n_states, n_actions] in the run's format (int32 runs: the raw int32 table)
    config: TabularConfig
    backend: str
    device: str
    updates: int  # Q-updates over all units
    learn_seconds: float  # wall time of the units' learning, merges excluded
    merge_seconds: float
    merges: int
    setup_seconds: float  # starting threads/processes/actors and loading compiled kernels
    unit_updates: np.ndarray  # per unit
    unit_seconds: np.ndarray  # per unit: seconds it spent updating

    @property
    def updates_per_second(self) -> float:
        return self.updates / self.learn_seconds if self.learn_seconds > 0 else math.inf

    @property
    def unit_updates_per_second(self) -> float:
        """The mean over units of each unit's own updates per second of its busy time."""
        with np.errstate(divide="ignore"):
            return float(np.mean(self.unit_updates / self.unit_seconds))

    def policy(self) -> np.ndarray:
        """The greedy action of every state."""
        return greedy_policy(self.q)


def train_tabular(
    dataset: TabularDataset,
    config: TabularConfig | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> TabularResult:
    """Learn a Q-table from ``dataset``; ``progress(done, total)`` counts updates over all units."""
    if not isinstance(dataset, TabularDataset):
        raise HetrlError(f"train_tabular takes a TabularDataset (hetrl.tabular.collect or load), not {type(dataset).__name__}")
    if config is not None and not isinstance(config, TabularConfig):
        raise HetrlError(f"train_tabular's config must be a TabularConfig, not {type(config).__name__}")
    config = config or TabularConfig()
    int32 = config.number_format == "int32"
    fixed = FixedPoint(config.scale) if int32 else None
    rewards = fixed.encode(dataset.reward) if fixed else dataset.reward.astype(np.float32)
    packed = pack(
        dataset.obs, dataset.action, dataset.next_obs, dataset.next_action, dataset.done, rewards,
        dataset.n_states, dataset.n_actions,
    )
    bounds = shard_bounds(len(dataset), config.units)
    rule = UpdateRule(
        sarsa=config.algo == "sarsa",
        int32=int32,
        alpha=coefficient(config.alpha, "alpha") if int32 else config.alpha,
        gamma=coefficient(config.gamma, "gamma") if int32 else config.gamma,
        n_states=dataset.n_states,
        n_actions=dataset.n_actions,
        epochs=config.epochs,
        order=config.order,
    )
    name = resolve_backend(config.backend, config.units, config.device)
    # The device checked (a one-line error naming the fix), or the backend's default; the library
    # is loaded here, before the setup is timed.
    slot = Slot(name, implementations("TabularLearn")[name].cls.place(config.device))
    streams = np.diff(bounds) * config.epochs  # updates per unit
    total, longest = int(streams.sum()), int(streams.max())
    if config.merge_every is not None:
        step = config.merge_every
    elif progress is not None:
        step = max(1, math.ceil(longest / PROGRESS_STEPS))
    else:
        step = longest
    began = time.perf_counter()
    backend = build("TabularLearn", slot, rule, 0, packed=packed, bounds=bounds)
    setup = time.perf_counter() - began
    learn = merge_time = 0.0
    merges = 0
    busy = np.zeros(config.units)
    with backend:
        position = 0
        while position < longest:
            stop = min(position + step, longest)
            began = time.perf_counter()
            busy += backend.run(position, stop)
            learn += time.perf_counter() - began
            position = stop
            last = position == longest
            if config.units > 1 and (last or config.merge_every is not None):
                began = time.perf_counter()
                merged = merge_tables(backend.tables())
                if not last:
                    backend.set_tables(merged)
                merge_time += time.perf_counter() - began
                merges += 1
            if progress is not None:
                progress(int(np.minimum(streams, position).sum()), total)
        final = merged if config.units > 1 else backend.tables()[0]
        table = final.cpu().numpy() if hasattr(final, "cpu") else np.array(final)  # to host numpy
    table = table.reshape(dataset.n_states + 1, dataset.n_actions)[: dataset.n_states]
    return TabularResult(
        q=fixed.decode(table) if fixed else table,
        table=table,
        config=config,
        backend=name,
        device=backend.device,
        updates=total,
        learn_seconds=learn,
        merge_seconds=merge_time,
        merges=merges,
        setup_seconds=setup,
        unit_updates=streams,
        unit_seconds=busy,
    )
