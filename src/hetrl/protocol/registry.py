"""Registry of primitive implementations, per backend.

An implementation is a class whose instances perform one or more primitives through named methods
(a replay storage performs ReplayAdd, ReplaySample and PriorityUpdate). Classes register with
:func:`implements`; the executor builds the ones a placement names, and the cross-check test
builds every registered implementation of a primitive and compares their outputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, TypeVar

from hetrl.errors import HetrlError, did_you_mean
from hetrl.protocol.contracts import PRIMITIVES

T = TypeVar("T", bound=type)


@dataclass(frozen=True)
class Implementation:
    primitive: str
    backend: str  # "numpy", "torch", "gymnasium", ...
    cls: type
    method: str  # the method of an instance that performs the primitive
    any_torch_device: bool  # True: runs on any torch device; False: host (CPU) only

    @property
    def key(self) -> str:
        return f"{self.primitive}/{self.backend}"

    # Optional capabilities a class declares; read here only, with the defaults of a plain class.
    def unsupported(self, algorithm: object) -> str | None:
        """Why this implementation cannot serve ``algorithm`` (None: it can). A class that covers only
        some algorithms or settings says so with a static ``unsupported(algorithm)`` of its own."""
        check = getattr(self.cls, "unsupported", None)
        return check(algorithm) if check is not None else None

    def host_threads(self, default: list[int]) -> list[int]:
        """Thread counts worth profiling on the host: a single-threaded kernel declares ``host_threads = (1,)``."""
        return list(getattr(self.cls, "host_threads", default))

    @property
    def device_types(self) -> tuple[str, ...] | None:
        """The torch device types it runs on: ("cpu",) for host-only ones; None (any) for torch ones,
        unless the class names its own ``device_types`` (a CUDA-only one: ("cuda",))."""
        if not self.any_torch_device:
            return ("cpu",)
        return tuple(getattr(self.cls, "device_types", ())) or None

    def runs_on(self, device: str) -> bool:
        """Whether it can run on ``device`` ("cpu", "cuda:0", ...)."""
        return self.device_types is None or device.split(":")[0] in self.device_types

    @property
    def takes_host_arrays(self) -> bool:
        """A Learn class that reads the replay's numpy batch as it is (``takes_host_arrays = True``)."""
        return bool(getattr(self.cls, "takes_host_arrays", False))


_REGISTRY: dict[str, dict[str, Implementation]] = {name: {} for name in PRIMITIVES}


def implements(backend: str, *, any_torch_device: bool = False, **methods: str) -> Callable[[T], T]:
    """Class decorator: ``@implements("numpy", ReplayAdd="add", ReplaySample="sample")``."""

    def register(cls: T) -> T:
        for primitive, method in methods.items():
            if primitive not in PRIMITIVES:
                raise ValueError(f"{cls.__name__}: unknown primitive {primitive!r}")
            if not callable(getattr(cls, method, None)):
                raise ValueError(f"{cls.__name__} has no method {method!r} for {primitive}")
            _REGISTRY[primitive][backend] = Implementation(primitive, backend, cls, method, any_torch_device)
        return cls

    return register


def implementations(primitive: str) -> dict[str, Implementation]:
    """All registered implementations of ``primitive``, by backend."""
    _load_library()
    return dict(_REGISTRY[primitive])


def get(primitive: str, backend: str) -> Implementation:
    impls = implementations(primitive)
    if backend not in impls:
        raise HetrlError(
            f"no {backend!r} implementation of {primitive}{did_you_mean(backend, impls)}; "
            f"available: {', '.join(sorted(impls))}"
        )
    return impls[backend]


def _load_library() -> None:
    # Importing the library registers every implementation it ships.
    import hetrl.primitives  # noqa: F401
