"""The plan file (``plan.json``): the executor, actor count, envs per actor, inference and
placement a run uses, with the model's prediction and the runner-ups; its format and validation.
A hand edit of the choice drops the saved prediction on load, so a run never shows another plan's
figures. A plan that places anything on a what-if device (planner/whatif.py) is refused on load:
its figures were modelled, and no run can use the device."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from hetrl.errors import HetrlError
from hetrl.files import read_json, write_json
from hetrl.planner.model import Prediction
from hetrl.planner.whatif import what_if_slots
from hetrl.primitives import check_placement
from hetrl.protocol import Placement, Slot
from hetrl.runtime.inference import INFERENCE


PLAN_FORMAT = "hetrl-plan-v1"


PLAN_EXECUTORS = ("inline", "local", "ray")


@dataclass(frozen=True)
class Candidate:
    """One way to run: an executor, its actor processes (0 for inline), a placement, and where
    the actors' policy runs (``inference``; the inline executor acts in its own loop)."""

    executor: str
    actors: int
    placement: Placement
    inference: str = "actor"
    num_envs: int = 1  # envs per actor (inline: stepped together)

    def __str__(self) -> str:
        envs = f", {self.num_envs} envs" if self.num_envs != 1 else ""
        if self.executor == "inline":
            return "inline" + envs
        central = ", central inference" if self.inference == "central" else ""
        return f"{self.executor}, {self.actors} actor{'s' if self.actors != 1 else ''}{envs}{central}"


@dataclass
class Plan:
    algo: str
    env: str
    num_envs: int
    objective: str
    fingerprint: str  # the machine the profile was measured on
    placement: Placement
    prediction: Prediction | None  # None for a plan edited by hand or made by the fixed rule
    runner_ups: list[tuple[Candidate, Prediction]]
    executor: str = "inline"
    actors: int = 0  # actor processes of a parallel executor
    meters: list[str] = field(default_factory=list)  # what measured the profile's energy (shown with the prediction)
    steps: int | None = None  # the run length it was ranked for (start-up included); None: learning-phase rate
    inference: str = "actor"  # local executor: the actors' policy in each actor, or batched centrally on the Act slot
    profile_check: str = ""  # plan=auto: whether the profile was measured now, or cached and checked (calibration.py)
    cpu_share: float = 1.0  # plan=auto: the share of a core the process got at the start (calibration.cpu_share)
    what_if: list[str] = field(default_factory=list)  # the labels of the what-if devices the plan considered (modelled, never run)

    def to_dict(self) -> dict[str, Any]:
        def predicted(p: Prediction) -> dict[str, Any]:
            out = {"env_steps_per_s": round(p.env_steps_per_s, 1), "bottleneck": p.bottleneck,
                   "us_per_call": {k: round(1e6 * v, 2) for k, v in p.per_call_s.items()},
                   "us_per_env_step": {k: round(1e6 * v, 2) for k, v in p.per_env_step_s.items()}}
            if p.stage_rates:
                out["stage_env_steps_per_s"] = {k: round(v, 1) for k, v in p.stage_rates.items()}
            out["joules_per_env_step"] = p.joules_per_env_step  # None: energy was not measured in the profile
            out["startup_s"] = round(p.startup_s, 3)
            if self.steps:
                out["run_env_steps_per_s"] = round(p.run_env_steps_per_s(self.steps), 1)
            if p.modelled:  # primitive -> label: these figures were modelled on a what-if device, never run
                out["what_if"] = dict(p.modelled)
            return out

        chosen = predicted(self.prediction) if self.prediction else None
        if chosen is not None:  # what the prediction was made for: a hand edit of these drops it on load
            chosen["made_for"] = self._choice_digest()

        return {
            "format": PLAN_FORMAT, "algo": self.algo, "env": self.env, "num_envs": self.num_envs,
            "objective": self.objective, "machine": self.fingerprint,
            "executor": self.executor, "actors": self.actors, "inference": self.inference, "placement": self.placement.to_dict(),
            "predicted": chosen, "energy_meters": self.meters, "run_steps": self.steps,
            "profile_check": self.profile_check, "cpu_share": round(self.cpu_share, 3),
            **({"what_if": self.what_if} if self.what_if else {}),
            "runner_ups": [{"executor": c.executor, "actors": c.actors, "inference": c.inference, "num_envs": c.num_envs,
                            "placement": c.placement.to_dict(),
                            "predicted": predicted(pr)} for c, pr in self.runner_ups],
        }

    def _choice_digest(self) -> str:
        choice = {"executor": self.executor, "actors": self.actors, "num_envs": self.num_envs,
                  "placement": self.placement.to_dict()}
        if self.inference != "actor":  # plans written before central inference keep their digest
            choice["inference"] = self.inference
        return hashlib.sha256(json.dumps(choice, sort_keys=True).encode()).hexdigest()[:12]

    def save(self, path: str | Path) -> Path:
        return write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> "Plan":
        """A plan file, validated: format, placement fields, registered backends, present devices."""
        path = Path(path)
        data = read_json(path, "plan", f"make one with `hetrl plan ALGO ENV --out {path}`",
                         "fix it or make a new one with `hetrl plan`")
        if not isinstance(data, dict) or data.get("format") != PLAN_FORMAT:
            raise HetrlError(f"{path} is not a hetrl plan (expected format {PLAN_FORMAT})")
        missing = [k for k in ("algo", "env", "placement") if k not in data]
        if missing:
            raise HetrlError(f"plan {path} lacks {', '.join(missing)}")
        for key in ("algo", "env"):  # quoted in later messages: a name, on one line
            if not isinstance(data[key], str) or not data[key].isprintable() or not data[key]:
                raise HetrlError(f"plan {path}: {key} must be a name such as the one `hetrl plan` wrote, got {data[key]!r}")
        try:
            placement = placement_from_dict(data["placement"])
        except HetrlError as exc:
            raise HetrlError(f"plan {path}: {exc}") from None
        for group, slot in what_if_slots(placement).items():
            raise HetrlError(f"plan {path} places {group} on the what-if device {slot.device}, modelled and never run, which "
                             f"no run can use; make a plan without --what-if (hetrl plan {data['algo']} {data['env']} "
                             f"--out FILE), or set placement.{group} to a device of this machine")
        try:
            check_placement(placement)
        except HetrlError as exc:
            raise HetrlError(f"plan {path}: {exc}") from None
        executor, actors, inference = data.get("executor", "inline"), data.get("actors", 0), data.get("inference", "actor")
        num_envs = data.get("num_envs", 1)
        if not isinstance(num_envs, int) or isinstance(num_envs, bool) or num_envs < 1:
            raise HetrlError(f"plan {path}: num_envs must be a whole number, at least 1, got {num_envs!r}")
        if executor not in PLAN_EXECUTORS:
            raise HetrlError(f"plan {path}: executor must be one of {', '.join(PLAN_EXECUTORS)}, got {executor!r}")
        if inference not in INFERENCE:
            raise HetrlError(f"plan {path}: inference must be one of {', '.join(INFERENCE)}, got {inference!r}")
        if inference == "central" and executor != "local":
            raise HetrlError(f"plan {path}: central inference runs with the local executor, not {executor}; "
                             "set executor to local, or inference to actor")
        if not isinstance(actors, int) or isinstance(actors, bool) or actors < 0 or (executor != "inline" and actors < 1):
            raise HetrlError(f"plan {path}: actors must be a whole number, at least 1 for the {executor} executor, got {actors!r}")
        plan = cls(data["algo"], data["env"], num_envs, data.get("objective", "throughput"),
                   data.get("machine", "unknown"), placement, None, [], executor, actors, inference=inference)
        plan.prediction = _saved_prediction(data.get("predicted"), plan._choice_digest())
        meters, steps = data.get("energy_meters"), data.get("run_steps")
        plan.meters = [str(m) for m in meters] if isinstance(meters, list) else []
        plan.steps = steps if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0 else None
        plan.profile_check = str(data.get("profile_check") or "")
        what_if = data.get("what_if", [])
        plan.what_if = [str(label) for label in what_if] if isinstance(what_if, list) else []
        share = data.get("cpu_share", 1.0)
        plan.cpu_share = float(share) if isinstance(share, (int, float)) and 0 < share <= 1 else 1.0
        return plan


