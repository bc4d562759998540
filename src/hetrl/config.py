"""Typed run configuration: a :class:`TrainConfig` holding the algorithm's own config.

Saved as ``config.json`` in every run directory and loadable again (``--config FILE``). Values can
be overridden by ``key=value`` strings (the CLI's ``--set``), parsed by the field's declared type.
A new run's config is layered: the algorithm's generic defaults < the tuned row for its env
(``hetrl.tuned``) < a ``--config`` file < ``--set`` / API keyword arguments. A run directory's own
config.json is read over the generic defaults only, so the table never changes a saved run.
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import os
import types
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hetrl.algos import AgentConfig, algorithm_class
from hetrl.envs.pixels import AtariOptions
from hetrl.envs.source import EnvSource, env_source
from hetrl.errors import MAX_SEED, HetrlError, did_you_mean, field_type_problems, field_types, int_problem, type_name
from hetrl.files import read_config_file, read_json, write_json
from hetrl.hardware import free_memory_bytes, gib, usable_cores
from hetrl.replay.footprint import is_frame_replay, replay_bytes
from hetrl.replay.frames import frames_unsupported
from hetrl.runtime.inference import INFERENCE as INFERENCE_WAYS
from hetrl.tuned import lookup as lookup_tuned

if TYPE_CHECKING:
    from hetrl.envs.spec import EnvSpec
    from hetrl.protocol import Slot


EXECUTORS = ("inline", "local", "ray", "auto")
INFERENCE = (*INFERENCE_WAYS, "auto")  # the local executor's ways, or the plan decides
RAY_SPREADS = ("spread", "pack")  # the ray executor's actors: over as many nodes as there are, or as Ray's default packs them
MAX_CHUNK_STEPS = 1_000_000  # ray_chunk_steps: steps per env in one chunk, at most
WANDB_MODES = ("online", "offline", "disabled")  # wandb.init's modes a run may ask for
CHECKPOINT_REPLAY = ("newest", "all", "none")  # which periodic checkpoints keep the replay (hetrl.run.rundir)
# A run's config.json written before a setting existed keeps the behaviour it was made with: these
# values, not the generic defaults, stand for the keys it lacks (every checkpoint kept, each with its replay).
SAVED_RUN_DEFAULTS: dict[str, Any] = {"keep_checkpoints": None, "checkpoint_replay": "all"}


@dataclass
class TrainConfig:
    algo: str
    env: str  # a Gymnasium id, "module:Id" (the module registers the id) or "module:factory" (hetrl.envs.source)
    env_kwargs: dict[str, Any] = field(default_factory=dict)  # to gym.make or the factory (JSON values)
    wrappers: tuple[str, ...] = ()  # "module:qualname" of each wrapper (env -> env), applied in order after the env is made
    steps: int = 100_000  # total env steps (default: the algorithm's default_steps); resume continues to it
    seed: int = 0
    device: str = "auto"  # the learner's torch device: auto, cpu, cuda, cuda:N, mps
    num_envs: int = 1  # envs stepped together by the inline loop or by each actor; 0: the plan decides (throughput only)
    threads: int = 0  # torch threads of a host learner; 0: the plan decides
    flush_denormals: bool = True  # host threads count denormal floats as zero (FTZ/DAZ, as TensorFlow and XLA on CPUs): Adam's decaying moments slow a learner otherwise (runtime/denormals.py)
    async_envs: bool = False  # step the envs as two halves, acting on one while the other steps (ale-vector and envpool EnvSteps; num_envs >= 2); off: it did not pay on a 2-core host (docs/results.md)
    plan: str = "auto"  # auto: planned from this machine's measured profile; rule: a fixed rule; or a plan.json
    executor: str = "inline"  # inline (one process), local (actor processes + learner), ray, or auto (the plan decides)
    actors: int = 0  # actor processes of the local/ray executors; 0: the plan decides (rule: one per core beside the learner)
    weight_sync_every: int = 1  # learner updates between weight pushes to the actors (local/ray; central inference: between syncs of its copy)
    inference: str = "auto"  # local executor: the policy in each actor (actor), batched in the learner's process (central), or auto (the plan decides)
    prefetch: bool = False  # local: sample the next batch in a thread during Learn (pays off when Learn leaves the CPU idle, e.g. on a GPU)
    ray_address: str | None = None  # an existing Ray cluster (ray executor); none: start a local one
    ray_spread: str = "spread"  # ray executor: actors over as many nodes as there are (spread), or as Ray's default packs them (pack)
    ray_chunk_steps: int = 0  # ray executor: steps of each env per chunk an actor returns through the object store; 0: from the limiter's lead
    force: bool = False  # start more than OVERSUBSCRIPTION x this machine's cores of actors or learner threads (refused otherwise)
    cpu_watts: float | None = None  # the host CPU's power in W where no RAPL meter measures it: energy figures count it, labelled the user's figure, not measured
    gpu_watts: float | None = None  # the power in W of each GPU a run uses that no NVML meter measures: energy figures count it, labelled the user's figure, not measured
    log_every: int = 1_000  # env steps between metric rows
    wandb_project: str | None = None  # also log the metric rows to this Weights & Biases project (the wandb extra)
    wandb_entity: str | None = None  # the W&B entity (user or team); none: wandb's default
    wandb_mode: str | None = None  # online, offline or disabled; none: the WANDB_MODE variable (else online)
    eval_every: int = 10_000  # env steps between evaluations (0: only at the end)
    eval_episodes: int = 20
    stop_at_return: float | None = None  # stop once an evaluation's mean return reaches this
    checkpoint_every: int = 50_000  # env steps between checkpoints (one is always written at the end)
    keep_checkpoints: int | None = 3  # periodic checkpoints kept, the newest ones (best.pt aside); 0 or none: keep all
    checkpoint_replay: str = "newest"  # the replay saved with: the newest checkpoint only, all of them, or none (no resume)
    agent: AgentConfig = field(default_factory=AgentConfig)
    atari: AtariOptions = field(default_factory=AtariOptions)  # the preprocessing of ALE ids (hetrl.envs.pixels)

    def validate(self) -> None:
        """Refuse, in one line naming every problem and its fix, a value no run can use; the agent's
        settings are the algorithm's to check (``make_algorithm``)."""
        problems = field_type_problems(self)
        if problems:  # every check below compares values of the right type
            raise HetrlError("invalid run config: " + "; ".join(problems))
        problems = [*self.atari.validate()]
        if seed := int_problem("seed", self.seed, 0, MAX_SEED):
            problems.append(seed)
        if self.stop_at_return is not None and not math.isfinite(self.stop_at_return):
            problems.append(f"stop_at_return must be a finite number, or none to run every step (got {self.stop_at_return})")
        if 0 < self.steps < self.num_envs:
            problems.append(f"num_envs ({self.num_envs}) must not exceed steps ({self.steps}): every env steps at least once "
                            f"per iteration; lower num_envs or raise steps")
        for name in ("steps", "log_every", "eval_episodes", "checkpoint_every"):
            if getattr(self, name) <= 0:
                problems.append(f"{name} must be > 0 (got {getattr(self, name)})")
        if self.weight_sync_every <= 0:
            problems.append(f"weight_sync_every must be > 0 (got {self.weight_sync_every})")
        if self.ray_spread not in RAY_SPREADS:
            problems.append(f"ray_spread {self.ray_spread!r} is unknown{did_you_mean(self.ray_spread, RAY_SPREADS)}; "
                            f"use one of {', '.join(RAY_SPREADS)}")
        if chunk := int_problem("ray_chunk_steps", self.ray_chunk_steps, 0, MAX_CHUNK_STEPS):
            problems.append(f"{chunk} (0: the executor chooses)")
        for name in ("eval_every", "threads", "actors", "num_envs"):
            if getattr(self, name) < 0:
                problems.append(f"{name} must be >= 0 (got {getattr(self, name)})")
        if self.keep_checkpoints is not None and self.keep_checkpoints < 0:
            problems.append(f"keep_checkpoints must be >= 0 (got {self.keep_checkpoints}; 0 or none keeps every checkpoint)")
        if self.cpu_watts is not None and not (math.isfinite(self.cpu_watts) and 0 < self.cpu_watts <= MAX_CPU_WATTS):
            problems.append(f"cpu_watts must be the host CPU's power in watts, above 0 and at most {MAX_CPU_WATTS:,} "
                            f"(got {self.cpu_watts}); e.g. its TDP, or none where a RAPL meter measures it")
        if self.gpu_watts is not None and not (math.isfinite(self.gpu_watts) and 0 < self.gpu_watts <= MAX_GPU_WATTS):
            problems.append(f"gpu_watts must be a GPU's power in watts, above 0 and at most {MAX_GPU_WATTS:,} "
                            f"(got {self.gpu_watts}); e.g. its TDP, or none where an NVML meter measures it")
        if self.wandb_project is not None and not self.wandb_project.strip():
            problems.append("wandb_project must name a W&B project (or be none)")
        if self.wandb_mode is not None and self.wandb_mode not in WANDB_MODES:
            problems.append(f"wandb_mode {self.wandb_mode!r} is unknown{did_you_mean(self.wandb_mode, WANDB_MODES)}; "
                            f"use one of {', '.join(WANDB_MODES)} (or none: the WANDB_MODE variable)")
        if self.checkpoint_replay not in CHECKPOINT_REPLAY:
            problems.append(f"checkpoint_replay {self.checkpoint_replay!r} is unknown{did_you_mean(self.checkpoint_replay, CHECKPOINT_REPLAY)}; "
                            f"use one of {', '.join(CHECKPOINT_REPLAY)}")
        if self.executor not in EXECUTORS:
            problems.append(f"executor {self.executor!r} is unknown{did_you_mean(self.executor, EXECUTORS)}; use one of {', '.join(EXECUTORS)}")
        if self.inference not in INFERENCE:
            problems.append(f"inference {self.inference!r} is unknown{did_you_mean(self.inference, INFERENCE)}; use one of {', '.join(INFERENCE)}")
        elif self.inference == "central" and self.executor not in ("local", "auto"):
            problems.append(f"central inference runs with the local executor, not {self.executor}; set executor=local or inference=auto")
        if problems:
            raise HetrlError("invalid run config: " + "; ".join(problems))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def env_source(self) -> EnvSource:
        """Where this run's envs come from, found again by the names config.json keeps."""
        return env_source(self.env, self.env_kwargs, self.wrappers)


