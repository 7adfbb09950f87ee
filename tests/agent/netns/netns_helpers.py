"""What the netns tests share beyond their fixtures (tests/agent/netns/conftest.py): the veth namespace's names, a
new MPTCP connection from the testbed's device.

A module of its own name, not ``conftest`` (tests/test_suite_hygiene.py: which ``conftest`` a
``from conftest import …`` binds depends on the order tests run in).
"""

from __future__ import annotations

from dataclasses import dataclass

from edgepath_agent.meter import mptcp_socket
from edgepath_agent.testbed.netns import SERVER_ADDR, Testbed, call_in_netns


@dataclass(frozen=True)
class VethNamespace:
    """A throw-away network namespace holding a veth pair, both ends up (the ``veth_ns`` fixture).

    ``end`` has ``addr``/24 and a random name, so the host cannot have an interface by that name;
    ``peer`` (``end`` + ``p``) has no address; frames sent on one arrive on the other.
    """

    name: str
    end: str
    peer: str
    addr: str


def new_connection(tb: Testbed, port: int, timeout_s: float = 1.0) -> str | None:
    """Open a new MPTCP connection from the device; its initial subflow's local address, or None on failure."""

    def attempt() -> str | None:
        with mptcp_socket() as s:
            s.settimeout(timeout_s)
            try:
                s.connect((SERVER_ADDR, port))
            except OSError:
                return None
            return str(s.getsockname()[0])

    return call_in_netns(tb.device_ns, attempt)
