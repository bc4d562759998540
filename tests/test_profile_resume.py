"""A profile cut short goes on from the measurements it saved, instead of starting over."""

import json
import os
import time

import pytest

import hetrl.profile as profile_module
from hetrl.algos import DQNConfig
from hetrl.profile import PARTIAL_MAX_AGE_S, Timing, partial_path, profile_workload

LABELS = [f"job {i}" for i in range(5)]


class Cut(Exception):
    pass


def fake_jobs(measured, cut_at=None):
    """Five cheap jobs in place of the real ones; job ``cut_at`` raises, as a kill would stop it."""
    def jobs(algorithm, devices, threads, meters=None, machine=None, notes=None, unmeasured=None):
        for i, label in enumerate(LABELS):
            def job(i=i, label=label):
                if i == cut_at:
                    raise Cut
                measured.append(label)
                return [Timing("EnvStep", f"b{i}", "cpu", 1, None, 1e-5 * (i + 1), 1e-5, 2e-5, 10)]
            yield label, job
    return jobs


def profile(tmp_path, agent=None, energy=True):
    return profile_workload("dqn", "CartPole-v1", agent or DQNConfig(hidden=(8, 8)), ["cpu"], [1], meters=_no_meters(),
                            resume=partial_path(tmp_path / "p.json"), energy=energy)


def _no_meters():
    from hetrl.energy.discovery import MeterReport

    return MeterReport([], [])


def test_a_profile_cut_short_resumes_from_its_saved_measurements(tmp_path, monkeypatch):
    measured = []
    monkeypatch.setattr(profile_module, "_jobs", fake_jobs(measured, cut_at=3))
    with pytest.raises(Cut):
        profile(tmp_path)
    saved = json.loads(partial_path(tmp_path / "p.json").read_text())
    assert saved["done"] == 3 and measured == LABELS[:3]
    measured.clear()
    monkeypatch.setattr(profile_module, "_jobs", fake_jobs(measured))
    result = profile(tmp_path)
    assert measured == LABELS[3:]  # the first three were not measured again
    assert [t.backend for t in result.timings] == [f"b{i}" for i in range(5)]
    assert any("3 of 5 measurements were resumed" in n for n in result.notes)
    assert not partial_path(tmp_path / "p.json").exists()  # done: nothing left to resume


def test_another_workload_or_an_old_partial_starts_over(tmp_path, monkeypatch):
    measured = []
    monkeypatch.setattr(profile_module, "_jobs", fake_jobs(measured, cut_at=2))
    with pytest.raises(Cut):
        profile(tmp_path)
    measured.clear()
    monkeypatch.setattr(profile_module, "_jobs", fake_jobs(measured))
    profile(tmp_path, DQNConfig(hidden=(8, 8), batch_size=16))  # another agent: its costs differ
    assert measured == LABELS
    monkeypatch.setattr(profile_module, "_jobs", fake_jobs(measured, cut_at=2))
    with pytest.raises(Cut):
        profile(tmp_path)
    old = time.time() - PARTIAL_MAX_AGE_S - 60
    os.utime(partial_path(tmp_path / "p.json"), (old, old))
    measured.clear()
    monkeypatch.setattr(profile_module, "_jobs", fake_jobs(measured))
    result = profile(tmp_path)
    assert measured == LABELS and not any("resumed" in n for n in result.notes)


def test_a_partial_made_without_the_meters_is_not_resumed_by_a_profile_that_reads_them(tmp_path, monkeypatch):
    """Its rows have no energy, which a profile for an efficiency plan needs on every row."""
    measured = []
    monkeypatch.setattr(profile_module, "_jobs", fake_jobs(measured, cut_at=3))
    with pytest.raises(Cut):
        profile(tmp_path, energy=False)
    measured.clear()
    monkeypatch.setattr(profile_module, "_jobs", fake_jobs(measured))
    result = profile(tmp_path)
    assert measured == LABELS and result.energy_profiled and not any("resumed" in n for n in result.notes)
