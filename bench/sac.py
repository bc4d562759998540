"""SAC's Learn/torch and Learn/blas on the host, against the matrix products they must compute:
what the hand-written host learner makes of SAC's update, beside what it makes of DDPG's.

    python bench/sac.py                         # 256x256, batch 256, Pendulum-v1, 1 thread
    python bench/sac.py --hidden 64,64 --batch 256

Prints, in microseconds per update (bench/fused.py's timing: the best of --repeats blocks of --calls
calls after a warm-up, but timed by the calling thread's CPU time, which is where a 1-thread torch
update runs, so that other jobs on a shared machine do not count; --wall for wall time):
Learn/torch for SAC, DDPG and TD3 at the same sizes, and Learn/blas for SAC and DDPG (the
hand-written host learner, fed the replay's numpy arrays as a run feeds it); SAC's ``step``
(critics, Polyak) and ``periodic`` (actor, temperature) of Learn/torch alone; and the floor: the
update's hidden-layer products (hidden x hidden x batch) alone, as torch.mm into a preallocated
output, which any learner must run.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from hetrl.algos import DDPGConfig, SACConfig, TD3Config, make_algorithm
from hetrl.envs import env_spec
from hetrl.primitives import get

from fused import rate  # bench/fused.py: calls per second, best of 3 after a warm-up


def cpu_rate(fn, calls: int, repeats: int) -> float:
    """``fused.rate`` on the calling thread's CPU clock."""
    for _ in range(max(20, calls // 20)):
        fn()
    best = 0.0
    for _ in range(repeats):
        start = time.thread_time()
        for _ in range(calls):
            fn()
        best = max(best, calls / (time.thread_time() - start))
    return best

# Products of a hidden layer (batch x hidden x hidden) per update, for two hidden layers: a forward
# pass is one, a backward pass two (the weight's gradient and the input's), one when only the input's
# gradient is wanted (a frozen critic), none for the first layer (a few inputs) or the output layer.
SAC_PRODUCTS = {
    "step": 1 + 2 + 2 + 2 * 2,  # actor on s' (1), target critics (2), critics (2), their backward (2 x 2)
    "periodic": 1 + 2 + 2 * 1 + 2,  # actor on s (1), critics on its actions (2), their input gradient (2 x 1), actor backward (2)
}
DDPG_PRODUCTS = 1 + 1 + 1 + 2 + 1 + 1 + 1 + 2  # target actor, target critic, critic, critic backward; actor, critic, input grad, actor backward
TD3_PRODUCTS = 1 + 2 + 2 + 2 * 2 + (1 + 1 + 1 + 2) / 2  # twin critics; the actor's step every second update


def batch_for(algo, b: int, rng: np.random.Generator) -> dict[str, torch.Tensor]:
    spec = algo.spec
    return {k: torch.as_tensor(v) for k, v in {
        "obs": rng.standard_normal((b,) + spec.obs_shape).astype(np.float32), "actions": algo.random_actions(rng, b),
        "rewards": rng.standard_normal(b).astype(np.float32), "next_obs": rng.standard_normal((b,) + spec.obs_shape).astype(np.float32),
        "discounts": np.full(b, 0.99, np.float32), "weights": np.ones(b, np.float32)}.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", default="256,256")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--wall", action="store_true", help="time by the wall clock, not the thread's CPU time")
    args = parser.parse_args()

    def best_us(fn, calls=args.calls):
        return 1e6 / (rate if args.wall else cpu_rate)(fn, calls, args.repeats)

    torch.set_num_threads(1)
    hidden, b = tuple(int(w) for w in args.hidden.split(",")), args.batch
    spec, rng = env_spec("Pendulum-v1"), np.random.default_rng(0)
    us = {}
    for name, config in (("sac", SACConfig), ("ddpg", DDPGConfig), ("td3", TD3Config)):
        algo = make_algorithm(name, spec, config(hidden=hidden, batch_size=b))
        learn, batch = get("Learn", "torch").cls(algo, "cpu", seed=0), batch_for(algo, b, rng)
        us[name] = best_us(lambda learn=learn, batch=batch: learn.learn(**batch))
        if name in ("sac", "ddpg"):  # what the hand-written host learner makes of the update at these sizes
            blas = get("Learn", "blas").cls(algo, "cpu", seed=0)
            host = {k: v.numpy() for k, v in batch.items()}
            us[f"{name}, Learn/blas"] = best_us(lambda blas=blas, host=host: blas.learn(**host))
        if name == "sac":
            learner = learn.learner
            inputs = {**batch, **learner.draw_inputs(batch)}
            us["sac step"] = best_us(lambda: learner.step(inputs))
            us["sac periodic"] = best_us(lambda: learner.periodic(inputs))
    width = hidden[-1]
    x, w, out = torch.randn(b, width), torch.randn(width, width), torch.empty(b, width)
    product = best_us(lambda: torch.mm(x, w.t(), out=out), 10 * args.calls)
    sac_floor = product * sum(SAC_PRODUCTS.values())
    clock = "wall time" if args.wall else "the thread's CPU time"
    print(f"SAC, DDPG and TD3 on Pendulum-v1, {'x'.join(map(str, hidden))}, batch {b}, 1 thread: us per update ({clock})\n")
    print("| update | Learn (us; torch unless named) | hidden-layer products | their time alone (us) | Learn / products |")
    print("|---|---:|---:|---:|---:|")
    rows = [("sac", sum(SAC_PRODUCTS.values())), ("sac, Learn/blas", sum(SAC_PRODUCTS.values())), ("sac step", SAC_PRODUCTS["step"]),
            ("sac periodic", SAC_PRODUCTS["periodic"]), ("ddpg", DDPG_PRODUCTS), ("ddpg, Learn/blas", DDPG_PRODUCTS), ("td3", TD3_PRODUCTS)]
    for name, n in rows:
        print(f"| {name} | {us[name]:,.0f} | {n:g} | {n * product:,.0f} | {us[name] / (n * product):.2f}x |")
    print(f"\none {b}x{width} by {width}x{width} product: {product:.0f} us; SAC's products: {sac_floor:,.0f} us "
          f"({sac_floor / us['sac']:.0%} of its Learn/torch update, {sac_floor / us['sac, Learn/blas']:.0%} of its Learn/blas update); "
          f"SAC's Learn/torch takes {us['sac'] / us['sac, Learn/blas']:.2f}x Learn/blas's time")


if __name__ == "__main__":
    main()
