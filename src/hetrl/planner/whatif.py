"""What-if devices: an accelerator the planner may place Act or Learn on without having one, its
costs modelled and never measured (``hetrl plan ALGO ENV --what-if FILE``). FILE is either

- an FPGA device description (``hetrl.cosearch.fpga``: ``"format": "hetrl-fpga-v1"``), or the
  name of a shipped part (``zcu102``, ``u250``). The FPGA model costs Act: the algorithm's policy
  network on the design :func:`~hetrl.cosearch.fpga.allocate` chooses, behind the host link,
  ``Act(n) = overhead + n (observation + output bytes) / link + batch(n)``, and WeightSync as
  ``overhead + weight bytes / link``. Act only: the backward pass is not modelled, so Learn is
  never placed there;
- a table of seconds per call, ``{"device": NAME, "costs": {PRIMITIVE: {SIZE: SECONDS}}}``, with
  PRIMITIVE among Act (SIZE: envs), Learn and Transfer (the batch) and WeightSync (1). Act and
  Learn may be placed there where given; WeightSync and Transfer cost 0 where not given, and the
  label says so.

Either becomes profile rows (:class:`~hetrl.profile.Timing` with ``modelled`` set to the device's
label) on device ``whatif:NAME``, with the rows the model needs around them (WeightSync to and
from it, Transfer to it), in a copy of the profile (:func:`with_what_if`). The planner costs them
as it costs measured rows; every prediction built on one carries the label into the plan's
tables and plan.json; and no run can use such a plan (``Plan.load`` refuses it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
import torch

from hetrl.algos import Algorithm
from hetrl.cosearch.fpga import (DEVICE_FORMAT, NAME, Design, FpgaDevice, allocate, bits_of, device_file, layers_of,
                                 shipped_devices)
from hetrl.errors import HetrlError, did_you_mean
from hetrl.files import read_json
from hetrl.profile import ENV_COUNTS, Profile, Timing
from hetrl.protocol import Placement, Slot

WHAT_IF = "whatif:"  # the device prefix of a what-if device's slots and rows
LABEL = "what-if, modelled, never run"
TABLE_PRIMITIVES = ("Act", "Learn", "WeightSync", "Transfer")


def _row(primitive: str, backend: str, device: str, size: int, seconds: float, label: str) -> Timing:
    return Timing(primitive, backend, device, size, None, seconds, seconds, seconds, 0, modelled=label)


def _learner_devices(profile: Profile) -> list[str]:
    """The devices the profile measured a learner on, other than the host's (WeightSync comes from them)."""
    return sorted({t.device for t in profile.timings if t.primitive == "Learn" and t.device != "cpu" and not t.modelled})


def _weight_syncs(profile: Profile, backend: str, device: str, seconds: float, label: str) -> list[Timing]:
    """WeightSync onto an acting copy on ``device``: from the host and from each learner device."""
    return [_row("WeightSync", source, device, 1, seconds, label)
            for source in [backend] + [f"{backend}<-{d}" for d in _learner_devices(profile)]]


@dataclass(frozen=True)
class FpgaWhatIf:
    """An FPGA part, its Act costed by the FPGA model."""

    part: FpgaDevice
    backend = "fpga-model"

    @property
    def device(self) -> str:
        return WHAT_IF + self.part.name

    @property
    def label(self) -> str:
        return f"{LABEL}: FPGA model of {self.part.name} ({self.part.part}), {self.part.design.precision}, Act only"

    def design(self, algorithm: Algorithm) -> Design:
        """The accelerator the model builds for ``algorithm``'s policy network on this part."""
        example = torch.zeros((1, *algorithm.spec.obs_shape))
        return allocate(layers_of(algorithm.make_policy_network(), example), self.part)

    def act_seconds(self, design: Design, algorithm: Algorithm, n: int) -> float:
        """A call on ``n`` observations: the overhead, observations in (as the env gives them) and the
        network's outputs back (at the design's precision) over the link, and the pipeline's batch."""
        spec = algorithm.spec
        io = (int(np.prod(spec.obs_shape)) * np.dtype(spec.obs_dtype).itemsize
              + design.layers[-1].outputs * bits_of(design.precision) / 8)
        return 1e-6 * self.part.call_overhead_us + n * io / (1e9 * self.part.host_gb_per_s) + design.batch_seconds(n)

    def rows(self, profile: Profile, algorithm: Algorithm) -> list[Timing]:
        design = self.design(algorithm)
        sizes = sorted({t.size for t in profile.timings if t.primitive == "Act"} | set(ENV_COUNTS))
        rows = [_row("Act", self.backend, self.device, n, self.act_seconds(design, algorithm, n), self.label) for n in sizes]
        sync = 1e-6 * self.part.call_overhead_us + design.weight_bytes / (1e9 * self.part.host_gb_per_s)
        return rows + _weight_syncs(profile, self.backend, self.device, sync, self.label)

    def describe(self, algorithm: Algorithm) -> str:
        design = self.design(algorithm)
        overhead = self.part.call_overhead_us
        return (f"what-if {self.device} (modelled, never run): {algorithm.name}'s policy network on {self.part.part}: "
                f"{design.describe()}; Act costs {1e6 * self.act_seconds(design, algorithm, 1):,.2f} µs a call with 1 env, "
                f"a call overhead of {overhead:g} µs included"
                + (" (the device file's call_overhead_us: set it to your driver's)" if not overhead else ""))


