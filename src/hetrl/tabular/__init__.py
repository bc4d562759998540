"""Tabular Q-learning and SARSA on experience datasets, data-parallel over processing units.

    from hetrl.tabular import TabularConfig, collect, train_tabular
    from hetrl.tabular.evaluate import evaluate

    data = collect("FrozenLake-v1", 100_000)
    result = train_tabular(data, TabularConfig(units=2, number_format="int32", epochs=10, alpha=0.02))
    evaluate(data.make_env(), result.q, gamma=0.99).success_rate

Names are imported on first use, so that building the CLI parser does not load numba.
(``evaluate`` is not re-exported: the name is taken by the submodule ``hetrl.tabular.evaluate``.)
See docs/tabular.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hetrl.lazy import lazy_exports

_EXPORTS = {
    "TabularDataset": "hetrl.tabular.dataset",
    "collect": "hetrl.tabular.dataset",
    "load": "hetrl.tabular.dataset",
    "Order": "hetrl.tabular.schedule",
    "FixedPoint": "hetrl.tabular.fixed_point",
    "TabularConfig": "hetrl.tabular.train",
    "TabularResult": "hetrl.tabular.train",
    "train_tabular": "hetrl.tabular.train",
    "Evaluation": "hetrl.tabular.evaluate",
}
__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from hetrl.tabular.dataset import TabularDataset, collect, load
    from hetrl.tabular.evaluate import Evaluation
    from hetrl.tabular.fixed_point import FixedPoint
    from hetrl.tabular.schedule import Order
    from hetrl.tabular.train import TabularConfig, TabularResult, train_tabular

__getattr__ = lazy_exports(__name__, _EXPORTS)
