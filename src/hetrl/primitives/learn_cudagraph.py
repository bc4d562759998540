"""Learn / cudagraph: a torch learner's whole update replayed as CUDA graphs.

The networks of DRL are small, so on a GPU an update is bound by kernel launches rather than
arithmetic: a DQN update is some 60 kernels and a DDPG update some 150, each launched by the host
in turn, so on a GPU machine with a slow host CPU Learn/torch on cuda is bound by the host's launch
rate (docs/benchmarks.md, 'Measurements behind the code'). A CUDA graph records those kernels
once and replays them with one launch.

How (the learner is a :class:`~hetrl.algos.base.TorchLearner`, whose update is ``step`` every time
and ``periodic`` when due):

- Capture happens at the first update, and again after a checkpoint is loaded (loading replaces
  the optimizer state tensors the graphs read):
  1. a throwaway learner of the same algorithm runs a few updates on the first batch, on a side
     stream, so that lazily made things (cuBLAS workspaces, the optimizer state) exist;
  2. where the real learner's optimizer has no state yet, it gets zeros shaped like the
     throwaway's: what its first Adam step would start from;
  3. ``step`` and ``periodic`` are captured from the real learner into one memory pool. Capture
     records kernels without running them, so the learner's state is untouched.
- Each update: the inputs go into the graphs' static input tensors (host arrays through one pinned
  staging buffer and one copy; device tensors by a device copy), random inputs are drawn outside
  the graph (:meth:`TorchLearner.draw_inputs`), ``step`` replays, the update counter advances and
  ``periodic`` replays when due. Outputs are cloned, since the next replay overwrites them:
  ``step``'s every update, ``periodic``'s (the actor's loss) when it replayed.
- Adam runs with ``capturable=True`` (its step count on the device). Checkpoints keep the torch
  learner's format (capturable off), so a run resumes on either backend.

Results equal Learn/torch's on the same device up to float rounding (tests/test_cuda.py checks it
update by update).

``compiled=True`` (Learn/cudagraph-compiled) captures ``torch.compile``'s versions of ``step`` and
``periodic`` instead of the eager ones: Inductor fuses the update's elementwise work (targets,
loss, gradient clipping, Polyak averaging) into a few generated kernels, so the graph replays
fewer of them, and an output layer's bias is added outside its product
(:mod:`hetrl.primitives.narrow_products`). Its optimizers run Adam's multi-tensor (foreach) form,
which Dynamo traces, so Inductor writes Adam's kernels too: torch's fused Adam kernel, which a
compiled update can only call as it is, gives each 65,536 elements of a tensor one thread block,
so a 256x256 weight's update runs on one multiprocessor. The compiled code is tied to the learner
it was traced on, so the warm-up runs the real learner, on its own state, and then puts every
tensor of that state back as it was (:func:`restored`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from hetrl.algos.base import Algorithm, Learner, TorchLearner
from hetrl.errors import CannotRunHere, HetrlError
from hetrl.protocol import Learn, Slot, implements

WARMUP_UPDATES = 3
_ALIGN = 16  # bytes: every input's slice of the staging buffer starts aligned for any dtype


class GraphedLearner(Learner):
    """A TorchLearner on a CUDA device whose updates replay captured graphs."""

    def __init__(self, algorithm: Algorithm, device: torch.device, seed: int, compiled: bool = False,
                 make: Callable[[Algorithm, torch.device, int], TorchLearner] | None = None) -> None:
        """``make`` builds the learner whose update is captured (and the throwaway one that warms
        up); the algorithm's own torch learner by default."""
        self.algorithm, self.device, self.seed = algorithm, device, seed
        self.make = make or (lambda algo, dev, s: algo.build_learner(dev, s))
        self.inner: TorchLearner = self.make(algorithm, device, seed)
        self._capturable(True)
        if compiled:
            # each learner compiles its own step (twice: before and after its optimizer has state),
            # and a process may build many (the profiler's, a benchmark's): beyond Dynamo's default
            # limit of recompiles per function it would quietly run the step uncompiled
            dynamo = torch._dynamo.config
            limit = "recompile_limit" if hasattr(dynamo, "recompile_limit") else "cache_size_limit"  # torch < 2.7
            setattr(dynamo, limit, max(getattr(dynamo, limit), 64))
        # each optimizer's form as the algorithm built it (by the optimizer's id): what a checkpoint records
        self._built_forms = {id(o): [(g.get("fused"), g.get("foreach")) for g in o.param_groups] for o in self.inner.optimizers()}
        if compiled:
            self.adam_form(fused=False, foreach=True)  # traced, so Inductor writes Adam's kernels (module docstring)
        self._step, self._periodic = self.inner.step, self.inner.periodic
        self.narrow_pass: Any = None  # the compiled update's graph pass (it counts its rewrites)
        if compiled:
            from hetrl.primitives.narrow_products import BiasOutsideNarrowProducts  # imports Inductor: only here

            self.narrow_pass = BiasOutsideNarrowProducts()
            options = {"post_grad_custom_pre_pass": self.narrow_pass}
            self._step = torch.compile(self.inner.step, dynamic=False, options=options)
            self._periodic = torch.compile(self.inner.periodic, dynamic=False, options=options)
        self.compiled = compiled
        self._graphs: tuple[torch.cuda.CUDAGraph, torch.cuda.CUDAGraph] | None = None
        self._input_keys: set[str] = set()
        self._static: dict[str, torch.Tensor] = {}  # the graphs' inputs: the batch's and the random draws
        self._out: dict[str, torch.Tensor] = {}
        self._periodic_out: dict[str, torch.Tensor] = {}  # the actor's loss, where periodic steps an actor

    @property
    def policy_network(self) -> torch.nn.Module:
        return self.inner.policy_network

    @property
    def updates(self) -> int:  # type: ignore[override]
        return self.inner.updates

    def update(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        if self._graphs is None:
            self._capture(batch)
        else:
            self._fill(batch)
        step, periodic = self._graphs  # type: ignore[misc]
        step.replay()
        self.inner.updates += 1
        out = {k: v.clone() for k, v in self._out.items()}
        if self.inner.periodic_due():
            periodic.replay()
            out.update({k: v.clone() for k, v in self._periodic_out.items()})
        return out

    def state_dict(self) -> dict[str, Any]:
        state = self.inner.state_dict()
        # torch's format, with the forms the algorithm built: a learner without graphs loads it as its own.
        # A learner's checkpoint keeps each optimizer under its attribute's name (DQNCheckpoint and the others)
        for key, value in state.items():
            if isinstance(value, dict) and "param_groups" in value:
                forms = self._built_forms.get(id(getattr(self.inner, key, None)), [])
                for group, (fused, foreach) in zip(value["param_groups"], forms):
                    group["fused"], group["foreach"] = fused, foreach
                for group in value["param_groups"]:
                    group["capturable"] = False
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)  # takes the saved groups' settings, so they are set again
        self._capturable(True)
        if self.compiled:
            self.adam_form(fused=False, foreach=True)
        self._graphs = None  # the loaded optimizer state is in new tensors: capture again

    # -----------------------------------------------------------------------------------------

    def _capturable(self, on: bool) -> None:
        for optimizer in self.inner.optimizers():
            for group in optimizer.param_groups:
                group["capturable"] = on

    def adam_form(self, fused: bool, foreach: bool) -> None:
        """Run every Adam of the learner in torch's fused kernel or its foreach form (set before the
        first update: the graphs capture the form they find)."""
        for optimizer in self.inner.optimizers():
            for group in optimizer.param_groups:
                group["fused"], group["foreach"] = fused, foreach

    def _fill(self, batch: dict[str, Any]) -> None:
        """Copy ``batch`` and this update's random draws into the static inputs."""
        host = {k: v for k, v in batch.items() if not torch.is_tensor(v)}
        if host:
            self._staged.synchronize()  # the last copy out of the staging buffer has finished
            for key, value in host.items():
                self._staging_views[key][...] = value
            self._device_buffer.copy_(self._pinned, non_blocking=True)
            self._staged.record()
        for key, value in batch.items():
            if torch.is_tensor(value):
                self._static[key].copy_(value)
        for key, value in self.inner.draw_inputs(self._static).items():
            self._static[key].copy_(value)

    def _layout(self, batch: dict[str, Any], warm: TorchLearner) -> None:
        """Static inputs: views of one device buffer, and their twins in one pinned host buffer of
        the same layout (so one copy moves them all). The random inputs' shapes come from a draw of
        the throwaway ``warm`` learner, so the real learner's generator is not advanced."""
        inputs = {k: torch.as_tensor(v, device=self.device) for k, v in batch.items()}
        inputs.update(warm.draw_inputs(inputs))
        self._pinned, staging = pack_like(inputs, pin_memory=True)
        self._staging_views = {k: v.numpy() for k, v in staging.items()}
        self._device_buffer, self._static = pack_like(inputs, device=self.device)
        self._staged = torch.cuda.Event()  # recorded after each copy out of the staging buffer
        self._input_keys = set(batch)

    def _warm_compiled(self, side: torch.cuda.Stream, main: torch.cuda.Stream) -> None:
        """Compile (and warm) the real learner's step on ``side``, then undo what the warm-up changed.
        A compilation that fails (no C compiler, a Triton or Inductor error: RuntimeErrors all) is a
        :class:`CannotRunHere` that names the fix."""
        with restored(self.inner):  # its copies of the state are taken, and put back, on the main stream
            side.wait_stream(main)
            try:
                with torch.cuda.stream(side):
                    for _ in range(WARMUP_UPDATES):
                        try:  # both compile at their first calls
                            self._step(self._static)
                            self._periodic(self._static)
                        except RuntimeError as exc:
                            reason = (str(exc).strip().splitlines() or [""])[0][:300]
                            raise CannotRunHere(f"torch.compile could not compile the {self.algorithm.name} update "
                                                f"({type(exc).__name__}: {reason}); use the cudagraph learner (backend "
                                                "cudagraph for learn in a plan.json)") from exc
            finally:
                main.wait_stream(side)  # before the state is put back, also after a failure

    def _capture(self, batch: dict[str, Any]) -> None:
        warm = self.make(self.algorithm, self.device, self.seed)
        if set(batch) != self._input_keys:
            self._layout(batch, warm)
        self._fill(batch)
        side, main = torch.cuda.Stream(self.device), torch.cuda.current_stream(self.device)
        if self.compiled:
            self._warm_compiled(side, main)
        else:
            side.wait_stream(main)
            with torch.cuda.stream(side):
                for _ in range(WARMUP_UPDATES):
                    warm.step(self._static)
                    warm.periodic(self._static)
            main.wait_stream(side)
            for mine, theirs in zip(self.inner.optimizers(), warm.optimizers()):
                for param, twin in zip(_params(mine), _params(theirs)):
                    if not mine.state[param]:
                        mine.state[param] = {k: torch.zeros_like(v) for k, v in theirs.state[twin].items()}
        del warm
        torch.cuda.synchronize(self.device)
        step, periodic = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        try:
            # thread_local: work of other threads (a local executor's weight publisher) is not captured
            with torch.cuda.graph(step, capture_error_mode="thread_local"):
                self._out = self._step(self._static)
            with torch.cuda.graph(periodic, pool=step.pool(), capture_error_mode="thread_local"):
                self._periodic_out = self._periodic(self._static) or {}
        except RuntimeError as exc:
            raise HetrlError(f"the {self.algorithm.name} update could not be captured as a CUDA graph ({exc}); "
                             "use the torch learner (backend torch for learn)") from exc
        self._graphs = (step, periodic)


