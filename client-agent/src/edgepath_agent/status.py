"""The agent's status record: what ``edgepath-agent status`` shows.

The running daemon rewrites one small JSON file (``status_file``, by default
``/run/edgepath-agent/status.json``, created by the unit's ``RuntimeDirectory=`` or
the tmpfiles.d entry) after every step, atomically (write to a temporary file in
the same directory, then :func:`os.replace`). ``edgepath-agent status`` reads it
and can also probe the configured service URLs itself (``--check``).

Record (JSON object; times are Unix epoch milliseconds):

``updated_unix_ms``, ``pid``, ``device_id``, ``step``
``service``: ``urls`` (in order of preference), ``last_used``, ``reachable``
    (whether the last call got an answer; null before the first call, e.g. while every step is skipped),
    ``last_error``, ``last_ok_unix_ms``
``recommendation``: ``decision_id``, ``model_version``, ``policy``, ``primary_path``
    (``interface``, ``access_type``, ``propensity``), ``decided_at_unix_ms``; or ``null``
``applied``: ``primary``, ``backup`` (interfaces whose endpoint has the backup flag),
    ``congestion_control``, ``steps`` (kernel changes in that step); or ``null`` (nothing applied yet, or the
    configuration was restored at stop: ``configuration``)
``configuration``: how the agent's stop left the device: ``"restored at stop"``, or ``"partly restored at stop:
    …"`` naming the restore steps that failed (the journal is kept: ``edgepath-agent rollback`` retries); null while
    the agent runs, or when it stopped without restoring (``restore_on_exit = false``) or had nothing to restore.
    ``edgepath-agent rollback`` rewrites it (:func:`mark_configuration`) when it restored something:
    ``"restored by edgepath-agent rollback"``, or ``"partly restored by edgepath-agent rollback: …"`` naming the
    steps still failing. Restore steps skipped because their device no longer exists are named after a restore
    (``"restored at stop (skipped: …)"``). The sentence is for people; programs read ``configuration_state``
``configuration_state``: the state of the device's configuration, one of :data:`CONFIGURATION_STATES`:
    ``"applied"`` (a recommendation the agent applied is in effect: ``applied``), ``"restored"`` (the state before
    the agent's first change is back, at stop or by ``edgepath-agent rollback``), ``"partly_restored"`` (a restore
    left steps failing: ``configuration`` names them); null when the agent applied nothing. Records of agents
    before it was written have ``configuration`` only: :func:`configuration_state` reads those from the sentence
``last_outcome``: ``decision_id``, ``throughput_bps``, ``latency_ms``, ``loss``,
    ``sent_unix_ms``, ``delivered`` (false: queued for re-sending), ``reward``; or ``null``
``outcomes``: ``"reported"``, or why this agent reports none (``"not reported: dry run"``)
``no_outcome_reason``: why the last step that applied a recommendation (or the stop that closed the passive
    meter's last interval) reported no outcome (a dry run, an idle link, a failed probe, the upstream guard's
    override, …); null when it reported one. Under the passive meter a step reports the previous decision's
    outcome (its interval), so the reason names that decision
``pending_outcomes``: outcomes queued while the service was unreachable (kept across restarts in ``pending_file``)
``probe``: ``target`` (``HOST:PORT`` or null), ``tool`` (``iperf3``, ``builtin`` or ``passive``),
    ``mptcp_mode``, ``version`` (iperf3's), ``last_error`` (why the last probe failed, e.g. its
    server refused the connection; null once a probe runs without error), ``failures`` (probes that
    failed since the agent started; no outcome was reported for those steps)
``connectivity``: per-interface result of the last upstream probe (see daemon.py)
``unreported_interfaces``: managed interfaces left out of the last request, with why (``"has no address"``,
    ``"is down"``, ``"does not exist"``): the service is not offered them until they can carry a path
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

if TYPE_CHECKING:
    from edgepath_agent.safety import ClientCredentials

DEFAULT_STATUS_FILE = Path("/run/edgepath-agent/status.json")

#: The values of the record's ``configuration_state`` (module docstring).
APPLIED, RESTORED, PARTLY_RESTORED = "applied", "restored", "partly_restored"
CONFIGURATION_STATES = (APPLIED, RESTORED, PARTLY_RESTORED)


def now_ms() -> int:
    """Current Unix time in ms."""
    return int(time.time() * 1000)


def write_status(path: Path, record: Mapping[str, Any]) -> None:
    """Atomically replace ``path`` with ``record`` as JSON (mode 0644: readable by the operator's ``status``).

    Raises
    ------
    OSError
        When the directory is missing or not writable.
    """
    fd, tmp = tempfile.mkstemp(prefix=".status-", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(record, fh, indent=2, sort_keys=True, default=str)
            fh.write("\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def mark_configuration(path: Path, configuration: str, state: str) -> bool:
    """Rewrite the record at ``path`` (atomically, :func:`write_status`) to say how the device's configuration was
    left by something other than the agent's stop (``edgepath-agent rollback``): ``configuration`` (the sentence)
    and ``configuration_state`` (``state``: :data:`RESTORED` or :data:`PARTLY_RESTORED`) set, ``applied`` null (the
    configuration is no longer the one applied), ``updated_unix_ms`` now; the other fields as they were. Returns
    ``False`` (nothing written) when there is no record at ``path``.

    Raises
    ------
    ValueError
        When ``state`` is not one of :data:`CONFIGURATION_STATES`, or the file is not a status record
        (:func:`read_status`).
    OSError
        When it cannot be read or rewritten (no permission, a directory).
    """
    if state not in CONFIGURATION_STATES:
        raise ValueError(f"configuration state {state!r} is not one of {', '.join(CONFIGURATION_STATES)}")
    record = read_status(path)
    if record is None:
        return False
    write_status(
        path,
        {
            **record,
            "configuration": configuration,
            "configuration_state": state,
            "applied": None,
            "updated_unix_ms": now_ms(),
        },
    )
    return True


def configuration_state(record: Mapping[str, Any]) -> str | None:
    """The record's ``configuration_state`` (one of :data:`CONFIGURATION_STATES`, or ``None``: nothing applied).

    A record written by an agent before that field (``configuration`` without ``configuration_state``; or with a
    value this agent does not know) is read by its sentence: :data:`RESTORED` when it starts with ``"restored "``
    (at stop, by ``edgepath-agent rollback``), :data:`PARTLY_RESTORED` otherwise; without a sentence,
    :data:`APPLIED` when it has ``applied``.
    """
    state = record.get("configuration_state")
    if state in CONFIGURATION_STATES:
        return str(state)
    configuration = record.get("configuration")
    if configuration:
        return RESTORED if str(configuration).startswith("restored ") else PARTLY_RESTORED
    return APPLIED if record.get("applied") else None


def read_status(path: Path) -> dict[str, Any] | None:
    """The record at ``path``, ``None`` when the file does not exist.

    Raises
    ------
    ValueError
        When the file is not a JSON object, or a field :func:`format_status` reads is of the wrong type
        (:func:`check_record`; the message says why, without the path).
    OSError
        When the file cannot be read (a directory, no permission).
    """
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not a status record: not JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise ValueError(f"not a status record: a JSON {type(data).__name__}, not an object")
    check_record(data)
    return data


#: The record's fields that hold an object (or null), and those that hold a number (or are absent).
_OBJECT_FIELDS = (
    "service",
    "recommendation",
    "applied",
    "last_outcome",
    "probe",
    "connectivity",
    "unreported_interfaces",
)
_NUMBER_FIELDS = ("updated_unix_ms",)
#: The fields every record has (:meth:`edgepath_agent.daemon.Agent.status_record`): when, and by which process.
_REQUIRED_FIELDS = ("updated_unix_ms", "pid")


def check_record(record: Mapping[str, Any]) -> None:
    """Check the fields of ``record`` that :func:`format_status` reads have the record's types (above), and that
    it has the fields every record has (``updated_unix_ms``, ``pid``: ``{}`` was shown as "no status record" with
    exit 0, ``{"pid": 1}`` as a running agent).

    A record of another shape (``{"updated_unix_ms": "x"}``, ``{"service": "oops"}``: another program's file, a
    hand edit) used to end ``status`` with a traceback.

    Raises
    ------
    ValueError
        ``not a status record: FIELD is …``, naming the first field of the wrong type.
    """

    def wrong(name: str, value: Any, expected: str) -> ValueError:
        return ValueError(f"not a status record: {name} is {json.dumps(value)[:40]}, not {expected}")

    for name in _NUMBER_FIELDS:
        value = record.get(name)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
        ):
            raise wrong(name, value, "a number")
    for name in _OBJECT_FIELDS:
        value = record.get(name)
        if value is not None and not isinstance(value, dict):
            raise wrong(name, value, "an object")
    for name, value in (record.get("connectivity") or {}).items():
        if not isinstance(value, dict):
            raise wrong(f"connectivity.{name}", value, "an object")
    configuration = record.get("configuration")
    if configuration is not None and not isinstance(configuration, str):
        raise wrong("configuration", configuration, "a string")
    state = record.get("configuration_state")
    if state is not None and not isinstance(state, str):
        raise wrong("configuration_state", state, "a string")
    for name, field in (("service", "urls"), ("applied", "backup")):  # joined into a line: lists of strings
        value = (record.get(name) or {}).get(field)
        if value is not None and (not isinstance(value, list) or not all(isinstance(v, str) for v in value)):
            raise wrong(f"{name}.{field}", value, "a list of strings")
    primary = (record.get("recommendation") or {}).get("primary_path")
    if primary is not None and not isinstance(primary, dict):
        raise wrong("recommendation.primary_path", primary, "an object")
    throughput = (record.get("last_outcome") or {}).get("throughput_bps")
    if throughput is not None and (isinstance(throughput, bool) or not isinstance(throughput, (int, float))):
        raise wrong("last_outcome.throughput_bps", throughput, "a number")
    for name in _REQUIRED_FIELDS:  # every record an agent writes has them: {} or another program's object has not
        if name not in record:
            raise ValueError(f"not a status record: no {name}")
    pid = record["pid"]
    if isinstance(pid, bool) or not isinstance(pid, int):
        raise wrong("pid", pid, "an integer")


def probe_service(url: str, timeout_s: float = 2.0, credentials: ClientCredentials | None = None) -> tuple[bool, str]:
    """Is the service at ``url`` answering? ``(reachable, detail)``.

    ``grpc(s)://``: the channel becomes READY within ``timeout_s`` (a TCP/TLS/HTTP2
    connection; no RPC is made). ``http(s)://``: ``GET /healthz`` answers 200.
    ``credentials``: the TLS settings ``run`` uses (``ca_file`` verifies the service, ``cert_file``/``key_file``
    for mTLS; its token is not sent); without them the system's roots verify it.
    No exception escapes: failures come back as ``(False, reason)``.
    """
    from edgepath_agent.safety import ClientCredentials

    parsed = urlparse(url)
    tls = credentials or ClientCredentials()
    try:
        if parsed.scheme in ("grpc", "grpcs"):
            import grpc

            target = f"{parsed.hostname}:{parsed.port}"
            channel = (
                grpc.secure_channel(target, tls.grpc_channel_credentials())
                if parsed.scheme == "grpcs"
                else grpc.insecure_channel(target)
            )
            try:
                grpc.channel_ready_future(channel).result(timeout=timeout_s)
            except grpc.FutureTimeoutError:
                return False, f"no gRPC connection within {timeout_s:g} s"
            finally:
                channel.close()
            return True, "gRPC channel ready"
        if parsed.scheme in ("http", "https"):
            import httpx

            verify = {k: v for k, v in tls.httpx_options().items() if k == "verify"}  # no bearer header
            resp = httpx.get(url.rstrip("/") + "/healthz", timeout=timeout_s, **verify)
            return resp.status_code == 200, f"GET /healthz → {resp.status_code}"
    except Exception as exc:  # reported, never raised: status must always print
        return False, f"{type(exc).__name__}: {exc}"
    return False, f"unsupported scheme in {url!r}"


def pid_alive(pid: Any) -> bool | None:
    """Whether process ``pid`` exists here (``kill(pid, 0)``); ``None`` when ``pid`` is not a process id.

    A process of another user (``PermissionError``) is alive: the agent runs as its own user.
    """
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return None
    return True


def format_status(record: Mapping[str, Any], now_unix_ms: int | None = None, running: bool | None = None) -> str:
    """Human-readable lines for ``record`` (the ``status`` command's default output).

    One line each for the agent, the service (and its last error), the recommendation, the applied state (or how the
    stop restored it: ``configuration``), the last outcome and, below it, ``no outcome: REASON`` when the last step
    (or the stop) reported none (``no_outcome_reason``), then ``outcomes: not reported: …`` when the agent reports
    no outcome at all (``outcomes``; a dry run, whose ``no outcome`` line would only repeat it), the pending
    outcomes, the probe, the interfaces not reported and the upstream checks. Fields missing from the record (an
    older agent's) are left out.

    ``running``: ``False`` when the record's process has exited (:func:`pid_alive`); the first line then says
    the agent is not running and whose record it is.
    """
    now_unix_ms = now_ms() if now_unix_ms is None else now_unix_ms
    age_s = (now_unix_ms - int(record.get("updated_unix_ms", now_unix_ms))) / 1000.0
    if running is False:
        first = (
            f"agent:          not running (last record by pid {record.get('pid')}, device "
            f"{record.get('device_id')}, updated {age_s:.0f} s ago)"
        )
    else:
        first = f"agent:          pid {record.get('pid')}, device {record.get('device_id')}, updated {age_s:.0f} s ago"
    lines = [first]
    svc = record.get("service") or {}
    reachable = svc.get("reachable")  # None: not called yet (every step so far skipped, or none done)
    configured = f"(configured: {', '.join(svc.get('urls', []))})"
    if reachable is None:
        lines.append(f"service:        not contacted yet {configured}")
    else:
        reach = "reachable" if reachable else "UNREACHABLE"
        lines.append(f"service:        {reach} via {svc.get('last_used') or '-'} {configured}")
    if svc.get("last_error"):
        lines.append(f"  last error:   {svc['last_error']}")
    rec = record.get("recommendation")
    if rec:
        pp = rec.get("primary_path") or {}
        lines.append(
            f"recommendation: {rec.get('decision_id')} primary {pp.get('interface')} ({pp.get('access_type')}), "
            f"policy {rec.get('policy')}, model v{rec.get('model_version')}"
        )
    else:
        lines.append("recommendation: none yet")
    applied = record.get("applied")
    configuration = record.get("configuration")
    state = configuration_state(record)
    if state == RESTORED:  # at stop, by `rollback`
        lines.append(f"applied:        nothing: the configuration was {configuration or 'restored'}")
    elif state == PARTLY_RESTORED:
        lines.append(f"applied:        {configuration or 'partly restored'} (retry: edgepath-agent rollback)")
    elif applied:
        lines.append(
            f"applied:        primary {applied.get('primary')}, backup {','.join(applied.get('backup') or []) or '-'}, "
            f"cc {applied.get('congestion_control') or '-'}"
        )
    else:
        lines.append("applied:        nothing")
    out = record.get("last_outcome")
    if out:
        state = "delivered" if out.get("delivered") else "queued"
        lines.append(
            f"last outcome:   {out.get('decision_id')} {float(out.get('throughput_bps') or 0) / 1e6:.2f} Mbit/s "
            f"({state}, reward {out.get('reward')})"
        )
    else:
        lines.append("last outcome:   none sent")
    reporting = record.get("outcomes")
    if reporting and reporting != "reported":
        lines.append(f"outcomes:       {reporting}")
    elif record.get("no_outcome_reason"):
        lines.append(f"  no outcome:   {record['no_outcome_reason']}")
    lines.append(f"pending:        {record.get('pending_outcomes', 0)} outcome(s) queued")
    probe = record.get("probe")
    if probe:
        how = probe.get("tool")
        if probe.get("mptcp_mode"):
            how = f"{how} ({probe.get('version') or 'iperf3'}, MPTCP: {probe['mptcp_mode']})"
        lines.append(f"probe:          {how}{' -> ' + probe['target'] if probe.get('target') else ''}")
        if probe.get("last_error"):
            lines.append(f"  last error:   {probe['last_error']} ({probe.get('failures', '?')} failed since start)")
    for name, reason in sorted((record.get("unreported_interfaces") or {}).items()):
        lines.append(f"not reported:   {name} {reason}")
    for name, probe in sorted((record.get("connectivity") or {}).items()):
        lines.append(f"upstream {name}: {'ok' if probe.get('ok') else 'NO CONNECTIVITY'} ({probe.get('detail', '')})")
    return "\n".join(lines)
