"""A graph pass for the compiled GPU learner: a narrow layer's bias goes outside its product.

``nn.Linear`` runs ``addmm(bias, x, weight.T)``. On CUDA, torch sends an addmm with a bias vector to
cuBLASLt's bias epilogue, and for a result only a few columns wide (a Q-network's or a policy's
output layer) that product took over twice as long as the same product without its bias on an
H200 (docs/results.md, 'Inductor writes Adam, and where the rest of the update goes', has the
figures). Inductor already takes the bias out where every use of the result is elementwise (a
hidden layer's ReLU); an output layer's result goes to a gather, a max or a loss, so it stays an
addmm. This pass rewrites those narrow ones as ``mm`` plus an add, which Inductor fuses into what
reads the result. The arithmetic is the same sums, so results agree to rounding.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files

NARROW_COLUMNS = 32  # the widest result rewritten: output layers (up to Atari's 18 actions), not hidden layers

_aten = torch.ops.aten


class BiasOutsideNarrowProducts(CustomGraphPass):
    """Rewrites ``addmm(bias, a, b)`` with a 1-D bias and at most NARROW_COLUMNS result columns as
    ``mm(a, b) + bias`` (Inductor's ``post_grad_custom_pre_pass``). ``rewritten`` counts them."""

    def __init__(self) -> None:
        self.rewritten = 0

    def __call__(self, graph: torch.fx.Graph) -> None:
        for node in list(graph.nodes):
            if node.target is not _aten.addmm.default or node.kwargs:  # alpha/beta other than 1: left alone
                continue
            bias, a, b = node.args[:3]
            result, vector = node.meta.get("val"), getattr(bias, "meta", {}).get("val")
            if result is None or vector is None or vector.dim() != 1 or result.shape[-1] > NARROW_COLUMNS:
                continue
            with graph.inserting_before(node):
                product = graph.call_function(_aten.mm.default, (a, b))
                product.meta["val"] = result  # same shape, dtype and device: later passes read it
                summed = graph.call_function(_aten.add.Tensor, (product, bias))
                summed.meta["val"] = result
            node.replace_all_uses_with(summed)
            graph.erase_node(node)
            self.rewritten += 1

    def uuid(self) -> Any:
        return get_hash_for_files((__file__,))  # Inductor's cache keys on this file's text
