"""hetrl sweep: actor counts, the knee, and its files."""

import json

import pytest
import torch

from hetrl.cli import main
from hetrl.energy.discovery import discover_meters
from hetrl.errors import HetrlError
from hetrl.sweep import SweepPoint, knee, parse_range


def point(actors, rate):
    return SweepPoint(actors, rate, 1.0, 0.0, None, None, "energy unavailable: test")


def test_knee_is_the_fewest_actors_within_95_percent_of_the_best():
    points = [point(1, 500), point(2, 900), point(3, 960), point(4, 1000)]
    assert knee(points).actors == 3  # 960 >= 950; 900 is not
    assert knee([point(1, 1000), point(2, 990)]).actors == 1


def test_the_tables_caption_says_how_the_joules_were_measured():
    """The J columns' caption names each meter's method (the user's figure labelled), or why a count
    has no figure; actor counts whose methods differ each get their line."""
    from hetrl.sweep import table

    methods = "rapl:package-0: energy counter (powercap energy_uj); gpu_watts: user's figure, not measured, 300 W x 2.0 s"
    measured = [SweepPoint(n, 1000.0 * n, 1.0, 0.0, 0.01, 0.04, "... J measured ...", methods) for n in (1, 2)]
    assert table(measured).caption == f"J: {methods}\naccelerator busy: not measured"  # the busy caption: tests/test_busy.py
    short = SweepPoint(3, 2500.0, 1.0, 0.0, None, None, "energy unavailable: rapl: rapl:package-0: the span of 0.50 s is "
                                                        "shorter than the 1 s a reading needs")
    caption = table([*measured, short]).caption
    assert caption.splitlines()[:2] == [f"1, 2 actors: J: {methods}", f"3 actors: {short.energy}"]


def test_actor_ranges_parse_and_bad_ones_explain():
    assert parse_range("1..4") == [1, 2, 3, 4] and parse_range("1,2,4") == [1, 2, 4] and parse_range("3") == [3]
    for bad in ("0..2", "a..b", "", "2..1"):
        with pytest.raises(HetrlError, match="give a range like 1..4"):
            parse_range(bad)


def test_sweep_runs_each_count_and_writes_table_json_and_plot(tmp_path, capsys):
    out = tmp_path / "sweep"
    code = main(["sweep", "dqn", "CartPole-v1", "--actors", "1..2", "--steps", "1500", "--out", str(out),
                 "--set", "hidden=32,32", "--set", "learning_starts=500", "--set", "train_every=1", "--set", "plan=rule"])
    assert code == 0
    data = json.loads((out / "sweep.json").read_text())
    assert [p["actors"] for p in data["points"]] == [1, 2] and data["complete"] is True
    for p in data["points"]:  # each point is its run's summary
        summary = json.loads((out / f"actors_{p['actors']}" / "summary.json").read_text())
        assert (summary["executor"], summary["actors"]) == ("local", p["actors"])
        # measured for speed alone: no evaluation episodes (a greedy Atari game can last 27k steps), no replay saved
        assert summary["eval_return_mean"] is None
        assert not list((out / f"actors_{p['actors']}" / "checkpoints").glob("replay_step_*.pt"))
        assert p["env_steps_per_s"] == pytest.approx(summary["learning_env_steps_per_s"])
        assert p["joules_per_env_step"] == summary["joules_per_env_step"] and p["energy"] == summary["energy"]
        assert p["joules_per_update"] == summary["joules_per_update"]
        assert p["energy_methods"] == summary["energy_methods"]
        assert 0 <= p["learner_utilisation"] <= 1
        assert p["accelerator_busy"] == summary["accelerator_utilisation"] and p["accelerator_busy_note"] == summary["accelerator_busy"]
        if not torch.cuda.is_available():  # a host learner: no figure, and the reason
            assert p["accelerator_busy"] is None and p["accelerator_busy_note"].startswith("unavailable: the learner is on the host")
    with discover_meters() as meters:  # energy where this machine has a meter, and why not where it has none
        metered = bool(meters.meters)
    if metered:  # a run's span is over the 1 s window here (start-up, 1,500 steps): a figure, or the reason
        assert all((p["joules_per_env_step"] or 0) > 0 or "shorter than" in p["energy"] for p in data["points"])
    else:
        assert all(p["joules_per_env_step"] is None and "unavailable" in p["energy"] for p in data["points"])
    rates = {p["actors"]: p["env_steps_per_s"] for p in data["points"]}
    assert data["knee_actors"] == (1 if rates[1] >= 0.95 * max(rates.values()) else 2)
    assert (out / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "knee" in capsys.readouterr().err
    # the folder now holds a sweep: a second one there is refused, nothing overwritten
    assert main(["sweep", "dqn", "CartPole-v1", "--actors", "1", "--out", str(out)]) == 2


def test_a_sweep_cut_short_keeps_the_points_it_measured(tmp_path, monkeypatch):
    """sweep.json is written after every actor count, so a sweep stopped (or killed) at the second
    count still holds the first, marked incomplete."""
    import hetrl.sweep as sweep_module

    real, calls = sweep_module.Session.create, []

    def create(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(sweep_module.Session, "create", create)
    out = tmp_path / "sweep"
    code = main(["sweep", "dqn", "CartPole-v1", "--actors", "1,2", "--steps", "800", "--out", str(out),
                 "--set", "hidden=16,16", "--set", "learning_starts=300", "--set", "plan=rule"])
    assert code != 0 and len(calls) == 2  # Ctrl-C at the second count: the command stops there
    data = json.loads((out / "sweep.json").read_text())
    assert data["complete"] is False and [p["actors"] for p in data["points"]] == [1] and data["knee_actors"] == 1
