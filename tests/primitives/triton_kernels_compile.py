"""Compiles every variant of hetrl.nets.triton_dqn's kernels that Learn/triton launches, for a
Hopper GPU (sm_90: H100, H200), with no GPU present: Triton's own front end, LLVM and the ptxas it
ships. Run in a process without TRITON_INTERPRET (tests/primitives/test_learn_triton.py starts it):
the interpreter accepts code the compiler refuses. Prints one line per variant: name and cubin size."""

import sys

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from hetrl.nets import triton_dqn as k

PTRS = ("x_ptr", "next_ptr", "flat_ptr", "y_ptr", "q_ptr", "actions_ptr", "rewards_ptr", "discounts_ptr", "weights_ptr",
        "g_ptr", "td_ptr", "terms_ptr", "step_ptr", "h_ptr", "grads_ptr", "below_ptr", "parts_ptr", "m_ptr", "v_ptr",
        "loss_ptr")
FLOATS = ("lr", "beta1", "beta2", "log_beta1", "log_beta2", "eps", "max_norm", "tau")


def signature(fn, constexprs, pointer_types):
    out = {}
    for name in fn.arg_names:
        if name in constexprs:
            out[name] = "constexpr"
        elif name in PTRS:
            out[name] = pointer_types.get(name, "*fp32")
        else:
            out[name] = "fp32" if name in FLOATS else "i32"
    return out


VARIANTS = [  # (kernel, constexprs, pointer types other than *fp32)
    (k.linear_forward, dict(FIRST=True, RELU=True, BM=32, BN=64, BK=32), {"x_ptr": "*u8", "next_ptr": "*u8"}),
    (k.linear_forward, dict(FIRST=True, RELU=False, BM=32, BN=64, BK=32), {}),
    (k.linear_forward, dict(FIRST=False, RELU=True, BM=32, BN=64, BK=32), {}),
    (k.td_loss, dict(DOUBLE=True, BR=64, BA=2), {"actions_ptr": "*i64", "step_ptr": "*i32"}),
    (k.td_loss, dict(DOUBLE=False, BR=64, BA=32), {"actions_ptr": "*i64", "step_ptr": "*i32"}),
    (k.linear_backward, dict(BM=32, BN=64, BK=32), {}),
    (k.linear_backward, dict(BM=32, BN=64, BK=32), {"h_ptr": "*u8"}),
    (k.clip_adam, dict(CLIP=True, POLYAK=True, BLOCK=1024, PARTS=64, LB=64), {"step_ptr": "*i32"}),
    (k.clip_adam, dict(CLIP=False, POLYAK=False, BLOCK=1024, PARTS=1, LB=256), {"step_ptr": "*i32"}),
]


def main() -> int:
    target = GPUTarget("cuda", 90, 32)
    for fn, constexprs, pointer_types in VARIANTS:
        src = ASTSource(fn=fn, signature=signature(fn, constexprs, pointer_types), constexprs=constexprs)
        compiled = triton.compile(src, target=target)
        print(fn.__name__, constexprs, len(compiled.asm["cubin"]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