MAX_CPU_WATTS = 10_000  # cpu_watts above this is a typo (milliwatts?), not a CPU
MAX_GPU_WATTS = 10_000  # gpu_watts above this is a typo (milliwatts?), not a GPU
OVERSUBSCRIPTION = 4  # actors, or learner threads, per core of this machine beyond which a run needs force=true


def check_machine(config: TrainConfig, executor: str | None = None, actors: int | None = None, threads: int | None = None,
                  cores: int | None = None) -> None:
    """Refuse actor processes or learner threads far beyond this machine's cores (more than
    OVERSUBSCRIPTION per core) unless ``config.force``: beyond the cores they only take turns, and
    hundreds of processes can exhaust the memory. ``executor``, ``actors``, ``threads``: the run's
    as planned (default: as configured). Actors on a Ray cluster (``ray_address``) are the
    cluster's to hold, so they are not counted here."""
    if config.force:
        return
    cores = cores or usable_cores()
    limit = OVERSUBSCRIPTION * cores
    executor = executor or config.executor
    actors = config.actors if actors is None else actors
    threads = config.threads if threads is None else threads
    here = f"this machine's {cores} core{'s' if cores != 1 else ''}"
    if executor != "inline" and not (executor == "ray" and config.ray_address) and actors > limit:
        raise HetrlError(f"actors={actors} is more than {OVERSUBSCRIPTION}x {here}: each actor is a process stepping its own "
                         f"envs, so beyond the cores they only take turns; use --actors {limit} or fewer (0: the plan "
                         f"decides), or --force (force=true) to start them anyway")
    if threads > limit:
        raise HetrlError(f"threads={threads} is more than {OVERSUBSCRIPTION}x {here}; use --set threads={cores} or fewer "
                         f"(0: the plan decides), or --force (force=true) to use them anyway")


