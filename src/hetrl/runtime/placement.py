"""Where each primitive runs: a backend and a device per primitive group.

``default_placement`` is a fixed rule until the profiling planner lands: the learner on the
requested device, the replay beside the learner (numpy storage on a host learner, torch storage
on an accelerator so batches need no transfer), and acting with the numpy policy on the host
(small policy networks are bound by per-call overhead, which numpy has least of).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from hetrl.protocol import get


@dataclass(frozen=True)
class Slot:
    backend: str
    device: str = "cpu"

    def __str__(self) -> str:
        return f"{self.backend} on {self.device}"


@dataclass(frozen=True)
class Placement:
    env: Slot  # EnvStep
    act: Slot  # Act and WeightSync
    replay: Slot  # ReplayAdd, ReplaySample, PriorityUpdate
    learn: Slot  # Learn

    def by_primitive(self) -> dict[str, str]:
        """A readable row per primitive, for summaries and run files."""
        return {
            "EnvStep": str(self.env),
            "Act": str(self.act),
            "WeightSync": f"{self.learn.device} -> {self.act}",
            "ReplayAdd": str(self.replay),
            "ReplaySample": str(self.replay),
            "PriorityUpdate": str(self.replay),
            "Learn": str(self.learn),
        }

    def validate(self) -> None:
        """Every named backend must be registered (raises HetrlError naming the alternatives)."""
        get("EnvStep", self.env.backend)
        get("Act", self.act.backend)
        get("ReplayAdd", self.replay.backend)
        get("Learn", self.learn.backend)

    def to_dict(self) -> dict[str, dict[str, str]]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, dict[str, str]]) -> "Placement":
        return cls(**{k: Slot(**v) for k, v in data.items()})


def default_placement(device: torch.device) -> Placement:
    host = device.type == "cpu"
    return Placement(
        env=Slot("gymnasium", "cpu"),
        act=Slot("numpy", "cpu"),
        replay=Slot("numpy", "cpu") if host else Slot("torch", str(device)),
        learn=Slot("torch", str(device)),
    )
