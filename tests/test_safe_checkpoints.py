"""Safe files (issues 21 and 24): every file a run writes loads with torch.load(weights_only=True);
the conversion (hetrl.run.safe_state) gives back exactly what was saved; a pickle inside a
checkpoint runs only when trusted: an env state signed by this user's key on resume, any with
--trust-env-state, never on hetrl.load, eval or export; a file naming other code is refused;
checkpoints of older versions still load, with a note that their envs restart."""

import math
import pickle
import random
import shutil
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from test_resume import OLD, SMALL, _assert_identical, _env_state

import hetrl
from hetrl.cli import main
from hetrl.errors import HetrlError
from hetrl.run import safe_state
from hetrl.run.rundir import RunDir

RUN = dict(seed=3, progress=False, plan="rule", eval_episodes=2, log_every=100, **SMALL["dqn"])
STEP = "checkpoints/step_0000000300.pt"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """300 env steps of DQN (prioritized, 3-step) inline, a checkpoint and an evaluation every 100."""
    path = tmp_path_factory.mktemp("runs") / "dqn"
    hetrl.train("dqn", "CartPole-v1", steps=300, run_dir=path, checkpoint_every=100, eval_every=100, **RUN)
    return path


@pytest.fixture
def only_weights_only(monkeypatch):
    """Every torch.load of hetrl's must be weights_only=True: any other fails the test."""
    load = torch.load

    def checked(*args, **kwargs):
        assert kwargs.get("weights_only") is True, "hetrl called torch.load without weights_only=True"
        return load(*args, **kwargs)
    monkeypatch.setattr(torch, "load", checked)


def _copy(run: Path, tmp_path: Path, name: str = "copy") -> Path:
    shutil.copytree(run, tmp_path / name)
    return tmp_path / name


def _executor_state(run: Path) -> dict:
    """The newest checkpoint's executor state, its env state unpickled whoever signed it."""
    return RunDir.open(run).load_checkpoint(env_state="any")[1]["executor"]


# --- what a run writes --------------------------------------------------------------------------
@pytest.mark.parametrize("algo, env, executor", [("dqn", "CartPole-v1", "inline"), ("dqn", "CartPole-v1", "local"),
                                                 ("sac", "Pendulum-v1", "inline"), ("dqn", "hetrl/Bytes-v0", "inline")],
                         ids=["dqn-inline", "dqn-local", "sac-inline", "dqn-frames-uint8"])
def test_every_file_a_run_writes_loads_with_weights_only(tmp_path, algo, env, executor):
    small = {**SMALL[algo], "buffer_size": 300, "learning_starts": 100}
    extra = {"actors": 1} if executor == "local" else {}
    hetrl.train(algo, env, steps=200, run_dir=tmp_path / "r", seed=0, progress=False, plan="rule", executor=executor,
                eval_every=100, eval_episodes=1, checkpoint_every=100, checkpoint_replay="all", **small, **extra)
    files = sorted((tmp_path / "r" / "checkpoints").glob("*.pt"))
    names = {p.name for p in files}
    kinds = {name.split("_0")[0] for name in names}  # the local executor's steps overshoot 200 a little
    assert kinds == {"best.pt", "step", "replay_step"} and len(names) == 5, names
    for path in files:
        saved = torch.load(path, map_location="cpu", weights_only=True)  # no allowlist: plain weights_only
        assert saved["format"] == "hetrl-checkpoint-v3", path.name


# --- the conversion -----------------------------------------------------------------------------
def _same(a, b, path="tree"):
    """Equal values of the same types (dtypes, shapes, container types) all the way down."""
    assert type(a) is type(b), f"{path}: {type(a)} != {type(b)}"
    if isinstance(a, dict):
        assert list(a) == list(b), path
        for k in a:
            _same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{path}[{i}]")
    elif isinstance(a, np.ndarray):
        assert (a.dtype, a.shape) == (b.dtype, b.shape), path
        np.testing.assert_array_equal(a, b, err_msg=path)
    elif isinstance(a, np.generic):
        assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"), path
    elif torch.is_tensor(a):
        assert a.dtype == b.dtype and torch.equal(a, b), path
    else:
        assert a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b)), path


