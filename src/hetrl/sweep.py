"""The CPU/GPU ratio: how many actor cores a learner needs (``hetrl sweep``).

Runs the same workload under the local executor at each actor count, measures the learning-phase
env steps/s, the learner's utilisation (the share of its wall time not spent waiting for data), the
accelerator's busy share (NVML's utilisation of the learner's GPU, sampled over the learning phase:
``hetrl.energy.busy``; unavailable for a host learner or without NVML) and, where a meter works,
energy per env step; then reports the knee: the fewest actors that reach 95% of the best measured
rate. Output: a table, ``sweep.json`` and ``sweep.png`` in the output folder.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path

from rich.console import Console
from rich.table import Table

from hetrl.config import TrainConfig, apply_overrides
from hetrl.errors import HetrlError
from hetrl.files import check_writable, write_file, write_json
from hetrl.training import Session, TrainResult

KNEE_FRACTION = 0.95


@dataclass(frozen=True)
class SweepPoint:
    actors: int
    env_steps_per_s: float  # learning phase, measured
    learner_utilisation: float  # 1 - the learner's share of wall time waiting for transitions
    actor_wait_share: float  # actors' share of wall time held back by the rate limiter
    joules_per_env_step: float | None  # None where no meter works
    joules_per_update: float | None  # likewise, and None without updates
    energy: str  # what was measured (each figure's meter and method), or why not
    energy_methods: str = ""  # how each figure behind the joules was obtained, by meter (TrainResult.energy_methods)
    accelerator_busy: float | None = None  # the learner's GPU's busy share (NVML, measured); None where unavailable
    accelerator_busy_note: str = "not measured"  # the figure with its method, or why there is none (TrainResult.accelerator_busy)
    accelerator_busy_method: str = ""  # how it was read (TrainResult.accelerator_busy_method)


def learner_utilisation(result: TrainResult) -> float:
    waits = {name: share for name, _, _, share in result.timers}
    return max(0.0, 1.0 - waits.get("LearnerWait", 0.0))


def knee(points: list[SweepPoint], fraction: float = KNEE_FRACTION) -> SweepPoint:
    """The fewest actors whose rate reaches ``fraction`` of the best."""
    best = max(p.env_steps_per_s for p in points)
    return min((p for p in points if p.env_steps_per_s >= fraction * best), key=lambda p: p.actors)


def parse_range(text: str) -> list[int]:
    """``1..4``, ``1,2,4`` or ``3`` as a list of actor counts."""
    try:
        if ".." in text:
            low, high = (int(x) for x in text.split(".."))
            counts = list(range(low, high + 1))
        else:
            counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise HetrlError(f"--actors {text!r}: give a range like 1..4 or a list like 1,2,4 of counts >= 1")
    return counts


def sweep(config: TrainConfig, counts: list[int], out: Path, console: Console) -> list[SweepPoint]:
    check_writable(out, "--out", directory=True)
    if out.exists() and any(out.iterdir()):
        raise HetrlError(f"{out} already holds files; pass another --out (nothing was overwritten)")
    points: list[SweepPoint] = []
    for actors in counts:
        # speed alone: no evaluation during or after the run, and no replay in its checkpoint
        cfg = apply_overrides(replace(config), ["executor=local", f"actors={actors}", "eval_every=0", "checkpoint_replay=none"])
        console.print(f"sweep: {actors} actor{'s' if actors != 1 else ''} ...")
        result = Session.create(cfg, out / f"actors_{actors}", console).train(progress=False, final_eval=False)
        if result.learning_env_steps_per_s is None:
            raise HetrlError(f"the run with {actors} actors never got past learning_starts; raise --steps")
        actor_wait = {name: share for name, _, _, share in result.timers}.get("ActorWait", 0.0)
        points.append(SweepPoint(actors, result.learning_env_steps_per_s, learner_utilisation(result), actor_wait,
                                 result.joules_per_env_step, result.joules_per_update, result.energy, result.energy_methods,
                                 result.accelerator_utilisation, result.accelerator_busy, result.accelerator_busy_method))
        save(out, config, points, complete=False)  # a sweep cut short keeps the points it measured
    save(out, config, points, complete=True)
    chosen = knee(points)
    plot(points, chosen, out / "sweep.png", f"{config.algo} on {config.env}")
    return points


def save(out: Path, config: TrainConfig, points: list[SweepPoint], complete: bool) -> None:
    """sweep.json: the points measured so far, their knee, and whether every actor count ran."""
    write_json(out / "sweep.json", {"algo": config.algo, "env": config.env, "complete": complete,
                                    "knee_actors": knee(points).actors, "knee_fraction": KNEE_FRACTION,
                                    "points": [asdict(p) for p in points]})


def table(points: list[SweepPoint]) -> Table:
    chosen = knee(points)
    t = Table(title=f"actor sweep (measured); knee: {chosen.actors} actors reach {KNEE_FRACTION:.0%} of the best rate",
              title_justify="left")
    for col in ("actors", "env steps/s", "learner busy", "accelerator busy", "actors waiting", "J / env step", "J / update"):
        t.add_column(col, justify="right")
    for p in points:
        energy = f"{p.joules_per_env_step:.3f}" if p.joules_per_env_step is not None else "unavailable"
        per_update = f"{p.joules_per_update:.3f}" if p.joules_per_update is not None else "unavailable"
        accelerator = f"{p.accelerator_busy:.0%}" if p.accelerator_busy is not None else "unavailable"
        t.add_row(f"{p.actors}{' (knee)' if p is chosen else ''}", f"{p.env_steps_per_s:,.0f}",
                  f"{p.learner_utilisation:.0%}", accelerator, f"{p.actor_wait_share:.0%}", energy, per_update)
    t.caption = energy_caption(points) + "\n" + busy_caption(points)
    return t


def energy_caption(points: list[SweepPoint]) -> str:
    """What the joules are: each meter's method (the user's figure labelled), or why a point has none;
    one line per group of actor counts where these differ."""
    return _grouped({p.actors: f"J: {p.energy_methods}" if p.joules_per_env_step is not None and p.energy_methods else p.energy
                     for p in points})


def busy_caption(points: list[SweepPoint]) -> str:
    """How the accelerator busy figures were read, or why a point has none; grouped as :func:`energy_caption`."""
    return _grouped({p.actors: "accelerator busy: " + (p.accelerator_busy_method if p.accelerator_busy is not None
                                                        else p.accelerator_busy_note) for p in points})


def _grouped(texts: dict[int, str]) -> str:
    """One text for all actor counts, else one line per group of counts that share a text."""
    groups: dict[str, list[int]] = {}
    for actors, text in texts.items():
        groups.setdefault(text, []).append(actors)
    if len(groups) == 1:
        return next(iter(groups))
    return "\n".join(f"{', '.join(map(str, counts))} actor{'s' if counts != [1] else ''}: {text}" for text, counts in groups.items())


def plot(points: list[SweepPoint], chosen: SweepPoint, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    xs = [p.actors for p in points]
    ax.plot(xs, [p.env_steps_per_s for p in points], "o-", label="env steps/s (measured)")
    ax.axvline(chosen.actors, color="tab:red", ls="--", label=f"knee: {chosen.actors} actors")
    ax.set_xlabel("actor processes")
    ax.set_ylabel("env steps/s, learning phase")
    ax.set_title(title)
    ax.set_xticks(xs)
    ax.grid(alpha=0.3)
    twin = ax.twinx()
    twin.plot(xs, [100 * p.learner_utilisation for p in points], "s:", color="tab:green", label="learner busy (%)")
    busy = [p for p in points if p.accelerator_busy is not None]  # unavailable points are left out, never drawn as 0
    if busy:
        twin.plot([p.actors for p in busy], [100 * p.accelerator_busy for p in busy], "^:", color="tab:purple",
                  label="accelerator busy (%, NVML)")
    twin.set_ylabel("busy (%)")
    twin.set_ylim(0, 105)
    lines = ax.get_legend_handles_labels()
    more = twin.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], loc="lower right")
    fig.tight_layout()
    write_file(path, lambda f: fig.savefig(f, format="png", dpi=120))
    plt.close(fig)
