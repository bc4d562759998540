"""The library of primitive implementations: importing this module registers all of them."""

import hetrl.algos.base  # noqa: F401  Learn/torch
import hetrl.algos.blas  # noqa: F401  Learn/blas
import hetrl.algos.fused  # noqa: F401  Learn/numba
import hetrl.algos.graphed  # noqa: F401  Learn/cudagraph
import hetrl.envs.batch  # noqa: F401  EnvStep/gymnasium
import hetrl.replay  # noqa: F401  ReplayAdd, ReplaySample, PriorityUpdate / numpy, torch
import hetrl.runtime.acting  # noqa: F401  Act, WeightSync / numpy, torch
import hetrl.tabular.backends  # noqa: F401  TabularLearn / numba-threads, numba-processes, torch, ray
