"""Start-up checks of the applier, run by ``edgepath-agent run`` before anything is touched.

:func:`check_mptcp`: the kernel of the managed network namespace has MPTCP (``/proc/sys/net/mptcp``), and the
backend can read its path manager (``ip mptcp`` for the command backend and dry runs, generic netlink
``mptcp_pm`` for the netlink backend). Without it the first step used to end in a traceback
(``BackendError: ip -j mptcp endpoint show exited 1``) after a log blaming iproute2 for not knowing
``laminar``. ``net.mptcp.enabled = 0`` is warned about, not refused: applications then open plain TCP
connections, which the primary-path choice (default-route metrics) still steers, and the operator can
enable MPTCP at any time without restarting the agent (the sysctl is read by the kernel per new socket).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from edgepath_agent.collector.base import in_netns
from edgepath_agent.collector.kernel import KernelCapabilities, read_capabilities

log = logging.getLogger(__name__)

#: Where the kernel's sysctls are read (a test seam: a directory laid out like ``/proc/sys``).
PROC_SYS = Path("/proc/sys")

#: Backends whose MPTCP access is probed, and how (the dry run reads the state with ``ip``).
PROBED_BACKENDS = ("command", "dry-run", "netlink")


class MptcpUnavailable(RuntimeError):
    """The managed network namespace's kernel has no MPTCP, or the backend cannot reach its path manager."""


def _read_through_backend(backend: str, netns: str | None) -> Callable[[], object]:
    def read() -> object:
        if backend == "netlink":
            from edgepath_agent.applier.netlink import NetlinkBackend

            return NetlinkBackend(netns=netns).read_state(())
        from edgepath_agent.applier.backend import CommandBackend

        return CommandBackend(netns=netns).read_state(())

    return read


def check_mptcp(
    backend: str,
    netns: str | None = None,
    proc_sys: Path | None = None,
    read: Callable[[], object] | None = None,
) -> KernelCapabilities | None:
    """Refuse a kernel without MPTCP; warn when MPTCP is disabled (``net.mptcp.enabled = 0``).

    Parameters
    ----------
    backend
        The applier backend (``command``, ``dry-run``, ``netlink``, ``networkmanager``); the first three are
        also asked to read the MPTCP endpoints and limits (read-only).
    netns
        Network namespace the agent manages (``None``: its own).
    proc_sys
        Directory laid out like ``/proc/sys`` (default :data:`PROC_SYS`).
    read
        The backend's read (default: a fresh backend's ``read_state``); a test seam.

    Returns
    -------
    KernelCapabilities or None
        What was read; ``None`` when ``netns`` cannot be entered (nothing is checked: the interface check
        that follows names the namespace).

    Raises
    ------
    MptcpUnavailable
        When ``net/mptcp`` is missing under ``proc_sys`` (a kernel built without ``CONFIG_MPTCP``), or the
        backend's read of the MPTCP path manager fails (the message has the backend's error).
    """
    proc_sys = PROC_SYS if proc_sys is None else proc_sys
    where = f" in network namespace {netns}" if netns else ""
    try:
        caps = in_netns(netns, lambda: read_capabilities(proc_sys))
    except OSError:
        return None
    if not caps.mptcp:
        raise MptcpUnavailable(
            f"this kernel has no MPTCP ({proc_sys / 'net' / 'mptcp'} is missing{where}): the agent manages "
            "MPTCP endpoints and needs Linux >= 5.6 built with CONFIG_MPTCP=y"
        )
    if backend in PROBED_BACKENDS:
        try:
            (read or _read_through_backend(backend, netns))()
        except Exception as exc:  # BackendError (ip), NetlinkError (pyroute2), ...: all mean the same here
            tool = "generic netlink mptcp_pm" if backend == "netlink" else "ip mptcp"
            raise MptcpUnavailable(
                f"MPTCP endpoints cannot be read{where} with {tool} ({exc}): a kernel without MPTCP "
                "(CONFIG_MPTCP=y, Linux >= 5.6)" + (", or an iproute2 older than 5.6" if tool == "ip mptcp" else "")
            ) from exc
    if not caps.mptcp_enabled:
        log.warning(
            "MPTCP is disabled%s (net.mptcp.enabled = %s): applications open plain TCP connections, so the "
            "MPTCP endpoints and limits the agent sets are not used; only the primary path (default-route "
            "metrics) takes effect. Enable it with: sysctl -w net.mptcp.enabled=1",
            where,
            caps.mptcp.get("enabled", "?"),
            extra={"netns": netns},
        )
    return caps