def _round_trip(tree, tmp_path, env_state="signed"):
    safe_state.save(tree, tmp_path / "t.pt")
    return safe_state.decode(torch.load(tmp_path / "t.pt", weights_only=True), env_state)


def test_the_conversion_round_trips_exactly(tmp_path):
    rng = np.random.default_rng(7)
    frames = rng.integers(0, 256, (5, 4, 84, 84), dtype=np.uint8)
    module_state = torch.nn.Linear(3, 2).state_dict()  # an OrderedDict with torch's _metadata
    tree = {
        "frames": frames, "frame_slice": frames[1:3, 2], "strided": frames[:, 0, ::2, 1],  # views: only they are saved
        "actions": rng.integers(0, 6, 16), "obs": rng.standard_normal((16, 4)).astype(np.float32),
        "priorities": rng.random(16), "done": rng.random(16) < 0.5, "empty": np.zeros((0, 3), np.float32),
        "zero_d": np.array(2.5), "uint64": np.array([2**64 - 1, 0], np.uint64), "half": np.ones(3, np.float16),
        "complex": np.array([1 + 2j]), "strings": np.array(["ab", "c"]), "big_endian": np.arange(3, dtype=">f8"),
        "dates": np.array(["2024-01-02"], "M8[D]"), "long_double": np.ones(2, np.longdouble) / 3,
        "scalars": [np.int64(3), np.float32(0.1), np.float64(0.2), np.bool_(True), np.uint8(255), np.longdouble(1) / 3],
        "numpy_rng": rng.bit_generator.state,  # PCG64: 128-bit ints
        "mt19937": np.random.MT19937(3).state,  # a uint32 key array inside
        "python_rng": random.Random(5).getstate(), "torch_rng": torch.Generator().manual_seed(9).get_state(),
        "nested": {"pending": [[(frames[0], np.int64(1), 0.5)], []], "finished": [(1.0, 10)], 3: ("x", None, b"\x00")},
        "module": module_state, "big_int": -(2**130) + 1, "nan": float("nan"), "shape": torch.Size([2, 3]),
        "tensors": [torch.arange(4, dtype=torch.int64), torch.zeros(2, dtype=torch.bfloat16)],
    }
    back, dropped = _round_trip(tree, tmp_path)
    assert dropped == []
    _same(tree, back)
    assert back["module"]._metadata == module_state._metadata
    follow = np.random.default_rng()
    follow.bit_generator.state = back["numpy_rng"]
    np.testing.assert_array_equal(follow.random(4), rng.random(4))  # the generator goes on where it was
    python = random.Random()
    python.setstate(back["python_rng"])
    assert python.random() == random.Random(5).random()
    # a view is saved as itself, not as the array it is a view of
    safe_state.save({"row": frames[0, 0]}, tmp_path / "view.pt")
    assert (tmp_path / "view.pt").stat().st_size < frames.nbytes / 10


@dataclass
class _Settings:
    lr: float = 0.1


@pytest.mark.parametrize("value, where", [
    (np.array([object()]), "state.x.y is a numpy array of dtype object"),
    (np.zeros(2, [("a", "f4"), ("b", "i4")]), "arrays of objects and structured arrays"),
    (_Settings(), "state.x.y is a test_safe_checkpoints._Settings"),
    (deque([1]), "state.x.y is a collections.deque"),
])
def test_what_weights_only_cannot_hold_is_refused_when_saving(tmp_path, value, where):
    with pytest.raises(TypeError, match=where.replace("(", r"\(").replace(")", r"\)")):
        safe_state.save({"x": {"y": value}}, tmp_path / "t.pt")
    assert not (tmp_path / "t.pt").exists()