def state_tensors(learner: TorchLearner) -> list[torch.Tensor]:
    """Every tensor of ``learner``'s state, as the objects it holds (writing into them changes the
    learner): its networks' parameters and buffers, tensors it holds itself (SAC's temperature) and
    its optimizers' state."""
    found: dict[int, torch.Tensor] = {}
    for value in vars(learner).values():
        if isinstance(value, torch.nn.Module):
            found.update((id(t), t) for t in [*value.parameters(), *value.buffers()])
        elif torch.is_tensor(value):
            found[id(value)] = value
    for optimizer in learner.optimizers():
        for state in optimizer.state.values():
            found.update((id(t), t) for t in state.values() if torch.is_tensor(t))
    return list(found.values())


@contextmanager
def restored(learner: TorchLearner) -> Iterator[None]:
    """Run the block, then put ``learner``'s state back in place: tensors that existed before get
    their values back, optimizer state made in the block is zeroed (what a first Adam step starts
    from). The objects stay the same, so code compiled or captured on them stays valid."""
    before = [(t, t.detach().clone()) for t in state_tensors(learner)]
    known = {id(t) for t, _ in before}
    try:
        yield
    finally:
        with torch.no_grad():
            for tensor, value in before:
                tensor.copy_(value)
            for tensor in state_tensors(learner):
                if id(tensor) not in known:
                    tensor.zero_()


