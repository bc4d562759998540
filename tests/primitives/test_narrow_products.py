"""The compiled GPU learner's graph pass (hetrl.primitives.narrow_products): a narrow layer's bias
outside its product, the same results; wide layers, and addmm with scales, left as they are."""

import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from hetrl.primitives.narrow_products import NARROW_COLUMNS, BiasOutsideNarrowProducts


def _targets(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def test_a_narrow_addmm_becomes_a_product_and_an_add_with_the_same_result():
    torch.manual_seed(0)
    x = torch.randn(16, 64)
    w_wide, b_wide = torch.randn(NARROW_COLUMNS + 1, 64), torch.randn(NARROW_COLUMNS + 1)
    w_out, b_out = torch.randn(3, NARROW_COLUMNS + 1), torch.randn(3)

    def net(x, w_wide, b_wide, w_out, b_out):
        h = F.linear(x, w_wide, b_wide)  # wider than NARROW_COLUMNS: left alone
        q = F.linear(h, w_out, b_out)  # an output layer: rewritten
        return q.max(dim=1).values, torch.addmm(b_out, h, w_out.t(), beta=0.5)  # scaled: left alone

    args = (x, w_wide, b_wide, w_out, b_out)
    gm = make_fx(net)(*args)
    assert _targets(gm).count(torch.ops.aten.addmm.default) == 3
    narrow = BiasOutsideNarrowProducts()
    narrow(gm.graph)
    gm.recompile()
    assert narrow.rewritten == 1
    assert _targets(gm).count(torch.ops.aten.addmm.default) == 2 and torch.ops.aten.mm.default in _targets(gm)
    for got, want in zip(gm(*args), net(*args)):
        torch.testing.assert_close(got, want)


def test_the_pass_names_itself_by_its_source_for_inductors_cache():
    a, b = BiasOutsideNarrowProducts(), BiasOutsideNarrowProducts()
    assert a.uuid() == b.uuid() and isinstance(a.uuid(), str | bytes)