def placement_from_dict(data: Any) -> Placement:
    """A placement from a plan file's JSON, with one-line errors for missing or unknown fields."""
    names = {f.name for f in fields(Placement)}
    if not isinstance(data, dict) or set(data) != names:
        raise HetrlError(f"a placement needs exactly the groups {sorted(names)}, got {sorted(data) if isinstance(data, dict) else data!r}")
    slots = {}
    for group, slot in data.items():
        if not isinstance(slot, dict) or not {"backend", "device"} <= set(slot) <= {"backend", "device", "threads"}:
            raise HetrlError(f"placement.{group} needs backend and device (and optionally threads), got {slot!r}")
        threads = slot.get("threads")
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise HetrlError(f"placement.{group}.threads must be a positive integer or null, got {threads!r}")
        slots[group] = Slot(str(slot["backend"]), str(slot["device"]), threads)
    return Placement(**slots)


def _saved_prediction(saved: Any, digest: str) -> Prediction | None:
    """The prediction a plan file carries, if it still describes the file's choice (not hand-edited
    since) and reads back whole; None otherwise, so a run never shows another plan's prediction."""
    if not isinstance(saved, dict) or saved.get("made_for") != digest:
        return None
    try:
        per_call = {str(k): float(v) / 1e6 for k, v in saved["us_per_call"].items()}
        per_step = {str(k): float(v) / 1e6 for k, v in saved["us_per_env_step"].items()}
        stages = saved.get("stage_env_steps_per_s")
        stages = {str(k): float(v) for k, v in stages.items()} if stages else None
        joules = saved.get("joules_per_env_step")
        return Prediction(per_call, per_step, stages, float(joules) if joules is not None else None,
                          float(saved.get("startup_s", 0.0)), {str(k): str(v) for k, v in saved.get("what_if", {}).items()})
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
