"""One Learn/cudagraph update on a GPU: its time, and where the time goes (issue 22's < 100 us aim).

Each backend named (default: Learn/cudagraph, which captures the eager update,
Learn/cudagraph-compiled, which captures torch.compile's, and Learn/triton, DQN's update as 2L + 2
Triton kernels of hetrl's own, on the MLP cases) is measured on each network (DQN 64x64
and 256x256 at batch 64, DDPG 400x300 at batch 256, the MinAtar and Nature CNN DQN at batch 32):
the update's wall time per call in steady state, three ways,
- ``launch``: host time of ``learn()`` alone (inputs packed, one pinned copy, graph launched),
- ``synced``: ``learn()`` then ``torch.cuda.synchronize()`` each call (what the profiler measures),
- ``pipelined``: N calls back to back and one synchronize (the rate a loop that never waits gets),
then the kernels of one synced update from ``torch.profiler``: count, summed GPU time, the largest,
and the host-side work between the graph launches (everything that is not ``cudaGraphLaunch``).

``--adam`` sets Adam's form in each learner before its first update: ``as-built`` (default: as
hetrl builds it, torch's fused kernel for Learn/cudagraph and the traced multi-tensor form for
Learn/cudagraph-compiled), ``fused`` (torch's one fused kernel, which gives each 65,536-element
chunk of a tensor one block, so a 256x256 weight runs on one multiprocessor; a compiled update
calls it as it is) or ``foreach`` (the multi-tensor form, which torch.compile traces, so Inductor
writes Adam's kernels). ``--compile-mode max-autotune-no-cudagraphs`` compiles with Inductor's
autotuning (each GEMM timed as cuBLAS and as Triton templates, which can fuse the bias and the
activation), without Inductor's own CUDA graphs (the learner captures its own). ``--narrow-pass on
off`` measures the compiled backend with and without its graph pass that adds an output layer's
bias outside its product (hetrl.primitives.narrow_products); the first update then compiles with
Inductor's caches off, so both compile cold and neither reads the other's cached code. ``--blas
cublaslt`` has torch's GEMMs go through cuBLASLt instead of cuBLAS.

Before the timing, each backend's first update is timed alone (capture, and compilation where it
compiles), and its losses over 10 updates are compared with Learn/torch's on the same GPU and batches.

    python bench/cudagraph_update.py                  # needs CUDA; writes nothing, prints a table
    python bench/cudagraph_update.py --out OUT.json   # also the raw figures
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
from contextlib import nullcontext
from unittest import mock
from pathlib import Path
from typing import Any

import numpy as np
import torch

CASES = {
    "dqn-64x64-b64": ("dqn", "CartPole-v1", dict(hidden=(64, 64), batch_size=64)),
    "dqn-256x256-b64": ("dqn", "CartPole-v1", dict(hidden=(256, 256), batch_size=64)),
    "ddpg-400x300-b256": ("ddpg", "Pendulum-v1", dict(hidden=(400, 300), batch_size=256)),
    "dqn-minatar-b32": ("dqn", "MinAtar/Breakout-v1", dict(network="minatar", batch_size=32)),
    "dqn-nature-b32": ("dqn", "ALE/Breakout-v5", dict(network="nature", batch_size=32)),
}


def host_batch(algo: Any, batch: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A replay batch as the host replay hands it over (uint8 images stay uint8), made as the
    profiler makes the one it times Learn on."""
    from hetrl.profile import synthetic_transitions

    return {**synthetic_transitions(algo, batch, rng), "weights": np.ones(batch, np.float32)}


def unsupported(case: str, backend: str) -> str | None:
    """Why ``backend`` does not serve ``case``'s algorithm, or None."""
    from hetrl.algos import algorithm_class, make_algorithm
    from hetrl.envs import env_spec
    from hetrl.primitives import get

    name, env_id, settings = CASES[case]
    return get("Learn", backend).unsupported(make_algorithm(name, env_spec(env_id), algorithm_class(name).Config(**settings)))


def use_adam(learner: Any, kind: str) -> None:
    """Switch every Adam of ``learner`` (a Learn/cudagraph*) to ``kind`` (fused or foreach) before
    its first update; ``as-built`` leaves them as hetrl built them."""
    if kind != "as-built":
        learner.learner.adam_form(fused=kind == "fused", foreach=kind == "foreach")


