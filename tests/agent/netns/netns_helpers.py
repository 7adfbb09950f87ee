"""What the netns tests share beyond their fixtures (tests/agent/netns/conftest.py): the veth namespace's names.

A module of its own name, not ``conftest`` (tests/test_suite_hygiene.py: which ``conftest`` a
``from conftest import …`` binds depends on the order tests run in).
"""

from __future__ import annotations

from dataclasses import dataclass


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