def check_replay_memory(config: TrainConfig, spec: EnvSpec, replay: Slot, free: int | None = None) -> None:
    """Refuse, unless ``config.force``, a replay that cannot fit where the plan puts it (``replay``:
    its slot): the replay is allocated whole at the start, so a buffer_size far beyond the memory
    would fail there, or later, when the kernel kills the run. The need is the replay's storage
    (replay/footprint.py: a frame replay stores each frame once), set against the memory free now
    on that device (``free``: measured when None; unknown: not checked). Where a plain replay holds
    stacked frames that the frame replay could store, the fix names it too."""
    if config.force:
        return
    need = replay_need(config, spec, replay.backend)
    free = free_memory_bytes(replay.device) if free is None else free
    if free is not None and need > free:
        per_transition = need / config.agent.buffer_size
        frames = (f", or the frame replay (placement.replay backend frames-{replay.backend}: "
                  f"{gib(replay_need(config, spec, 'frames-' + replay.backend))} for these transitions)"
                  if not is_frame_replay(replay.backend) and frames_unsupported(spec, "frames-numpy") is None else "")
        raise HetrlError(f"buffer_size={config.agent.buffer_size:,} needs at least {gib(need)} of replay on {replay.device} "
                         f"({per_transition:,.0f} bytes per transition, allocated at the start), more than the {gib(free)} free "
                         f"there; set buffer_size={max(1, int(free // per_transition // 2)):,} or less{frames}, or --force "
                         f"(force=true) to try anyway")