def pack_like(like: dict[str, torch.Tensor], **empty: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """One uint8 buffer (``torch.empty`` options ``empty``: a device, pinned memory) holding a tensor
    of each of ``like``'s shapes and dtypes, each starting _ALIGN-aligned; the buffer and those views.
    The layout depends on ``like`` alone, so two buffers packed alike copy into each other whole."""
    spans, total = {}, 0
    for key, tensor in like.items():
        nbytes = tensor.numel() * tensor.element_size()
        spans[key] = (total, nbytes)
        total += -(-nbytes // _ALIGN) * _ALIGN
    buffer = torch.empty(total, dtype=torch.uint8, **empty)
    views = {k: buffer[start:start + n].view(like[k].dtype).view(like[k].shape) for k, (start, n) in spans.items()}
    return buffer, views


def _params(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [p for group in optimizer.param_groups for p in group["params"]]


@implements(Learn="learn")
class LearnCudagraph(Learn):
    """Learn on a CUDA device by replaying the update as CUDA graphs (one launch instead of ~100)."""

    backend = "cudagraph"
    device_types = ("cuda",)
    compiled = False  # whether the graphs replay torch.compile's update (Learn/cudagraph-compiled)
    input_kind = "host"  # the replay's host batch goes into the graphs' inputs in one copy

    @classmethod
    def unsupported(cls, algorithm: Any) -> str | None:
        if getattr(algorithm, "early_exits", False):
            # the staged schedule switches the branches' losses on at an update count, which a
            # captured graph cannot follow; the joint schedule would capture, but is not yet checked
            # against Learn/torch update by update (tests/test_cuda.py)
            return (f"the cudagraph learner does not run {algorithm.name}'s branched learner yet; use the torch "
                    "learner (backend torch for learn in a plan.json)")
        if getattr(algorithm, "distils", False):
            # the teacher's forward would be captured with the update; not yet checked against Learn/torch on a GPU
            return ("the cudagraph learner does not distil from a teacher yet; use the torch learner (backend torch for "
                    "learn in a plan.json)")
        if getattr(algorithm.config, "use_sde", False):
            # one gSDE matrix per update, shared by two inputs of the graph: not yet checked against
            # Learn/torch update by update on a GPU (tests/test_cuda.py)
            return ("the cudagraph learner does not run SAC with gSDE (use_sde) yet; use the torch learner (backend "
                    "torch for learn in a plan.json)")
        return None

    @classmethod
    def build(cls, slot: Slot, algorithm: Any, seed: int, **_: Any) -> "LearnCudagraph":
        return cls(algorithm, slot.device, seed)

    def __init__(self, algorithm: Algorithm, device: str | torch.device, seed: int) -> None:
        self.device = torch.device(device)
        if self.device.type != "cuda":
            raise HetrlError(f"the {self.backend} learner runs on CUDA devices, not on {device}; use the torch learner there")
        reason = self.unsupported(algorithm)
        if reason:
            raise HetrlError(reason)
        self.learner = GraphedLearner(algorithm, self.device, seed, compiled=self.compiled, make=self.make_learner)

    @staticmethod
    def make_learner(algorithm: Algorithm, device: torch.device, seed: int) -> TorchLearner:
        """The learner whose update the graphs capture (Learn/triton gives its own)."""
        return algorithm.build_learner(device, seed)

    def learn(self, **batch: Any) -> dict[str, torch.Tensor]:
        return self.learner.update(batch)
