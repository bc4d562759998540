"""The registry of primitive implementations: (primitive, backend) -> class.

A class registers with :func:`implements`; which methods perform which primitive is the
:class:`~hetrl.protocol.interfaces.Primitive` family's to say, and what a class can do (devices,
host threads, algorithms it serves, the input it takes) is declared on the class. The library of
implementations (``hetrl.primitives``) fills the registry when it is imported; lookups that need it
filled, and the one factory, live there, so this module imports nothing above the protocol.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, TypeVar

from hetrl.protocol.contracts import PRIMITIVES
from hetrl.protocol.interfaces import Primitive

T = TypeVar("T", bound=type)


@dataclass(frozen=True)
class Implementation:
    """One registered implementation of one primitive; capabilities are read from the class."""

    primitive: str
    backend: str  # "numpy", "torch", "gymnasium", ...
    cls: type[Primitive]
    method: str  # the method of an instance that performs the primitive

    @property
    def key(self) -> str:
        return f"{self.primitive}/{self.backend}"

    def unsupported(self, algorithm: Any) -> str | None:
        """Why this implementation cannot serve ``algorithm`` (None: it can): its own reasons, and for
        a Learn class, an arithmetic other than the run's ``precision`` setting (auto takes any)."""
        asked = getattr(getattr(algorithm, "config", None), "precision", "auto")
        mine = getattr(self.cls, "precision", None)
        if mine is not None and asked not in ("auto", mine):
            return (f"{self.key} computes in {mine} and the run asks for precision={asked}; set precision=auto to let the "
                    f"plan choose, or precision={mine} for this learner")
        return self.cls.unsupported(algorithm)

    def host_threads(self, default: list[int]) -> list[int]:
        """Thread counts worth profiling on the host."""
        return list(self.cls.host_threads) if self.cls.host_threads is not None else list(default)

    @property
    def device_types(self) -> tuple[str, ...] | None:
        """The torch device types it runs on; None: any torch device."""
        return self.cls.device_types

    def runs_on(self, device: str) -> bool:
        """Whether it can run on ``device`` ("cpu", "cuda:0", ...)."""
        return self.cls.runs_on(device)

    @property
    def takes_host_arrays(self) -> bool:
        """A Learn class that reads the replay's numpy batch as it is (no Transfer)."""
        return self.cls.input_kind == "host"


_REGISTRY: dict[str, dict[str, Implementation]] = {name: {} for name in PRIMITIVES}


def implements(**methods: str) -> Callable[[T], T]:
    """Class decorator registering a :class:`Primitive` subclass under its ``backend`` for the
    primitives its methods perform: ``@implements(ReplayAdd="add", ReplaySample="sample")``."""

    def register(cls: T) -> T:
        if not (isinstance(cls, type) and issubclass(cls, Primitive)) or not isinstance(cls.__dict__.get("backend"), str):
            raise ValueError(f"{cls.__name__}: an implementation subclasses Primitive and names its own backend")
        for primitive, method in methods.items():
            if primitive not in PRIMITIVES:
                raise ValueError(f"{cls.__name__}: unknown primitive {primitive!r}")
            if not callable(getattr(cls, method, None)):
                raise ValueError(f"{cls.__name__} has no method {method!r} for {primitive}")
            _REGISTRY[primitive][cls.backend] = Implementation(primitive, cls.backend, cls, method)
        return cls

    return register


def registered(primitive: str) -> dict[str, Implementation]:
    """What has registered for ``primitive`` so far, by backend (``hetrl.primitives.implementations``
    loads the library first)."""
    return dict(_REGISTRY[primitive])
