"""What-if devices in the planner (planner/whatif.py): modelled rows change the chosen placement,
every report labels them, and no run can use a plan that places work on one."""

import io
import json

import pytest
from rich.console import Console
from test_plan import CPU_PLAN, HOST, US, synthetic

from hetrl.algos import DQNConfig, make_algorithm
from hetrl.cli import main
from hetrl.cosearch.fpga import DEVICES
from hetrl.envs import env_spec
from hetrl.errors import HetrlError
from hetrl.planner.calibration import calibrate
from hetrl.planner.plan_file import Plan
from hetrl.planner.search import make_plan
from hetrl.planner.tables import plan_tables
from hetrl.planner.whatif import LABEL, FpgaWhatIf, TableWhatIf, load_what_if, with_what_if
from hetrl.protocol import Slot

AGENT = DQNConfig(batch_size=64, replay_ratio=1.0, train_every=1, hidden=(64, 64))


@pytest.fixture(scope="module")
def algorithm():
    return make_algorithm("dqn", env_spec("CartPole-v1"), AGENT)


def table(**costs) -> TableWhatIf:
    return TableWhatIf.from_dict({"device": "myaccel", "costs": costs}, "test table")


def text(tables) -> str:
    console = Console(width=250, record=True, file=io.StringIO())
    for t in tables:
        console.print(t)
    return console.export_text()


def test_a_fast_modelled_act_device_changes_the_chosen_placement(algorithm):
    profile = synthetic(HOST)
    assert make_plan(profile, AGENT, 1).placement == CPU_PLAN  # Act/numpy on the host: 30 µs a call
    fast = with_what_if(profile, [table(Act={"1": 1e-6, "4": 2e-6})], algorithm)
    plan = make_plan(fast, AGENT, 1)
    assert plan.placement.act == Slot("table", "whatif:myaccel") and plan.placement.learn == CPU_PLAN.learn
    # per env step: env 20 + act 1 + add 10 + (sample 50 + transfer 6 + learn 1,000) + sync 0 (not given) + loop 8
    assert sum(plan.prediction.per_env_step_s.values()) == pytest.approx(1095 * US)
    label = f"{LABEL}: myaccel's cost table (WeightSync not given: costed 0)"
    assert plan.prediction.modelled == {"Act": label, "WeightSync": label} and plan.what_if == [label]
    assert len(profile.timings) == len(HOST)  # the measured profile is left as it was
    # a slow one is considered, not chosen, and the plan says so
    slow = make_plan(with_what_if(profile, [table(Act={"1": 1e-3})], algorithm), AGENT, 1)
    assert slow.placement == CPU_PLAN and not slow.prediction.modelled
    assert "what-if devices considered, not chosen: what-if, modelled, never run" in text(plan_tables(slow))


def test_a_modelled_learner_is_fed_over_its_transfer(algorithm):
    """A table's Learn: batches come to it (Transfer, from the host replay's arrays), its weights go
    to the acting copy (WeightSync numpy<-whatif:myaccel), each at the table's cost."""
    costs = table(Learn={"64": 100e-6}, Transfer={"64": 5e-6}, WeightSync={"1": 7e-6})
    plan = make_plan(with_what_if(synthetic(HOST), [costs], algorithm), AGENT, 1)
    assert plan.placement.learn == Slot("table", "whatif:myaccel") and plan.placement.act == Slot("numpy", "cpu")
    call = plan.prediction.per_call_s
    assert (call["Learn"], call["Transfer"], call["WeightSync"]) == pytest.approx((100 * US, 5 * US, 7 * US))
    # env 20 + act 30 + add 10 + (sample 50 + transfer 5 + learn 100) + sync 7 + loop 8
    assert sum(plan.prediction.per_env_step_s.values()) == pytest.approx(230 * US)
    assert set(plan.prediction.modelled) == {"Learn", "Transfer", "WeightSync"}


def test_the_fpga_model_costs_act_only(algorithm, tmp_path):
    zcu = load_what_if("zcu102")
    assert isinstance(zcu, FpgaWhatIf)
    design = zcu.design(algorithm)
    assert [(layer.in_channels, layer.out_channels) for layer in design.layers] == [(4, 64), (64, 64), (64, 2)]
    rows = {(t.primitive, t.backend, t.device, t.size): t for t in zcu.rows(synthetic(HOST), algorithm)}
    assert not any(p == "Learn" for p, *_ in rows)  # the backward pass is not modelled
    # a call: 4 float32 observations in and 2 int16 Q-values back per env over 19.2 GB/s, then the pipeline
    act4 = rows[("Act", "fpga-model", "whatif:zcu102", 4)].median_s
    assert act4 == pytest.approx(4 * (16 + 4) / 19.2e9 + design.latency_s + 3 * design.interval_cycles / 200e6)
    assert rows[("WeightSync", "fpga-model", "whatif:zcu102", 1)].median_s == pytest.approx(design.weight_bytes / 19.2e9)
    plan = make_plan(with_what_if(synthetic(HOST), [zcu], algorithm), AGENT, 1)
    assert plan.placement.act == Slot("fpga-model", "whatif:zcu102")
    assert plan.prediction.modelled["Act"].startswith(LABEL) and "zcu102" in plan.prediction.modelled["Act"]
    # with a driver that costs 100 µs a call, acting stays on the host
    data = json.loads((DEVICES / "zcu102.json").read_text())
    data["call_overhead_us"] = 100
    (tmp_path / "slow.json").write_text(json.dumps(data))
    slow = load_what_if(str(tmp_path / "slow.json"))
    assert make_plan(with_what_if(synthetic(HOST), [slow], algorithm), AGENT, 1).placement == CPU_PLAN