def replay_need(config: TrainConfig, spec: EnvSpec, backend: str) -> int:
    """Bytes the run's replay of ``backend`` allocates for its buffer_size (replay/footprint.py)."""
    return replay_bytes(config.agent.buffer_size, tuple(spec.obs_shape), spec.obs_dtype, tuple(spec.action_shape),
                        spec.action_dtype, config.agent.prioritized, is_frame_replay(backend))


def default_config(algo: str, env: str, tuned: bool = True) -> TrainConfig:
    """The algorithm's generic defaults, then (``tuned``) the tuned row for ``env`` where there is one."""
    cls = algorithm_class(algo)
    config = TrainConfig(algo=cls.name, env=env, steps=cls.default_steps, agent=cls.Config())
    if tuned:
        for key, value in lookup_tuned(cls.name, env)[0].items():
            setattr(config.agent if key in _field_types(config.agent) else config, key, value)
    return config


def defaults_origin(algo: str, env: str, base: str | Path | dict[str, Any] | TrainConfig | None = None,
                    overrides: list[str] | tuple[str, ...] = ()) -> str:
    """Where a new run's settings come from, in one line: the tuned row or the generic defaults,
    then a --config file and the hyperparameters set explicitly (run plumbing such as seed or
    device is not listed)."""
    cls = algorithm_class(algo)
    text = lookup_tuned(cls.name, env)[1]
    if base is not None:
        text += f"; then --config {base}" if isinstance(base, (str, Path)) else "; then a base config"
    hyper = {f.name for f in fields(cls.Config)} | {"steps"}
    keys = [k for k in dict.fromkeys(item.partition("=")[0].strip().removeprefix("agent.") for item in overrides) if k in hyper]
    if keys:
        text += f"; set explicitly: {', '.join(keys)}"
    return text


def make_config(algo: str, env: str, base: str | Path | dict[str, Any] | TrainConfig | None = None,
                overrides: list[str] | tuple[str, ...] = ()) -> TrainConfig:
    """The config of a new run of ``algo`` on ``env``: generic defaults, the tuned row for ``env``,
    ``base`` (a YAML or JSON file, a dict or a TrainConfig; a file or dict may hold only some
    settings, with or without algo and env), then ``key=value`` overrides. ``base`` itself is not
    changed."""
    if base is None:
        config = default_config(algo, env)
    else:
        if isinstance(base, TrainConfig):
            data = base.to_dict()
        elif isinstance(base, dict):
            data = {**base, "algo": algo}
        elif not isinstance(base, (str, os.PathLike)):
            raise HetrlError(f"config must be a YAML or JSON file, a dict of settings or a TrainConfig, not "
                             f"{type(base).__name__} {base!r}")
        else:  # a file: a whole config (a run's config.json) or only the settings it changes
            data = read_config_file(base, "config file", "fix it or pass another --config")
            if not isinstance(data, dict):
                raise HetrlError(f"config file {base} must hold a mapping of settings, not {type(data).__name__}")
            data = {"algo": algo, **data}
        if algorithm_class(data["algo"]).name != algorithm_class(algo).name:
            raise HetrlError(f"the config is for {data['algo']}, not {algo}; pass a {algo} config or drop --config")
        config = config_from_dict({**data, "algo": algo, "env": env}, str(base) if isinstance(base, (str, Path)) else "config", tuned=True)
    return apply_overrides(config, list(overrides))


