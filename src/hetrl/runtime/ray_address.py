"""Where a Ray cluster is said to be (``--ray-address``): the address's host and port, and a TCP
check that something listens there. It needs no Ray, so a run checks the address before it plans
(a profile can take minutes), and the ray executor checks it again before ``ray.init``."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

from hetrl.errors import HetrlError

POLL_S = 0.1  # while connecting: between tries of the address, and between checks for a stop


def host_port(address: str) -> tuple[str | None, int]:
    """(host, port) of a Ray address "host:port" or "ray://host:port" (Ray Client); (None, 0) for
    one Ray resolves itself ("auto", "local") or one that is not of this form."""
    text = address.strip()
    if "://" in text:
        scheme, _, text = text.partition("://")
        if scheme != "ray":
            return None, 0
    host, sep, port = text.rstrip("/").rpartition(":")
    host = host.strip("[]")  # [::1]:6379
    if not sep or not host or not port.isdigit():
        return None, 0
    return host, int(port)


def check_reachable(address: str, timeout_s: float, check_stop: Callable[[], None] = lambda: None) -> None:
    """Raise a one-line error unless a TCP connection to ``address`` opens within ``timeout_s``
    (connection refused or an unknown host: at once). ``check_stop`` runs between tries (it raises
    to stop waiting)."""
    host, port = host_port(address)
    if host is None:
        return  # an address Ray resolves itself ("auto", a file): ray.init's answer
    deadline = time.monotonic() + timeout_s
    last: OSError | None = None
    while time.monotonic() < deadline:
        check_stop()
        try:
            with socket.create_connection((host, port), timeout=min(1.0, max(0.05, deadline - time.monotonic()))):
                return
        except socket.gaierror as exc:
            raise HetrlError(f"cannot reach the Ray cluster at {address}: unknown host {host!r} ({exc.strerror}); "
                             f"check --ray-address") from None
        except ConnectionRefusedError:
            raise HetrlError(f"cannot reach the Ray cluster at {address}: connection refused (nothing listens on "
                             f"port {port} of {host}; start the head with `ray start --head --port={port}`, "
                             f"or check --ray-address)") from None
        except OSError as exc:  # a timeout, an unreachable network: try again until the deadline
            last = exc
            time.sleep(POLL_S)
    raise HetrlError(f"cannot reach the Ray cluster at {address}: no answer within {timeout_s:g} s "
                     f"({last}); check --ray-address and that the head's port is open to this machine")