def measure(case: str, calls: int, backend: str, adam: str = "as-built", mode: str = "default",
            narrow: str = "on", cold: bool = False, tiles: tuple[int, ...] | None = None) -> dict[str, Any]:
    """One backend on one case; ``cold``: the first update compiles with Inductor's caches off;
    ``tiles``: Learn/triton's (rows, columns, reduction, warps), its default where None."""
    from hetrl.algos import algorithm_class, make_algorithm
    from hetrl.envs import env_spec
    from hetrl.primitives import get
    from hetrl.primitives.learn_torch import LearnTorch

    name, env_id, settings = CASES[case]
    algo = make_algorithm(name, env_spec(env_id), algorithm_class(name).Config(**settings))
    rng = np.random.default_rng(0)
    batches = [host_batch(algo, settings["batch_size"], rng) for _ in range(8)]
    # agreement with the eager torch learner, update by update, on the same batches and seed
    from hetrl.primitives.learn_triton import DQNTritonLearner

    with mock.patch.object(DQNTritonLearner, "tiles", tiles or DQNTritonLearner.tiles):
        learner = get("Learn", backend).cls(algo, "cuda", seed=0)
    plain = LearnTorch(algo, "cuda", seed=0)
    use_adam(learner, adam)
    adam_form = sorted({"fused" if g.get("fused") else "foreach" if g.get("foreach") else "for-loop"
                        for o in learner.learner.inner.optimizers() for g in o.param_groups}) or ["own kernel"]
    from torch._inductor import config as inductor_config, list_mode_options

    from hetrl.primitives.narrow_products import BiasOutsideNarrowProducts

    compiling = list_mode_options(mode) | ({"force_disable_caches": True} if cold else {})
    skip = mock.patch.object(BiasOutsideNarrowProducts, "__call__", lambda self, graph: None) if narrow == "off" else nullcontext()
    start = time.perf_counter()
    with inductor_config.patch(compiling), skip:  # read while the first update compiles
        learner.learn(**batches[0])
    torch.cuda.synchronize()
    first_s = time.perf_counter() - start
    plain.learn(**{k: torch.as_tensor(v, device="cuda") for k, v in batches[0].items()})
    worst = 0.0
    for i in range(1, 10):
        a = learner.learn(**batches[i % 8])["loss"].item()
        b = plain.learn(**{k: torch.as_tensor(v, device="cuda") for k, v in batches[i % 8].items()})["loss"].item()
        worst = max(worst, abs(a - b) / max(abs(b), 1e-12))
    for i in range(50):  # warm
        learner.learn(**batches[i % 8])
    torch.cuda.synchronize()

    def per_call(sync: bool) -> float:
        times = []
        for i in range(calls):
            start = time.perf_counter()
            learner.learn(**batches[i % 8])
            if sync:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        torch.cuda.synchronize()
        return statistics.median(times) * 1e6

    launch, synced = per_call(False), per_call(True)
    start = time.perf_counter()
    for i in range(calls):
        learner.learn(**batches[i % 8])
    torch.cuda.synchronize()
    pipelined = (time.perf_counter() - start) / calls * 1e6

    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(20):
            learner.learn(**batches[i % 8])
            torch.cuda.synchronize()
    kernels: dict[str, list[float]] = {}
    host: dict[str, list[float]] = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            kernels.setdefault(e.name, []).append(e.device_time)
        elif e.cpu_parent is None:
            host.setdefault(e.name, []).append(e.cpu_time_total)
    per_update = {k: sum(v) / 20 for k, v in kernels.items()}
    host_per_update = {k: sum(v) / 20 for k, v in host.items()}
    return {"case": case, "backend": backend, "adam": adam, "adam_form": adam_form, "compile_mode": mode,
            "triton_tiles": list(learner.learner.inner.tiles) if backend == "triton" else None,
            "narrow_pass": narrow if learner.compiled else "-", "first_update_s": first_s, "loss_rel_diff_vs_torch": worst,
            "launch_us": launch, "synced_us": synced, "pipelined_us": pipelined,
            "kernels_per_update": sum(len(v) for v in kernels.values()) / 20, "gpu_us_per_update": sum(per_update.values()),
            "top_kernels": sorted(per_update.items(), key=lambda kv: -kv[1])[:8],
            "host_ops": sorted(host_per_update.items(), key=lambda kv: -kv[1])[:8]}