def test_a_pickle_is_unpickled_only_as_the_reader_trusts_it(tmp_path, monkeypatch):
    data = safe_state.Pickle(pickle.dumps({"env": 1}))
    assert _round_trip({"envs": data}, tmp_path)[0]["envs"] == data  # signed here
    assert _round_trip({"envs": data}, tmp_path, "never") == ({"envs": None}, ["this reader never unpickles"])
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "another_user"))
    raw = torch.load(tmp_path / "t.pt", weights_only=True)
    assert safe_state.decode(raw) == ({"envs": None}, ["its signature does not match this user's checkpoint key"])
    assert safe_state.decode(raw, "any")[0]["envs"] == data
    key = safe_state.key_path()
    assert not key.exists()  # reading makes no key; writing does, readable by its owner only
    safe_state.save({"envs": data}, tmp_path / "t2.pt")
    assert key.stat().st_mode & 0o077 == 0
    assert safe_state.decode(torch.load(tmp_path / "t2.pt", weights_only=True))[0]["envs"] == data


# --- files that would run code ------------------------------------------------------------------
class _Evil:
    """Unpickling it creates ``marker``: what a checkpoint from an attacker would do."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


def _evil_env_state(run: Path, marker: Path, mac: str | None) -> None:
    """Put a malicious pickle in place of the step file's env state (a valid v3 file otherwise)."""
    step = run / STEP
    raw = torch.load(step, weights_only=True)
    raw["executor"]["envs"] = {"__hetrl__": "pickle", "data": pickle.dumps(_Evil(marker)), "mac": mac}
    torch.save(raw, step)


@pytest.mark.parametrize("mac", [None, "00" * 32], ids=["unsigned", "forged"])
def test_a_malicious_env_state_is_ignored_by_load_eval_export_and_resume(tmp_path, run, mac, capsys, only_weights_only):
    copy, trusting = _copy(run, tmp_path), _copy(run, tmp_path, "trusting")
    marker = tmp_path / "pwned"
    _evil_env_state(copy, marker, mac)
    _evil_env_state(trusting, marker, mac)
    step = copy / STEP
    policy = hetrl.load(copy, checkpoint="final")
    assert policy.source == step
    assert hetrl.evaluate(copy, episodes=1, checkpoint="final").env_steps == 300
    assert main(["eval", str(copy), "--checkpoint", str(step), "--episodes", "1"]) == 0
    assert main(["export", str(copy), "--checkpoint", str(step), "--out", str(tmp_path / "p.pt")]) == 0
    capsys.readouterr()
    resumed = hetrl.resume(copy, steps=400, progress=False)
    assert resumed.env_steps == 400
    note = capsys.readouterr().err
    assert "note: the env state in step_0000000300.pt is not restored" in note and "--trust-env-state" in note
    assert not marker.exists()
    with pytest.raises(Exception):  # noqa: B017 (the payload is no env batch: the run fails once it ran)
        hetrl.resume(trusting, steps=400, progress=False, trust_env_state=True)
    assert marker.exists()  # the flag, and only the flag, unpickles it: the payload was real


def _evil_file(path: Path, marker: Path, fmt: str = "hetrl-checkpoint-v3", **extra) -> None:
    torch.save({"format": fmt, "kind": "replay" if "replay" in path.name else None, **extra, "x": _Evil(marker)}, path)


@pytest.mark.parametrize("fmt", ["hetrl-checkpoint-v3", "hetrl-checkpoint-v2"])
def test_a_file_that_names_code_is_refused_without_running_it(tmp_path, run, fmt, only_weights_only):
    copy = _copy(run, tmp_path)
    marker = tmp_path / "pwned"
    step = copy / STEP
    _evil_file(step, marker, fmt, numpy=np.zeros(3))  # numpy arrays too: the older formats' allowance
    for call in (lambda: hetrl.load(copy, checkpoint="final"), lambda: hetrl.evaluate(copy, episodes=1, checkpoint="final"),
                 lambda: hetrl.resume(copy, steps=400, progress=False)):
        with pytest.raises(HetrlError, match=r"step_0000000300.pt is refused: it names code to run \(\S*open\)"):
            call()
    assert main(["export", str(copy), "--checkpoint", str(step), "--out", str(tmp_path / "p.pt")]) == 2
    assert not marker.exists()


