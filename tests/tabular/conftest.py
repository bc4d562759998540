import numpy as np
import pytest

from hetrl.tabular.dataset import TabularDataset, collect


def synthetic_dataset(n: int, n_states: int, n_actions: int, reward_scale: float, seed: int, done_rate: float = 0.1) -> TabularDataset:
    """Uniformly random transitions: every table entry and the terminal case get exercised."""
    rng = np.random.default_rng(seed)
    return TabularDataset(
        env_id="synthetic",
        n_states=n_states,
        n_actions=n_actions,
        obs=rng.integers(0, n_states, n).astype(np.int32),
        action=rng.integers(0, n_actions, n).astype(np.int32),
        reward=(rng.uniform(-1, 1, n) * reward_scale).astype(np.float32),
        next_obs=rng.integers(0, n_states, n).astype(np.int32),
        done=rng.random(n) < done_rate,
        next_action=rng.integers(0, n_actions, n).astype(np.int32),
    )


@pytest.fixture(scope="session")
def frozenlake_small() -> TabularDataset:
    return collect("FrozenLake-v1", 3000, seed=1)


@pytest.fixture(scope="session")
def frozenlake_100k() -> TabularDataset:
    return collect("FrozenLake-v1", 100_000, seed=0)


@pytest.fixture(scope="session")
def make_synthetic():
    return synthetic_dataset