def tiles_arg(text: str) -> tuple[int, int, int, int]:
    """RxCxKxW: rows, columns, reduction (powers of two, 16 or more) and warps (a power of two)."""
    try:
        r, c, k, w = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--triton-tiles takes RxCxKxW, e.g. 32x64x32x4 (got {text!r})") from None
    if min(r, c, k) < 16 or any(v & (v - 1) for v in (r, c, k, w)):
        raise argparse.ArgumentTypeError(f"--triton-tiles: rows, columns and reduction must be powers of two of 16 or more, "
                                         f"warps a power of two (got {text!r})")
    return r, c, k, w


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--backends", nargs="+", default=["cudagraph", "cudagraph-compiled", "triton"],
                        help="Learn backends on a CUDA device; a case a backend does not serve (Learn/triton: DQN on "
                             "MLPs only) is skipped with a line that says so")
    parser.add_argument("--adam", nargs="+", default=["as-built"], choices=("as-built", "fused", "foreach"),
                        help="Adam's form in the measured learner (default: as hetrl builds it)")
    parser.add_argument("--compile-mode", nargs="+", default=["default"], choices=("default", "max-autotune-no-cudagraphs"),
                        help="torch.compile's mode for the compiled backends (the eager one is measured in the default alone)")
    parser.add_argument("--narrow-pass", nargs="+", default=["on"], choices=("on", "off"),
                        help="the compiled backends with (as built) or without the pass that adds an output layer's bias "
                             "outside its product")
    parser.add_argument("--blas", choices=("cublas", "cublaslt"),
                        help="torch's BLAS library for the GEMMs (torch.backends.cuda.preferred_blas_library; default: "
                             "torch's own choice), to see whether the other one's kernels serve these small products better")
    parser.add_argument("--triton-tiles", nargs="+", default=[None], type=tiles_arg, metavar="RxCxKxW",
                        help="Learn/triton's tiles (rows x columns x reduction x warps per program; e.g. 32x64x32x4, its "
                             "default), each measured in turn")
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("cudagraph_update.py: needs CUDA, and torch.cuda.is_available() is False here", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    if args.blas:
        torch.backends.cuda.preferred_blas_library(args.blas)
    rows = []
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, BLAS {torch.backends.cuda.preferred_blas_library()}; "
          f"median us per update over {args.calls} calls")
    runs = [(c, b, a, m, n, t) for c in args.cases for b in args.backends for a in args.adam for m in args.compile_mode
            for n in args.narrow_pass for t in (args.triton_tiles if b == "triton" else [None])
            if "compiled" in b or (m == "default" and n == "on")]
    for case, backend, adam, mode, narrow, tiles in runs:
        said = (f"{case} {backend} adam={adam}" + ("" if mode == "default" else f" mode={mode}")
                + ("" if narrow == "on" else " narrow-pass=off") + ("" if tiles is None else f" tiles={'x'.join(map(str, tiles))}"))
        reason = unsupported(case, backend)
        if reason:
            print(f"{said}: not measured ({reason})", flush=True)
            continue
        try:
            r = measure(case, args.calls, backend, adam, mode, narrow, cold=len(args.narrow_pass) > 1, tiles=tiles) | {
                "blas": str(torch.backends.cuda.preferred_blas_library())}
        except Exception as exc:  # one backend failing (a compile error) does not hide the others
            print(f"{said}: FAILED {type(exc).__name__}: {str(exc)[:400]}", flush=True)
            traceback.print_exc(limit=-12)
            rows.append({"case": case, "backend": backend, "adam": adam, "compile_mode": mode, "narrow_pass": narrow,
                         "failed": f"{type(exc).__name__}: {exc}"[:2000]})
            continue
        rows.append(r)
        print(f"{said} ({'+'.join(r['adam_form'])} Adam): first update {r['first_update_s']:.1f} s, loss vs torch {r['loss_rel_diff_vs_torch']:.1e}; "
              f"launch {r['launch_us']:.0f} us, synced {r['synced_us']:.0f} us, pipelined {r['pipelined_us']:.0f} us; "
              f"{r['kernels_per_update']:.0f} kernels, {r['gpu_us_per_update']:.0f} us of GPU time per update", flush=True)
        for name, us in r["top_kernels"]:
            print(f"    gpu  {us:7.1f} us  {name[:110]}")
        for name, us in r["host_ops"]:
            print(f"    host {us:7.1f} us  {name[:110]}")
        if args.out:  # after each, so a run cut short keeps what it measured
            args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