def test_a_what_if_plan_is_labelled_everywhere_and_refused_by_train(tmp_path, capfd):
    profile = synthetic(HOST).save(tmp_path / "profile.json")
    what_if = tmp_path / "myaccel.json"
    what_if.write_text(json.dumps({"device": "myaccel", "costs": {"Act": {"1": 1e-6, "4": 2e-6}, "Learn": {"64": 500e-6}}}))
    out = tmp_path / "plan.json"
    settings = ["--set", "batch_size=64", "--set", "replay_ratio=1.0", "--set", "train_every=1", "--set", "hidden=64,64"]
    assert main(["plan", "dqn", "CartPole-v1", "--profile", str(profile), "--what-if", str(what_if), "--out", str(out),
                 "--executor", "inline", *settings]) == 0
    err = capfd.readouterr().err
    assert "predicted (what-if, modelled, never run)" in err and "(what-if)" in err
    assert "`hetrl train` refuses it" in err
    data = json.loads(out.read_text())
    assert data["placement"]["act"]["device"] == "whatif:myaccel" and data["placement"]["learn"]["device"] == "whatif:myaccel"
    assert all(label.startswith(LABEL) for label in data["predicted"]["what_if"].values())
    assert set(data["predicted"]["what_if"]) == {"Act", "Learn", "WeightSync", "Transfer"}
    assert data["what_if"] == [f"{LABEL}: myaccel's cost table (WeightSync and Transfer not given: costed 0)"]
    assert any("what_if" in r["predicted"] for r in data["runner_ups"])
    with pytest.raises(HetrlError, match="places act on the what-if device whatif:myaccel, modelled and never run") as exc:
        Plan.load(out)
    assert "\n" not in str(exc.value) and "without --what-if" in str(exc.value)
    assert main(["train", "dqn", "CartPole-v1", "--plan", str(out), "--run-dir", str(tmp_path / "run"), "--no-progress"]) == 2
    assert "what-if device whatif:myaccel" in capfd.readouterr().err


@pytest.mark.parametrize("content, message", [
    ({"device": "x", "costs": {"Atc": {"1": 1e-5}}}, r"'Atc' cannot be costed on a what-if device \(did you mean 'Act'\?\)"),
    ({"device": "x", "costs": {"Act": {"0": 1e-5}}}, "size '0' is not a whole number of at least 1"),
    ({"device": "x", "costs": {"Act": {"1": -1}}}, r"costs.Act.1 must be seconds per call \(a number, 0 or more\), got -1"),
    ({"device": "x", "costs": {"WeightSync": {"1": 0}}}, "needs Act or Learn costs"),
    ({"device": "x y", "costs": {"Act": {"1": 1e-5}}}, "device must be a name"),
    ({"device": "x", "costs": {"Act": {"1": 1e-5}}, "extra": 1}, "holds exactly device and costs"),
    ({"dsp": 10}, "is neither an FPGA device description"),
])
def test_what_if_files_are_validated_in_one_line(tmp_path, content, message):
    path = tmp_path / "what_if.json"
    path.write_text(json.dumps(content))
    with pytest.raises(HetrlError, match=message) as exc:
        load_what_if(str(path))
    assert "\n" not in str(exc.value)


def test_missing_what_if_files_name_the_shipped_parts():
    with pytest.raises(HetrlError, match=r"does not exist; give an FPGA device file, a cost table or a shipped part \(u250, zcu102\)"):
        load_what_if("nowhere.json")
    assert load_what_if("u250").device == "whatif:u250"


def test_calibration_never_measures_a_modelled_stage(algorithm):
    """A plan acting on a what-if device is checked on its measured stages only (its Act has no row
    in the cached profile, and no machine to be measured on)."""
    profile = synthetic(HOST)
    plan = make_plan(with_what_if(profile, [table(Act={"1": 1e-6})], algorithm), AGENT, 1)
    asked = []

    def measuring(_algorithm, keys):
        asked.extend(keys)
        return []

    calibrate(profile, algorithm, plan, measuring=measuring)
    assert asked and not any(device.startswith("whatif:") for _, _, device, _, _ in asked)


def test_a_run_plan_considers_what_if_devices_without_caching_them(tmp_path, monkeypatch, algorithm):
    """plan=auto with what-if devices (``hetrl plan`` without --profile): the devices join the
    plan's profile, never the cached one a run plans from later."""
    from hetrl.config import make_config
    from hetrl.hardware import describe_machine
    from hetrl.planner.choice import plan_for_run
    from hetrl.profile import Profile, default_path

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cfg = make_config("dqn", "CartPole-v1", None, ["plan=auto", "executor=inline", "batch_size=64", "replay_ratio=1",
                                                   "train_every=1", "hidden=64,64"])
    plan = plan_for_run(cfg, algorithm, profiling=lambda *args, **kwargs: synthetic(HOST),
                        what_if=[table(Act={"1": 1e-6})])
    assert plan.placement.act.device == "whatif:myaccel" and plan.prediction.modelled
    cached = Profile.load(default_path(describe_machine(), cfg.algo, cfg.env_source(), cfg.agent))
    assert len(cached.timings) == len(HOST) and not any(t.modelled for t in cached.timings)
