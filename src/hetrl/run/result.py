"""What a training run hands back (``hetrl.train``'s result and summary.json's fields)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class TrainResult:
    """A run's (or a resumed session's) measured figures; summary.json holds the same fields.
    Rates are measured; ``predicted_*`` fields are the plan's model's predictions."""

    run_dir: Path
    algo: str
    env: str
    env_steps: int
    updates: int
    wall_s: float  # this session only (a resumed run counts from the resume)
    env_steps_per_s: float
    updates_per_s: float
    eval_return_mean: float | None  # the final evaluation (the policy at the end of the run)
    eval_return_std: float | None
    eval_episodes: int
    solved_at: int | None  # env step at which stop_at_return was reached, stopping the run before its budget
    interrupted: bool
    placement: dict[str, str]
    timers: list[tuple[str, int, float, float]]
    learning_env_steps_per_s: float | None  # measured after learning_starts, evaluations excluded
    predicted_env_steps_per_s: float | None  # the plan's model prediction for the learning phase
    predicted_us_per_call: dict[str, float] | None
    executor: str = "inline"
    actors: int = 0  # actor processes (0: acting happens in the learner's loop)
    actor_restarts: int = 0
    actors_lost: int = 0  # actors not restarted: their node left the Ray cluster and no other had room
    staleness_mean: float | None = None  # updates between the acting weights and the learner's, per transition
    staleness_max: int | None = None
    replay_ratio: float | None = None  # configured gradient updates per env step
    replay_ratio_measured: float | None = None  # updates / env steps after learning_starts, this session
    replay_ratio_window_error: float | None = None  # worst relative error over 1,000-step windows (local, ray)
    energy: str = "not measured"  # what the meters measured over the training loop, or why nothing
    joules_per_env_step: float | None = None  # measured by RAPL/NVML (and the user's cpu_watts/gpu_watts where set); None where no meter works
    joules_per_update: float | None = None  # the same energy per gradient update of the run (None without updates)
    energy_status: str = "measured"  # what joules_per_env_step is: measured, or in part the user's figure (EnergyResult.status)
    energy_methods: str = ""  # how each figure behind the joules was obtained, by meter (EnergyResult.methods); "" where none was
    predicted_joules_per_env_step: float | None = None  # the plan's model, from the profile's measured energy
    accelerator_utilisation: float | None = None  # the learner's GPU's busy share (0..1, NVML, learning phase); None where unavailable
    accelerator_utilisation_p10: float | None = None  # p10 and p90 of the readings behind it
    accelerator_utilisation_p90: float | None = None
    accelerator_busy: str = "not measured"  # that figure with its method (hetrl.energy.busy), or why there is none
    accelerator_busy_method: str = ""  # how that figure was read (BusyResult.method); "" where there is none
    defaults: str = ""  # where the settings came from: a tuned row (hetrl.tuned) or the generic defaults
    best_eval_return_mean: float | None = None  # the best evaluation of the run so far (its policy: checkpoints/best.pt)
    best_eval_return_std: float | None = None
    best_eval_step: int | None = None  # the env step of that evaluation
    predicted_cpu_share: float | None = None  # the share of a core the prediction assumes (measured at the start)
    profile_check: str | None = None  # plan=auto: the profile measured now, or cached and checked (refreshed if off)
    replay_bytes: int | None = None  # the replay's storage, allocated for its whole capacity
    replay_capacity: int | None = None  # transitions it holds when full (buffer_size)
    stopped_at: int | None = None  # env step at which a callback stopped the run (hetrl.Callback)
    stop_signal: str | None = None  # the signal that stopped an interrupted run: SIGINT (Ctrl-C) or SIGTERM
    metrics: list[dict[str, float | None]] = field(repr=False, default_factory=list)
