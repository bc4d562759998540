"""Where each primitive runs: a backend and a device per primitive group (a :class:`Slot`).

Plain data: whether the backends exist and run there is checked against the library
(``hetrl.primitives.check_placement``); which placement to use is the planner's choice
(``hetrl.planner``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Slot:
    backend: str
    device: str = "cpu"
    threads: int | None = None  # torch intra-op threads, for host work

    def __str__(self) -> str:
        threads = f" ({self.threads} thread{'s' if self.threads != 1 else ''})" if self.threads else ""
        return f"{self.backend} on {self.device}{threads}"


PRIMITIVE_ORDER = ("EnvStep", "Act", "WeightSync", "ReplayAdd", "ReplaySample", "PriorityUpdate", "Learn")


@dataclass(frozen=True)
class Placement:
    env: Slot  # EnvStep
    act: Slot  # Act and WeightSync
    replay: Slot  # ReplayAdd, ReplaySample, PriorityUpdate
    learn: Slot  # Learn

    def slot_of(self, primitive: str) -> Slot | None:
        """The slot that runs ``primitive`` (WeightSync: the acting copy's); None for work no slot owns."""
        return {"EnvStep": self.env, "Act": self.act, "WeightSync": self.act, "ReplayAdd": self.replay,
                "ReplaySample": self.replay, "PriorityUpdate": self.replay, "Learn": self.learn}.get(primitive)

    def devices(self) -> set[str]:
        """Every device a slot of this placement runs on (``cpu`` included)."""
        return {self.env.device, self.act.device, self.replay.device, self.learn.device}

    def by_primitive(self) -> dict[str, str]:
        """A readable row per primitive, for summaries and run files (WeightSync: from where to where)."""
        rows = {name: str(self.slot_of(name)) for name in PRIMITIVE_ORDER}
        rows["WeightSync"] = f"{self.learn.device} -> {self.act}"
        return rows

    def to_dict(self) -> dict[str, dict[str, str]]:
        return asdict(self)