@dataclass(frozen=True)
class TableWhatIf:
    """A device the user describes by its seconds per call of each primitive, at each size."""

    name: str
    costs: dict[str, dict[int, float]]
    backend = "table"

    @property
    def device(self) -> str:
        return WHAT_IF + self.name

    @property
    def label(self) -> str:
        free = [p for p in ("WeightSync", "Transfer") if p not in self.costs
                and (p == "WeightSync" or "Learn" in self.costs)]
        return f"{LABEL}: {self.name}'s cost table" + (f" ({' and '.join(free)} not given: costed 0)" if free else "")

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str) -> "TableWhatIf":
        name = data.get("device")
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise HetrlError(f"{where}: device must be a name of letters, digits, '.', '_' and '-', got {name!r}")
        if set(data) != {"device", "costs"} or not isinstance(data["costs"], dict):
            raise HetrlError(f"{where}: a what-if table holds exactly device and costs "
                             '({"device": NAME, "costs": {PRIMITIVE: {SIZE: SECONDS}}}), got ' + ", ".join(sorted(data)))
        costs: dict[str, dict[int, float]] = {}
        for primitive, by_size in data["costs"].items():
            if primitive not in TABLE_PRIMITIVES:
                raise HetrlError(f"{where}: {primitive!r} cannot be costed on a what-if device"
                                 f"{did_you_mean(primitive, TABLE_PRIMITIVES)}; use {', '.join(TABLE_PRIMITIVES)}")
            if not isinstance(by_size, dict) or not by_size:
                raise HetrlError(f"{where}: costs.{primitive} must map sizes to seconds per call, e.g. {{\"1\": 1e-5}}")
            costs[primitive] = {}
            for size, seconds in by_size.items():
                if not str(size).isdigit() or int(size) < 1:
                    raise HetrlError(f"{where}: costs.{primitive}: size {size!r} is not a whole number of at least 1")
                if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) or seconds < 0:
                    raise HetrlError(f"{where}: costs.{primitive}.{size} must be seconds per call (a number, 0 or more), got {seconds!r}")
                costs[primitive][int(size)] = float(seconds)
        if not {"Act", "Learn"} & set(costs):
            raise HetrlError(f"{where}: a what-if table needs Act or Learn costs, or both")
        return cls(name, costs)

    def _flat(self, primitive: str) -> float:
        """A primitive given at one cost whatever the size (WeightSync), or 0 where not given."""
        return next(iter(self.costs[primitive].values())) if primitive in self.costs else 0.0

    def rows(self, profile: Profile, algorithm: Algorithm) -> list[Timing]:
        rows = [_row(p, self.backend, self.device, size, seconds, self.label)
                for p in ("Act", "Learn") for size, seconds in self.costs.get(p, {}).items()]
        sync = self._flat("WeightSync")
        if "Act" in self.costs:
            rows += _weight_syncs(profile, self.backend, self.device, sync, self.label)
        if "Learn" in self.costs:  # acting copies elsewhere fetch from it; batches come to it from every replay
            acting = sorted({(t.backend, t.device) for t in profile.timings if t.primitive == "Act" and not t.modelled})
            rows += [_row("WeightSync", f"{backend}<-{self.device}", device, 1, sync, self.label) for backend, device in acting]
            transfer = self.costs.get("Transfer", {size: 0.0 for size in self.costs["Learn"]})
            sources = ["numpy"] + sorted({t.device for t in profile.timings if t.primitive == "ReplayAdd" and t.device != "cpu"})
            rows += [_row("Transfer", f"{source}->{self.device}", self.device, size, seconds, self.label)
                     for source in sources for size, seconds in transfer.items()]
        return rows

    def describe(self, algorithm: Algorithm) -> str:
        given = ", ".join(f"{p} at {', '.join(map(str, sorted(by_size)))}" for p, by_size in self.costs.items())
        return f"what-if {self.device} (modelled, never run): {self.name}'s cost table: {given}"


WhatIfDevice = FpgaWhatIf | TableWhatIf


def load_what_if(spec: str) -> WhatIfDevice:
    """The what-if device ``spec`` names: a JSON file (an FPGA device description or a cost table)
    or a shipped FPGA part's name."""
    path = device_file(spec)
    where = f"what-if file {path}"
    data = read_json(path, "what-if file", f"give an FPGA device file, a cost table or a shipped part "
                                           f"({', '.join(shipped_devices())})")
    if isinstance(data, dict) and "costs" in data:
        return TableWhatIf.from_dict(data, where)
    if isinstance(data, dict) and data.get("format") == DEVICE_FORMAT:
        return FpgaWhatIf(FpgaDevice.from_dict(data, where))
    raise HetrlError(f"{where} is neither an FPGA device description (\"format\": \"{DEVICE_FORMAT}\") nor a cost table "
                     '({"device": NAME, "costs": {PRIMITIVE: {SIZE: SECONDS}}})')


def with_what_if(profile: Profile, devices: Sequence[WhatIfDevice], algorithm: Algorithm) -> Profile:
    """A copy of ``profile`` with each what-if device's modelled rows added (``profile`` is left as it was)."""
    names = [d.device for d in devices]
    if len(set(names)) != len(names):
        raise HetrlError(f"what-if devices need different names, got {', '.join(names)}")
    rows = [row for device in devices for row in device.rows(profile, algorithm)]
    return replace(profile, timings=[*profile.timings, *rows])


def what_if_slots(placement: Placement) -> dict[str, Slot]:
    """The placement's groups (env, act, replay, learn) whose slot is on a what-if device."""
    slots = {f.name: getattr(placement, f.name) for f in fields(placement)}
    return {group: slot for group, slot in slots.items() if slot.device.startswith(WHAT_IF)}
