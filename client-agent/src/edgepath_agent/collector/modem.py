"""LTE/5G collector: RSRP, RSRQ, SINR, RSSI (and CQI where reported) from ModemManager.

Source: ``mmcli`` with JSON output (``-J``, ModemManager ≥ 1.12):

* ``mmcli -L -J`` → ``{"modem-list": ["/org/freedesktop/ModemManager1/Modem/0", ...]}``
* ``mmcli -m N -J`` → ``modem.generic.ports`` (e.g. ``"wwan0 (net)"``) and
  ``modem.generic.access-technologies`` (e.g. ``["lte"]``, ``["5gnr"]``)
* ``mmcli -m N --signal-get -J`` → ``modem.signal.{lte,5g}.{rsrp,rsrq,rssi,snr}``
  as strings, ``"--"`` when unknown. ModemManager reports these extended signal values
  only once polling is enabled (``modem.signal.refresh.rate`` > 0): with
  ``signal_setup_s`` > 0 (the agent's ``modem_signal_setup_s``) :class:`ModemCollector`
  enables it once per modem with ``mmcli -m N --signal-setup=SECONDS`` when the rate is
  0, then reads again (ModemManager's polkit policy must allow the agent's user
  ``org.freedesktop.ModemManager1.Device.Control``); with 0 it only reads.

The values are mapped to ``InterfaceContext`` fields: ``rsrp_dbm``, ``rsrq_db``,
``sinr_db`` (``snr``), ``cell_rssi_dbm`` (``rssi``) and ``cqi`` when a ``cqi`` key is
present. The parsers are pure and tested on sample outputs.

The agent's ``--netns`` does not apply here: ModemManager is reached over the system D-Bus
(a filesystem socket), which is the same from every network namespace.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any

from edgepath_agent.collector.base import Readings, run_tool

#: mmcli signal key → InterfaceContext field.
_SIGNAL_FIELDS = {"rsrp": "rsrp_dbm", "rsrq": "rsrq_db", "snr": "sinr_db", "rssi": "cell_rssi_dbm", "cqi": "cqi"}


def _number(value: Any) -> float | None:
    if value is None:
        return None
    try:
        x = float(str(value).strip())
    except ValueError:
        return None  # "--", "unknown"
    return x if math.isfinite(x) else None


def parse_modem_list(text: str) -> list[str]:
    """Modem indices (the last path component) from ``mmcli -L -J``."""
    paths = json.loads(text).get("modem-list", [])
    return [p.rstrip("/").rsplit("/", 1)[-1] for p in paths if p]


def parse_modem_info(text: str) -> tuple[str | None, str | None]:
    """``(net interface, access type)`` from ``mmcli -m N -J``.

    The access type is ``"NR"`` when any access technology mentions 5G NR, ``"LTE"``
    for ``lte``, else ``None`` (2G/3G are not arms of the bandit).
    """
    generic = json.loads(text).get("modem", {}).get("generic", {})
    net = None
    for port in generic.get("ports", []):
        name, _, kind = str(port).partition(" ")
        if kind.strip() == "(net)":
            net = name
            break
    techs = [str(t).lower() for t in generic.get("access-technologies", [])]
    access = "NR" if any("5gnr" in t or t == "nr" for t in techs) else ("LTE" if "lte" in techs else None)
    return net, access


def parse_signal(text: str, access_type: str | None) -> dict[str, Any]:
    """``InterfaceContext`` fields from ``mmcli -m N --signal-get -J``.

    For an NR modem the ``5g`` block is read first and the ``lte`` block fills what
    it lacks (NSA mode reports both); otherwise only ``lte``.
    """
    signal = json.loads(text).get("modem", {}).get("signal", {})
    blocks = [signal.get("5g", {}), signal.get("lte", {})] if access_type == "NR" else [signal.get("lte", {})]
    out: dict[str, Any] = {}
    for block in blocks:
        for key, field in _SIGNAL_FIELDS.items():
            x = _number(block.get(key))
            if x is not None and field not in out:
                out[field] = round(x) if field == "cqi" else x
    return out


def signal_refresh_rate_s(text: str) -> float | None:
    """``modem.signal.refresh.rate`` (s; 0 = extended signal polling off) from ``--signal-get -J``, None if absent."""
    rate = json.loads(text).get("modem", {}).get("signal", {}).get("refresh", {}).get("rate")
    return _number(rate)


class ModemCollector:
    """Readings of every ModemManager modem with a network port.

    Parameters
    ----------
    runner
        ``argv → stdout or None``; defaults to running the real tool.
    signal_setup_s
        Extended-signal polling period to enable where it is off (s); 0 leaves the modem as it is.
    """

    name = "modem"

    def __init__(self, runner: Callable[[Sequence[str]], str | None] = run_tool, signal_setup_s: int = 0) -> None:
        self._run = runner
        self.signal_setup_s = signal_setup_s
        self._setup_tried: set[str] = set()

    def collect(self) -> Readings:
        listing = self._run(["mmcli", "-L", "-J"])
        if listing is None:
            return {}
        readings: Readings = {}
        for index in parse_modem_list(listing):
            info = self._run(["mmcli", "-m", index, "-J"])
            if info is None:
                continue
            net, access = parse_modem_info(info)
            if net is None or access is None:
                continue
            fields: dict[str, Any] = {"access_type": access}
            signal = self._run(["mmcli", "-m", index, "--signal-get", "-J"])
            if (
                signal is not None
                and self.signal_setup_s > 0
                and index not in self._setup_tried
                and not signal_refresh_rate_s(signal)
            ):
                self._setup_tried.add(index)  # once: a refused setup (polkit) is not retried every step
                if self._run(["mmcli", "-m", index, f"--signal-setup={self.signal_setup_s}"]) is not None:
                    signal = self._run(["mmcli", "-m", index, "--signal-get", "-J"])
            if signal is not None:
                fields.update(parse_signal(signal, access))
            readings[net] = fields
        return readings
