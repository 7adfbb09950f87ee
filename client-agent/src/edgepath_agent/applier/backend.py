"""Applier backends behind one ops table (the shape mptcpd gives its path-manager plugins).

An ops table maps an operation name to a callable taking the operation's keyword
arguments. Every backend offers the same operations:

======================  =============================================
op                      arguments
======================  =============================================
``endpoint_add``        ``endpoint``: :class:`Endpoint`
``endpoint_delete``     ``id``: int
``endpoint_set_backup`` ``id``: int, ``backup``: bool
``limits_set``          ``limits``: ``{"subflows": n, "add_addr_accepted": m}``
``route_add``           ``route``: :class:`Route` (main-table default route)
``route_delete``        ``route``: :class:`Route`
``sysctl_set``          ``key``: str, ``value``: str
======================  =============================================

plus ``read_state(sysctl_keys)``, ``read_addresses()`` and ``read_interfaces()``: the names of the network
interfaces that exist where the backend works. A rollback asks it after a restore step failed, to tell a step whose
interface was deleted meanwhile (skipped: :meth:`~edgepath_agent.applier.core.Applier.rollback`) from one that
failed; when it cannot read them, every failed step counts as failed.

* :class:`CommandBackend` runs ``ip``/``sysctl`` (iproute2), optionally inside a
  network namespace; it is the primary backend (it also reads the IPv6 default routes,
  :meth:`CommandBackend.read_ipv6_default_routes`, for the NetworkManager backend's start
  check). Every argv passes
  :func:`edgepath_agent.safety.check_argv` right before it is executed (a list for
  ``ip``/``sysctl`` only; never a shell string).
* :class:`DryRunBackend` prints the argv it would run and tracks the resulting state
  with :func:`~edgepath_agent.applier.state.simulate` (so plans, journal and
  rollback are exercised without privileges).

:class:`~edgepath_agent.applier.netlink.NetlinkBackend` (pyroute2; optional) offers the
same table over rtnetlink and the ``mptcp_pm`` generic-netlink family.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, Protocol, TextIO

from edgepath_agent import safety
from edgepath_agent.applier import commands
from edgepath_agent.applier.state import (
    NetState,
    Route,
    parse_addresses_json,
    parse_default_routes_json,
    parse_endpoints_json,
    parse_limits,
    parse_link_names_json,
    simulate,
)

log = logging.getLogger(__name__)

OPS = tuple(commands.BUILDERS)


class BackendError(RuntimeError):
    """A command failed; ``argv`` and ``stderr`` say which and why."""

    def __init__(self, argv: Sequence[str], returncode: int, stderr: str) -> None:
        super().__init__(f"{' '.join(argv)} exited {returncode}: {stderr.strip()}")
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr


class Backend(Protocol):
    """What the applier needs from a backend."""

    name: str

    @property
    def ops(self) -> dict[str, Callable[..., None]]: ...

    def read_state(self, sysctl_keys: Iterable[str]) -> NetState: ...

    def read_addresses(self) -> dict[str, list[str]]: ...

    def read_interfaces(self) -> set[str]: ...


Runner = Callable[[Sequence[str]], str]


def run_checked(argv: Sequence[str], timeout_s: float = 10.0) -> str:
    """Run ``argv`` and return stdout.

    Raises
    ------
    BackendError
        On a non-zero exit status (with the command's stderr).
    """
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s, check=False)
    if proc.returncode != 0:
        raise BackendError(argv, proc.returncode, proc.stderr)
    return proc.stdout


class CommandBackend:
    """iproute2 + sysctl commands, optionally in network namespace ``netns``."""

    name = "command"

    def __init__(self, netns: str | None = None, runner: Runner = run_checked) -> None:
        self.netns = netns
        self._run = runner
        self.executed: list[list[str]] = []

    def _exec(self, argv: list[str]) -> str:
        """Run ``argv`` (in ``netns``) through the runner.

        Raises
        ------
        edgepath_agent.safety.UnsafeDecision
            When ``argv`` is not a list for ``ip``/``sysctl`` (nothing is run).
        """
        full = safety.check_argv(commands.in_netns(argv, self.netns) if isinstance(argv, list) else argv)
        log.debug("run %s", " ".join(full))
        return self._run(full)

    @property
    def ops(self) -> dict[str, Callable[..., None]]:
        def make(op: str) -> Callable[..., None]:
            def call(**args: Any) -> None:
                argv = commands.argv_for(op, args)
                self._exec(argv)
                self.executed.append(argv)

            return call

        return {op: make(op) for op in OPS}

    def read_state(self, sysctl_keys: Iterable[str]) -> NetState:
        endpoints = parse_endpoints_json(self._exec(commands.endpoint_show()))
        limits = parse_limits(self._exec(commands.limits_show()))
        routes = parse_default_routes_json(self._exec(commands.routes_show_default()))
        sysctls = tuple(sorted((k, self._exec(commands.sysctl_get(k)).strip()) for k in sysctl_keys))
        return NetState(endpoints=endpoints, limits=limits, default_routes=routes, sysctls=sysctls)

    def read_addresses(self) -> dict[str, list[str]]:
        return parse_addresses_json(self._exec(commands.addresses_show()))

    def read_ipv6_default_routes(self) -> tuple[Route, ...]:
        """The IPv6 default routes of the main table, a multipath one as one route per next hop (the applier
        manages IPv4 routes only; the NetworkManager backend's start check reads these).

        Raises
        ------
        BackendError
            When ``ip`` fails (e.g. no such namespace).
        """
        return parse_default_routes_json(self._exec(commands.routes_show_default("-6")), nexthops=True)

    def read_interfaces(self) -> set[str]:
        """Names of the network interfaces in ``netns`` (``ip -j link show``).

        Raises
        ------
        BackendError
            When ``ip`` fails (e.g. no such namespace).
        """
        return parse_link_names_json(self._exec(commands.links_show()))


class DryRunBackend:
    """Prints what it would run; keeps a simulated state.

    Parameters
    ----------
    state
        Starting state (e.g. read from the machine by a :class:`CommandBackend`).
    addresses
        ``{ifname: [IPv4]}`` reported by :meth:`read_addresses`.
    out
        Where the commands are printed: ``"stdout"`` (default) = whatever :data:`sys.stdout` is when a
        command is printed (so ``contextlib.redirect_stdout``, pytest's ``capsys`` or a wrapper that
        replaces it later gets them), a stream = that stream, ``None`` = don't print.
    netns
        Namespace to show in the printed commands.

    :attr:`interfaces` (what :meth:`read_interfaces` reports) starts as the interfaces named in ``state`` and
    ``addresses``; remove one to stand for an interface deleted.
    """

    name = "dry-run"

    def __init__(
        self,
        state: NetState | None = None,
        addresses: dict[str, list[str]] | None = None,
        out: TextIO | Literal["stdout"] | None = "stdout",
        netns: str | None = None,
    ) -> None:
        self.state = state or NetState()
        self.addresses = dict(addresses or {})
        self.out = out
        self.netns = netns
        self.printed: list[list[str]] = []
        self.interfaces: set[str] = (
            set(self.addresses)
            | {r.dev for r in self.state.default_routes}
            | {e.dev for e in self.state.endpoints if e.dev}
        )
        self.fail_on: Callable[[str, dict[str, Any]], bool] | None = None

    @classmethod
    def from_backend(
        cls, backend: Backend, sysctl_keys: Iterable[str], out: TextIO | Literal["stdout"] | None = "stdout"
    ) -> DryRunBackend:
        """Dry run seeded with the real state read (read-only) through ``backend``, in its network namespace.

        ``out`` as for the class (``"stdout"``: :data:`sys.stdout` at print time).

        The printed commands carry ``backend``'s ``netns`` (``ip netns exec NAME …``), so that an
        operator who copies them runs them where the agent would have.

        Raises
        ------
        BackendError
            When ``backend`` cannot read the state (e.g. no such namespace).
        """
        return cls(
            backend.read_state(sysctl_keys), backend.read_addresses(), out, netns=getattr(backend, "netns", None)
        )

    @property
    def ops(self) -> dict[str, Callable[..., None]]:
        def make(op: str) -> Callable[..., None]:
            def call(**args: Any) -> None:
                argv = safety.check_argv(commands.in_netns(commands.argv_for(op, args), self.netns))
                if self.fail_on is not None and self.fail_on(op, args):
                    raise BackendError(argv, 2, "injected failure (dry run)")
                self.state = simulate(self.state, op, args)
                self.printed.append(argv)
                if self.out is not None:  # "stdout": the current one, not the one at import or construction
                    print("would run: " + " ".join(argv), file=sys.stdout if isinstance(self.out, str) else self.out)

            return call

        return {op: make(op) for op in OPS}

    def read_state(self, sysctl_keys: Iterable[str]) -> NetState:
        keys = set(sysctl_keys)
        return NetState(
            endpoints=self.state.endpoints,
            limits=self.state.limits,
            default_routes=self.state.default_routes,
            sysctls=tuple((k, v) for k, v in self.state.sysctls if k in keys),
        )

    def read_addresses(self) -> dict[str, list[str]]:
        return {k: list(v) for k, v in self.addresses.items()}

    def read_interfaces(self) -> set[str]:
        return set(self.interfaces)