# --- overrides ---------------------------------------------------------------------------------
_TRUE, _FALSE = {"true", "1", "yes", "on"}, {"false", "0", "no", "off"}
_SUFFIXES = {"k": 1_000, "m": 1_000_000, "g": 1_000_000_000}

# What other libraries (Stable-Baselines3, CleanRL, rl-baselines3-zoo) call hetrl's settings:
# an unknown key that is one of these is answered with hetrl's name.
ALIASES = {
    "learning_rate": "lr", "gradient_steps": "replay_ratio (updates per env step)", "train_freq": "train_every",
    "target_update_interval": "target_update_every (counted in updates, not env steps)",
    "exploration_final_eps": "eps_end", "exploration_initial_eps": "eps_start",
    "exploration_fraction": "eps_decay_steps (env steps, not a fraction)", "net_arch": "hidden",
    "n_timesteps": "steps", "total_timesteps": "steps", "n_envs": "num_envs", "num_actors": "actors",
    "target_policy_noise": "target_noise", "policy_noise": "target_noise", "noise_clip": "target_noise_clip",
    "policy_frequency": "policy_delay", "buffer_len": "buffer_size", "start_e": "eps_start", "end_e": "eps_end",
}


def suggestion(key: str, known: list[str]) -> str:
    """' (did you mean X?)', or what hetrl calls another library's setting."""
    if key in ALIASES:
        return f" (hetrl calls it {ALIASES[key]})"
    return did_you_mean(key, known)


def parse_count(text: str) -> int:
    """A whole number as people write one: 100000, 100_000, 1e5, 100k, 1M."""
    clean = text.strip().replace("_", "").replace(",", "")
    scale = _SUFFIXES.get(clean[-1:].lower(), 1) if clean else 1
    if scale != 1:
        clean = clean[:-1]
    number = float(clean) * scale
    if not number.is_integer():
        raise ValueError(f"{text!r} is not a whole number")
    return int(number)


