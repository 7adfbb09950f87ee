"""Kernel capabilities: MPTCP sysctls and congestion-control lists of this network namespace.

Sources (Linux ``Documentation/networking/mptcp-sysctl.rst`` and ``ip-sysctl.rst``):
``/proc/sys/net/mptcp/*`` (``enabled``, ``path_manager``/``pm_type``, ``scheduler``,
``available_schedulers`` …), ``/proc/sys/net/ipv4/tcp_available_congestion_control``
(algorithms loaded) and ``tcp_allowed_congestion_control`` (what an unprivileged
socket or a non-initial network namespace may select), and
``tcp_congestion_control`` (the namespace default).

``/proc/sys/net`` shows the network namespace of the thread that reads it, so
:class:`KernelCollector` with ``netns`` (the agent's ``--netns``) reads from a thread
that entered that namespace; ``kernel.osrelease`` is the same in every one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from edgepath_agent.collector.base import in_netns


@dataclass(frozen=True)
class KernelCapabilities:
    """What the kernel of this namespace offers the applier."""

    mptcp_enabled: bool
    mptcp: dict[str, str] = field(default_factory=dict)
    available_cc: tuple[str, ...] = ()
    allowed_cc: tuple[str, ...] = ()
    current_cc: str | None = None
    kernel_release: str | None = None

    @property
    def laminar_endpoints(self) -> bool:
        """Whether the in-kernel path manager knows the ``laminar`` endpoint flag (Linux ≥ 6.18).

        Kernel release, not an add-and-read-back probe: before the 6.19 fix "mptcp: pm: ignore
        unknown endpoint flags" (backported to stable) a kernel stored flags it did not know, so a
        read-back would claim support on older kernels.
        """
        return kernel_version(self.kernel_release) >= (6, 18)

    @property
    def path_manager(self) -> str | None:
        """Active MPTCP path manager: ``kernel`` (in-kernel, driven by ``ip mptcp endpoint``) or ``userspace``.

        ``net.mptcp.path_manager`` (a name; Linux ≥ 6.15) where the kernel has it, else the
        older ``net.mptcp.pm_type`` (0 = kernel, 1 = userspace), deprecated since 6.15
        (Documentation/networking/mptcp-sysctl.rst). ``None`` without MPTCP.
        """
        if "path_manager" in self.mptcp:
            return self.mptcp["path_manager"] or None
        return {"0": "kernel", "1": "userspace"}.get(self.mptcp.get("pm_type", ""))

    @property
    def path_managers(self) -> tuple[str, ...]:
        """Path managers the kernel offers (``available_path_managers``, Linux ≥ 6.15; else from ``pm_type``)."""
        if "available_path_managers" in self.mptcp:
            return tuple(self.mptcp["available_path_managers"].split())
        return ("kernel", "userspace") if "pm_type" in self.mptcp else ()

    @property
    def schedulers(self) -> tuple[str, ...]:
        """MPTCP packet schedulers the kernel lists (``default`` only on most kernels)."""
        return tuple(self.mptcp.get("available_schedulers", "").split())


def kernel_version(release: str | None) -> tuple[int, int]:
    """``(major, minor)`` of a kernel release string (``"6.18.44-fc-v669"`` → ``(6, 18)``); ``(0, 0)`` if unreadable."""
    head = (release or "").split("-", 1)[0].split(".")
    try:
        return int(head[0]), int(head[1]) if len(head) > 1 else 0
    except ValueError:
        return (0, 0)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def read_capabilities(proc_sys: Path = Path("/proc/sys")) -> KernelCapabilities:
    """Read the capabilities from ``proc_sys`` (a directory laid out like ``/proc/sys``).

    Missing files give empty values (kernel without MPTCP → ``mptcp_enabled=False``).
    """
    mptcp_dir = proc_sys / "net" / "mptcp"
    mptcp: dict[str, str] = {}
    if mptcp_dir.is_dir():
        for entry in sorted(mptcp_dir.iterdir()):
            value = _read(entry)
            if value is not None:
                mptcp[entry.name] = value
    ipv4 = proc_sys / "net" / "ipv4"
    return KernelCapabilities(
        mptcp_enabled=mptcp.get("enabled") == "1",
        mptcp=mptcp,
        available_cc=tuple((_read(ipv4 / "tcp_available_congestion_control") or "").split()),
        allowed_cc=tuple((_read(ipv4 / "tcp_allowed_congestion_control") or "").split()),
        current_cc=_read(ipv4 / "tcp_congestion_control"),
        kernel_release=_read(proc_sys / "kernel" / "osrelease"),
    )


class KernelCollector:
    """Collector-shaped wrapper: no per-interface readings, capabilities on :attr:`capabilities`.

    Parameters
    ----------
    proc_sys
        Directory laid out like ``/proc/sys``.
    netns
        Network namespace whose ``net.*`` values are read (from a thread that entered it); the
        current one when ``None``.

    Raises
    ------
    OSError
        When ``netns`` cannot be entered (the capabilities are read once here, then on each :meth:`collect`).
    """

    name = "kernel"

    def __init__(self, proc_sys: Path = Path("/proc/sys"), netns: str | None = None) -> None:
        self.proc_sys = proc_sys
        self.netns = netns
        self.capabilities = self._read()

    def _read(self) -> KernelCapabilities:
        return in_netns(self.netns, lambda: read_capabilities(self.proc_sys))

    def collect(self) -> dict[str, dict[str, object]]:
        """Re-read :attr:`capabilities`; returns ``{}`` (no per-interface fields).

        Raises
        ------
        OSError
            When ``netns`` cannot be entered.
        """
        self.capabilities = self._read()
        return {}
