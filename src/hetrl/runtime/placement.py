"""Where each primitive runs: a backend and a device per primitive group.

``default_placement`` is a fixed rule until the profiling planner lands: the learner on the
requested device, the replay beside the learner (numpy storage on a host learner, torch storage
on an accelerator so batches need no transfer), acting with the numpy policy on the host (small
policy networks are bound by per-call overhead, which numpy has least of), and a host learner's
thread count by the size of its work (:func:`learner_threads`).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields
from typing import Any

import torch

from hetrl.errors import HetrlError
from hetrl.protocol import get


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

    def by_primitive(self) -> dict[str, str]:
        """A readable row per primitive, for summaries and run files (WeightSync: from where to where)."""
        rows = {name: str(self.slot_of(name)) for name in PRIMITIVE_ORDER}
        rows["WeightSync"] = f"{self.learn.device} -> {self.act}"
        return rows

    def validate(self) -> None:
        """Every backend registered, every device present, host-only backends on the host."""
        from hetrl.devices import resolve_device

        for primitive, slot in (("EnvStep", self.env), ("Act", self.act), ("ReplayAdd", self.replay), ("Learn", self.learn)):
            impl = get(primitive, slot.backend)
            resolve_device(slot.device)
            if not impl.runs_on(slot.device):
                if impl.device_types == ("cpu",):
                    raise HetrlError(f"{primitive}/{slot.backend} runs on the host only, not on {slot.device}; use device cpu")
                kinds = " or ".join(impl.device_types or ())
                raise HetrlError(f"{primitive}/{slot.backend} runs on {kinds} devices only, not on {slot.device}; "
                                 f"use a {kinds} device, or another backend there (e.g. torch)")

    def to_dict(self) -> dict[str, dict[str, str]]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Placement":
        """A placement from JSON, with one-line errors for missing or unknown fields."""
        names = {f.name for f in fields(cls)}
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
        return cls(**slots)


# Learner work (parameters x batch) below which one intra-op thread is chosen. Measured in the
# inline loop on a 2-core host: DQN 256x256, batch 64 (4.3M): 1.75 ms/update with 1 thread, 1.73 ms
# with 2 on an idle machine, but 5.8 ms with 2 while another process held one core (OpenMP threads
# wait on each other), so one thread loses nothing and guards against that; DDPG 400x300, batch
# 256 (63M): 13.0 ms with 1 thread, 7.7 ms with 2.
SMALL_LEARNER_WORK = 10_000_000


def learner_threads(n_params: int, batch_size: int, cores: int) -> int:
    """Intra-op threads for a host learner: 1 for overhead-bound networks, else every core."""
    return 1 if n_params * batch_size < SMALL_LEARNER_WORK else cores


def default_placement(device: torch.device, learner_work: tuple[int, int], threads: int = 0) -> Placement:
    """The fixed rule; ``learner_work`` is (parameters, batch size); ``threads`` 0 means by rule."""
    host = device.type == "cpu"
    if host and threads == 0:
        threads = learner_threads(*learner_work, cores=os.cpu_count() or 1)
    return Placement(
        env=Slot("gymnasium", "cpu"),
        act=Slot("numpy", "cpu"),
        replay=Slot("numpy", "cpu") if host else Slot("torch", str(device)),
        learn=Slot("torch", str(device), threads=threads if host else None),
    )
