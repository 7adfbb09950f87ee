#!/usr/bin/env python3
"""``edgepath serve`` with a canned decision plane: the transport's floor (``cpu_per_call.py --floor``, issue 16).

Usage::

    .venv/bin/python loadtest/canned_plane.py serve [any ``edgepath serve`` argument ...]

Everything around the plane runs as served: admission, the call observer (request id, call metrics), the request's
decoding and validation, the caller's authentication and rate-limit token, the reply's encoding (its shared
sections' bytes kept per object, as served), the admission monitor, the trainer. What is canned is
``DecisionPlane.recommend``, the decision itself (the bandit, the decision record and its write, the engine adapters,
the reply's construction): a device's first Recommend is decided by the plane, and its later ones get that same
``Recommendation`` object back at once. The server's CPU per call then says what the service costs when its
decisions cost nothing, against the bench's echo (which has no request id, metrics, authentication, rate limit or
validation): the part of the service's call that no work in the plane can remove.

A measurement device, never a way to serve: every reply repeats one decision id per device.
"""

from __future__ import annotations

import sys
from typing import Any

from edgepath import plane


def can_the_plane() -> None:
    """Make ``DecisionPlane.recommend`` answer each device's later calls with its first reply (module docstring)."""
    decide = plane.DecisionPlane.recommend
    first: dict[str, Any] = {}

    async def recommend(self: plane.DecisionPlane, principal: Any, request: Any) -> Any:
        reply = first.get(request.device_id)
        if reply is None:
            reply = first[request.device_id] = await decide(self, principal, request)
        return reply

    plane.DecisionPlane.recommend = recommend  # type: ignore[method-assign]


if __name__ == "__main__":
    from edgepath.cli import main

    can_the_plane()
    sys.argv[0] = "edgepath"
    sys.exit(main())