def _parse(text: str, kind: Any, key: str, where: str = "") -> Any:
    """``text`` as a value of the annotated type ``kind`` (int, float, bool, str, X | None, tuple[int, ...]).
    ``where``: the file or call the text came from (none: ``--set``), named by the error."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        if text.lower() in ("none", "null"):
            return None
        return _parse(text, next(a for a in args if a is not type(None)), key, where)
    try:
        if kind is bool:
            if text.lower() in _TRUE | _FALSE:
                return text.lower() in _TRUE
            raise ValueError
        if kind is int:
            return parse_count(text)
        if kind is float:
            return float(text)
        if kind is str:
            return text
        if origin is tuple:
            inner = text.strip("[]() ")
            parts = (inner if args[0] is str else inner.replace("x", ",")).split(",")  # 64x64 for integers only
            return tuple(args[0](p.strip().strip("'\"")) for p in parts if p.strip())
        if origin is dict:
            value = json.loads(text)
            if isinstance(value, dict):
                return value
    except ValueError:  # json's JSONDecodeError included
        pass
    shown = text if text.isprintable() else repr(text)  # a control character would break the one line
    raise HetrlError(f"{f'{where}: {key}' if where else f'--set {key}'}={shown}: expected {type_name(kind)}")


def _field_types(obj: Any) -> dict[str, Any]:
    return field_types(type(obj))


def apply_overrides(config: TrainConfig, overrides: list[str]) -> TrainConfig:
    """Apply ``key=value`` strings. A key names a run field (steps, seed...) or an agent field (lr,
    hidden...); ``agent.lr`` is accepted too."""
    run_types = {k: v for k, v in _field_types(config).items() if k not in ("agent", "atari")}
    agent_types = _field_types(config.agent)
    atari_types = _field_types(config.atari)
    for item in overrides:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise HetrlError(f"--set expects key=value, got {item!r} (for example --set lr=0.001)")
        if key.startswith("agent."):
            key = key[len("agent."):]
            target, types_ = config.agent, agent_types
        elif key.startswith("atari."):
            key = key[len("atari."):]
            target, types_ = config.atari, atari_types
        elif key in agent_types:
            target, types_ = config.agent, agent_types
        elif key in run_types:
            target, types_ = config, run_types
        elif key in atari_types:
            target, types_ = config.atari, atari_types
        else:
            known = sorted(agent_types) + sorted(run_types) + sorted(atari_types)
            raise HetrlError(f"--set {key}: no such setting for {config.algo}{suggestion(key, known)}; known: {', '.join(known)}")
        if key not in types_:
            raise HetrlError(f"--set {item.partition('=')[0].strip()}: no such setting{did_you_mean(key, types_)}; known: {', '.join(sorted(types_))}")
        if key in ("algo", "env"):
            raise HetrlError(f"--set {key}: the {key} is given as a positional argument, not with --set")
        setattr(target, key, _parse(value.strip(), types_[key], key))
    return config


def apply_values(config: TrainConfig, values: dict[str, Any], where: str = "hetrl.train") -> TrainConfig:
    """Apply typed values by setting name (the Python API's keyword arguments): each is checked
    against the setting's annotated type as a config file's would be, never turned into text."""
    run_types = {k: v for k, v in _field_types(config).items() if k not in ("agent", "atari", "algo", "env")}
    agent_types = _field_types(config.agent)
    atari_types = _field_types(config.atari)
    for key, value in values.items():
        if key == "network" and callable(value):  # a Q-network factory: kept by its import name
            from hetrl.algos.dqn import factory_name

            value = factory_name(value)
        if key == "atari" and isinstance(value, AtariOptions):
            config.atari = dataclasses.replace(value)
        elif key in agent_types:
            _from_mapping(config.agent, {key: value}, where)
        elif key in run_types:
            _from_mapping(config, {key: value}, where)
        elif key in atari_types:
            _from_mapping(config.atari, {key: value}, where)
        else:
            known = sorted(agent_types) + sorted(run_types) + sorted(atari_types)
            raise HetrlError(f"{where}: no setting {key!r} for {config.algo}{suggestion(key, known)}; known: {', '.join(known)}")
    return config


# --- files -------------------------------------------------------------------------------------
def _from_mapping(obj: Any, data: dict[str, Any], where: str) -> None:
    """Set ``obj``'s fields from ``data`` (a config file's, a dict's or the API's values), each
    checked against its annotated type: a number's text ("20k") is read as ``--set`` reads it, a
    list for a tuple; a null only where the setting takes none."""
    kinds = _field_types(obj)
    for key, value in data.items():
        if key not in kinds:
            raise HetrlError(f"{where}: unknown setting {key!r}{suggestion(key, list(kinds))}")
        if key not in ("agent", "atari"):
            setattr(obj, key, _typed(value, kinds[key], key, where))


def _typed(value: Any, kind: Any, key: str, where: str) -> Any:
    """``value`` as a value of the annotated type ``kind`` (see :func:`_from_mapping`)."""
    optional = typing.get_origin(kind) in (typing.Union, types.UnionType)
    base = next(a for a in typing.get_args(kind) if a is not type(None)) if optional else kind
    if value is None:
        if optional:
            return None
        raise HetrlError(f"{where}: {key} is null; expected {type_name(kind)} (leave {key} out for its default)")
    if isinstance(value, str):
        return _parse(value, kind, key, where)
    wrong = HetrlError(f"{where}: {key}={value!r}: expected {type_name(kind)}")
    if typing.get_origin(base) is tuple:
        if not isinstance(value, (list, tuple)):
            raise wrong
        return tuple(_typed(v, typing.get_args(base)[0], key, where) for v in value)
    if typing.get_origin(base) is dict:
        if not isinstance(value, dict):
            raise wrong
        return dict(value)
    if base is bool and isinstance(value, (bool, numbers.Integral)) and value in (0, 1):
        return bool(value)
    if base is int and isinstance(value, numbers.Real) and not isinstance(value, bool):
        if not math.isfinite(value) or value != int(value):
            raise wrong
        return int(value)
    if base in (float, str) and isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value) if base is float else str(value)  # a YAML number for a text setting (ent_coef: 0.1)
    raise wrong


def config_from_dict(data: dict[str, Any], where: str = "config", tuned: bool = False) -> TrainConfig:
    """``data`` over the generic defaults, or over the tuned ones for its env (``tuned``: a new run)."""
    if not isinstance(data, dict) or "algo" not in data or "env" not in data:
        raise HetrlError(f"{where}: a config needs at least 'algo' and 'env' keys")
    if not isinstance(data["env"], str):
        raise HetrlError(f"{where}: env must be a Gymnasium id or 'module:name', not {type(data['env']).__name__} {data['env']!r}")
    config = default_config(data["algo"], data["env"], tuned)
    agent = data.get("agent", {})
    if not isinstance(agent, dict):
        raise HetrlError(f"{where}: 'agent' must be a mapping of {config.algo} settings")
    _from_mapping(config, {k: v for k, v in data.items() if k not in ("algo", "env")}, where)
    _from_mapping(config.agent, agent, f"{where} ({config.algo}'s agent settings)")
    atari = data.get("atari", {})
    if not isinstance(atari, dict):
        raise HetrlError(f"{where}: 'atari' must be a mapping of Atari settings")
    _from_mapping(config.atari, atari, f"{where} (atari)")
    return config


def load_config(path: str | Path, invalid_hint: str = "fix it or pass another --config", tuned: bool = False,
                saved_run: bool = False) -> TrainConfig:
    """The config in ``path``; ``saved_run``: a run directory's own config.json, whose missing keys
    take :data:`SAVED_RUN_DEFAULTS` (how the run was made) where there is one."""
    data = read_json(path, "config file", invalid_hint=invalid_hint)
    config = config_from_dict(data, str(path), tuned)
    if saved_run:
        for key, value in SAVED_RUN_DEFAULTS.items():
            if key not in data:
                setattr(config, key, value)
    return config


def save_config(config: TrainConfig, path: Path) -> None:
    write_json(path, config.to_dict())


# The settings a checkpoint's networks and replay are shaped by (with the agent's and the Atari
# preprocessing's): where config.json and the checkpoint disagree on them, the state cannot load.
SHAPING = ("algo", "env", "env_kwargs", "wrappers", "num_envs")


def shaping_changes(saved: Any, config: TrainConfig) -> list[str]:
    """``key: <saved> -> <now>`` for each shaping setting (:data:`SHAPING`, the agent's, Atari's) of
    ``config`` that differs from ``saved``, the config a checkpoint holds."""
    if not isinstance(saved, dict):
        return []
    now = config.to_dict()
    pairs = [(key, saved.get(key), now[key]) for key in SHAPING]
    for group in ("agent", "atari") if saved.get("algo") == now["algo"] else ():  # another algorithm's: that says it
        old = saved.get(group) if isinstance(saved.get(group), dict) else {}
        pairs += [(key, old.get(key), value) for key, value in now[group].items() if key in old]
    shown = [(key, json.dumps(old, default=str), json.dumps(new, default=str)) for key, old, new in pairs]  # tuples as lists
    return [f"{key}: {old} -> {new}" for key, old, new in shown if old != new]


def checkpoint_misfit(path: str | Path, saved: Any, config: TrainConfig, config_file: str | Path,
                      exc: Exception) -> HetrlError:
    """The error for a checkpoint whose state does not load into what ``config`` (read from
    ``config_file``) builds: the settings that changed since it was written, or else the cause."""
    changes = shaping_changes(saved, config)
    cause = " ".join(str(exc).split())[:160] or type(exc).__name__
    if changes:
        return HetrlError(f"checkpoint {path} was written with other settings than {config_file} now has "
                          f"({'; '.join(changes)}), so its state does not load ({cause}); put the checkpoint's values "
                          f"back in {config_file}, or pass a checkpoint made with these settings")
    return HetrlError(f"checkpoint {path} does not load into the run {config_file} describes ({type(exc).__name__}: "
                      f"{cause}); pass a checkpoint of this run")
