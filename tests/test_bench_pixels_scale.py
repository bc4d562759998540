"""bench/pixels_scale.py's report: the J per env step column says how its joules were measured."""

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import pixels_scale  # noqa: E402  (bench/ is not a package)


def test_the_energy_note_names_each_method_behind_the_joules():
    counter = "rapl:package-0: energy counter (powercap energy_uj)"
    runs = [{"lib": "hetrl", "energy": "3.0 J measured ...", "energy_methods": counter, "joules_per_env_step": 0.1},
            {"lib": "sb3", "energy": "2.0 J measured ...", "energy_methods": counter, "joules_per_env_step": 0.2}]
    note = pixels_scale.energy_note(runs)
    assert f"J per env step by {counter}." in note and "unavailable" not in note
    short = {"lib": "sb3", "energy": "energy unavailable: rapl: the span of 0.50 s is shorter than the 1 s a reading needs",
             "joules_per_env_step": None}
    assert "Runs with `unavailable`: energy unavailable: rapl: the span of 0.50 s" in pixels_scale.energy_note([*runs, short])
    none = pixels_scale.energy_note([{**short, "energy": "energy unavailable: rapl: not present"}])
    assert none.startswith("Energy: `unavailable` for every library: rapl: not present.")
    # a saved run from before energy_methods: its energy line, which names the meters and methods
    assert "J per env step by 3.0 J measured ..." in pixels_scale.energy_note([{**runs[0], "energy_methods": None}])
