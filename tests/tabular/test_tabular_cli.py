"""`hetrl tabular collect` and `hetrl tabular train`, through the subparser the main CLI registers."""

import argparse

import numpy as np
import pytest

from hetrl.errors import HetrlError
from hetrl.tabular.cli import add_subparser, count


def hetrl(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="hetrl")
    add_subparser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(list(argv))
    return args.func(args)


@pytest.fixture(scope="module")
def dataset_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("tabular") / "fl.npz"
    assert hetrl("tabular", "collect", "FrozenLake-v1", "--transitions", "20k", "--out", str(path)) == 0
    return path


def test_collect_writes_the_dataset(dataset_file, capsys, tmp_path):
    assert dataset_file.is_file()
    out = tmp_path / "lake8.npz"
    hetrl("tabular", "collect", "FrozenLake-v1", "--transitions", "1000", "--env-arg", "map_name=8x8",
          "--env-arg", "is_slippery=false", "--policy", "epsilon-greedy", "--out", str(out))
    printed = capsys.readouterr().out
    assert "wrote" in printed and "64 states" in printed
    from hetrl.tabular.dataset import load

    data = load(out)
    assert data.n_states == 64 and data.env_kwargs == {"map_name": "8x8", "is_slippery": False}


@pytest.mark.parametrize("number_format", ["fp32", "int32"])
def test_train_prints_the_summary(dataset_file, capsys, tmp_path, number_format):
    q_file = tmp_path / "q.npy"
    code = hetrl("tabular", "train", "FrozenLake-v1", "--dataset", str(dataset_file), "--algo", "q", "--units", "2",
                 "--format", number_format, "--epochs", "3", "--eval-episodes", "50", "--save-q", str(q_file))
    out = capsys.readouterr().out
    assert code == 0
    for row in ("updates/s", "per-unit updates/s", "merge time", "greedy success rate", "value gap", "60,000"):
        assert row in out
    assert np.load(q_file).shape == (16, 4)


def test_train_with_merges_and_sarsa(dataset_file, capsys):
    hetrl("tabular", "train", "FrozenLake-v1", "--dataset", str(dataset_file), "--algo", "sarsa", "--units", "3",
          "--merge-every", "1000", "--order", "random", "--eval-episodes", "0")
    out = capsys.readouterr().out
    assert "every 1,000" in out and "7 merge(s)" in out and "greedy" not in out


def test_cli_errors(dataset_file, tmp_path):
    train = ("tabular", "train")
    with pytest.raises(HetrlError, match="needs Discrete"):
        hetrl(*train, "CartPole-v1", "--dataset", str(dataset_file))
    with pytest.raises(HetrlError, match="does not exist"):
        hetrl(*train, "FrozenLake-v1", "--dataset", str(tmp_path / "missing.npz"))
    broken = tmp_path / "broken.npz"
    broken.write_bytes(dataset_file.read_bytes()[:1000])
    with pytest.raises(HetrlError, match="malformed"):
        hetrl(*train, "FrozenLake-v1", "--dataset", str(broken))
    with pytest.raises(HetrlError, match="collected on FrozenLake-v1, not Taxi-v4"):
        hetrl(*train, "Taxi-v4", "--dataset", str(dataset_file))
    with pytest.raises(HetrlError, match="did you mean 'numba-threads'"):
        hetrl(*train, "FrozenLake-v1", "--dataset", str(dataset_file), "--backend", "numba-thread")
    with pytest.raises(HetrlError, match="cannot split 20000 transitions into 30000 units"):
        hetrl(*train, "FrozenLake-v1", "--dataset", str(dataset_file), "--units", "30000")
    with pytest.raises(HetrlError, match="not KEY=VALUE"):
        hetrl("tabular", "collect", "FrozenLake-v1", "--env-arg", "slippery")
    with pytest.raises(HetrlError, match="directory .* does not exist"):
        hetrl("tabular", "collect", "FrozenLake-v1", "--out", str(tmp_path / "no" / "such.npz"))
    with pytest.raises(SystemExit):  # argparse rejects unknown choices itself
        hetrl(*train, "FrozenLake-v1", "--dataset", str(dataset_file), "--format", "int8")


def test_count_parser():
    assert [count(t) for t in ("10000", "100_000", "100k", "1M", "1e6")] == [10_000, 100_000, 100_000, 1_000_000, 1_000_000]
    for bad in ("abc", "0", "1.5", "-3"):
        with pytest.raises(argparse.ArgumentTypeError):
            count(bad)