def test_a_replay_file_that_names_code_is_refused_without_running_it(tmp_path, run, only_weights_only):
    copy = _copy(run, tmp_path)
    marker = tmp_path / "pwned"
    _evil_file(copy / "checkpoints" / "replay_step_0000000300.pt", marker)
    with pytest.raises(HetrlError, match=r"its replay file replay_step_0000000300.pt is refused \(it names code to run"):
        hetrl.resume(copy, steps=400, progress=False)
    assert hetrl.load(copy, checkpoint="final").source == copy / STEP  # the replay file is never read there
    assert not marker.exists()


def test_a_numpy_array_in_a_v3_file_is_refused(tmp_path, run):
    copy = _copy(run, tmp_path)
    torch.save({"format": "hetrl-checkpoint-v3", "x": np.zeros(2)}, copy / STEP)
    with pytest.raises(HetrlError, match="only files of the older formats v1 and v2 may"):
        hetrl.load(copy, checkpoint="final")


# --- resume -------------------------------------------------------------------------------------
def test_resume_of_another_users_checkpoint_restarts_its_envs_unless_trusted(tmp_path, monkeypatch, capsys):
    """Signed by this user: bit-exact (tests/test_resume.py). Made under another key: the envs
    restart, with a note; with trust_env_state the run is again the one never stopped."""
    common = dict(checkpoint_every=10_000, eval_every=0, **RUN)
    hetrl.train("dqn", "CartPole-v1", steps=500, run_dir=tmp_path / "straight", **common)
    hetrl.train("dqn", "CartPole-v1", steps=300, run_dir=tmp_path / "split", **common)
    shutil.copytree(tmp_path / "split", tmp_path / "untrusted")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "another_user"))
    capsys.readouterr()
    hetrl.resume(tmp_path / "untrusted", steps=500, progress=False)
    assert "its signature does not match this user's checkpoint key" in capsys.readouterr().err
    hetrl.resume(tmp_path / "split", steps=500, progress=False, trust_env_state=True)
    assert "note: the env state" not in capsys.readouterr().err
    a, b, c = (_executor_state(tmp_path / name) for name in ("straight", "split", "untrusted"))
    straight_envs = _env_state(a.pop("envs"))
    _assert_identical(straight_envs, _env_state(b.pop("envs")))
    _assert_identical(a, b)
    with pytest.raises(AssertionError):
        _assert_identical(straight_envs, _env_state(c.pop("envs")))


def test_checkpoints_of_older_versions_load_and_resume_with_a_note(tmp_path, capsys, only_weights_only):
    """tests/data/checkpoints_0.1.0 (format v1, numpy arrays pickled inside) is read with
    weights_only=True; its env state is unsigned, so the envs restart unless trusted."""
    for trust in (False, True):
        copy = tmp_path / f"old_{trust}"
        shutil.copytree(OLD / "dqn_inline", copy)
        _, state = RunDir.open(copy).load_checkpoint(env_state="any" if trust else "signed")
        assert state["format"] == "hetrl-checkpoint-v1" and isinstance(state["executor"]["replay"]["obs"], np.ndarray)
        assert (state["executor"]["envs"] is not None) == trust
        capsys.readouterr()
        assert hetrl.resume(copy, steps=600, progress=False, trust_env_state=trust).env_steps == 600
        note = capsys.readouterr().err
        assert ("it was written by an older hetrl, which did not sign env states" in note) != trust
        # the new checkpoint is in the new format
        assert torch.load(copy / "checkpoints" / "step_0000000600.pt", weights_only=True)["format"] == "hetrl-checkpoint-v3"
    assert hetrl.load(OLD / "td3_inline", checkpoint="final").source.name == "step_0000000500.pt"
