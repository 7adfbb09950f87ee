"""Signed, versioned model snapshots on a state backend's snapshot channel, and the replicas' hot-swap follower.

Format
------
A snapshot is the :class:`~edgepath.engines.primary_path.PrimaryPathBandit` serialized with
cloudpickle (contextualbandits policies hold closures plain pickle cannot reach), stored by the backend's
:class:`~edgepath.state.backend.SnapshotChannel` as a record of ``version``, ``blob``, ``signature``,
``meta`` (JSON: ``published_at`` Unix s, ``samples_seen``, ``policy``); in Redis the hash
``{ns}:model:snapshot`` next to the counter ``{ns}:model:version`` (:mod:`edgepath.state.redis_backend`).

Signature
---------
``HMAC-SHA256(key, b"edgepath-snapshot-v1\\x00" + version + b"\\x00" + meta + b"\\x00" + blob)``
(RFC 2104 HMAC with SHA-256, FIPS 180-4), hex-encoded. Binding the version and the metadata prevents
replaying an old blob under a new version number. Replicas verify it with :func:`hmac.compare_digest`
*before* unpickling: a blob that is unsigned, signed with another key or altered is refused, logged
and counted in ``edgepath_snapshots_rejected{reason}`` — unpickling runs arbitrary code, so only
what the trainer (holder of the key) signed is ever loaded.

Key id
------
``meta`` also holds ``key_id``, the signing key's id: the first 8 hex digits of
``HMAC-SHA256(key, b"edgepath-key-id")`` (:func:`key_id`). It names a key without revealing it (a 32-bit
fingerprint, no more use for guessing a key than a signature already is), so a refusal can say which
case it is: signed with key id X while this process has key id Y (the processes' ``EDGEPATH_HMAC_KEY``
differ, or the snapshot was forged), the same key id (altered or forged after signing), or none (a
snapshot published before key ids, or forged). Every refusal message names ``EDGEPATH_HMAC_KEY`` and the
key ids. A replica logs one WARNING per refused version saying which model it keeps serving; a trainer
publishes nothing over a snapshot it cannot verify (:class:`~edgepath.training.leader.TrainerRole`).

Publication (exactly once with the outcome log)
-----------------------------------------------
Atomic in the store (in Redis one Lua script): if the new version is greater than the stored one (a
fencing check: a trainer that lost its lock cannot overwrite a newer model), store the record,
acknowledge the outcome-log entries the model was trained on, and announce the version (Redis:
``PUBLISH`` on ``{ns}:model:published``). Otherwise nothing changes and
:class:`~edgepath.training.online.PublishConflictError` is raised after the trainer re-synchronised to the stored model.

Hot swap
--------
:class:`SnapshotFollower` (in every replica) subscribes to the channel's notifications and, on one — or every
``poll_s`` as a fallback if a message was missed — compares the stored version with the serving one
and loads a newer snapshot (verify, unpickle in a worker thread, swap the registry reference).

A store that went back
----------------------
The stored version only goes up (the publication script's fencing check), so a stored version below one the
store held before means the store lost its data (a Redis restarted without persistence). The follower then
logs one warning naming both versions and puts the snapshot it serves back into the store, as the trainer
signed it (:meth:`SnapshotFollower.check` explains why).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import pickle
import time
from dataclasses import dataclass
from typing import Any

import cloudpickle

from edgepath.engines.primary_path import PrimaryPathBandit
from edgepath.metrics import Metrics
from edgepath.state.backend import SnapshotChannel, SnapshotRecord, StoreUnreachable
from edgepath.tasks import stop_task, wait_event
from edgepath.training.online import ModelRegistry, PublishConflictError

log = logging.getLogger(__name__)

_DOMAIN = b"edgepath-snapshot-v1"
#: Published, so it authenticates nothing: used only in the ``dev`` profile when no key is configured and both the
#: bind address and the shared store are on loopback (settings refuse it elsewhere:
#: :func:`edgepath.settings.dev_hmac_key_problem`), where whoever could write to the store is on this machine.
DEV_HMAC_KEY = b"edgepath-dev-insecure-hmac-key"


#: The refusal reasons of a snapshot whose signature this process's key cannot verify (the others, ``unreadable`` and
#: ``wrong_type``, are of a snapshot signed with this process's key that does not load here).
SIGNATURE_REASONS = frozenset({"unsigned", "bad_signature"})

_KEY_ID_DOMAIN = b"edgepath-key-id"


class SnapshotRejectedError(Exception):
    """A snapshot was refused before unpickling; ``reason`` is the metric label, ``version`` the refused snapshot's."""

    def __init__(self, reason: str, message: str, version: int | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.version = version


def key_id(key: bytes) -> str:
    """The id of an HMAC key as snapshots record and messages name it: the first 8 hex digits of
    ``HMAC-SHA256(key, b"edgepath-key-id")``. Tells two keys apart without revealing either."""
    return hmac.new(key, _KEY_ID_DOMAIN, hashlib.sha256).hexdigest()[:8]


def signer_key_id(meta: bytes) -> str | None:
    """The ``key_id`` a snapshot's metadata names (None: none, or metadata that is not a JSON object)."""
    try:
        found = json.loads(meta).get("key_id")
    except (ValueError, AttributeError):
        return None
    return found if isinstance(found, str) and found.isalnum() and len(found) <= 16 else None


def key_mismatch(meta: bytes, key: bytes) -> str:
    """Why a snapshot with ``meta`` may not verify with ``key``, naming EDGEPATH_HMAC_KEY and both key ids."""
    ours = key_id(key)
    theirs = signer_key_id(meta)
    if theirs is None:
        return (
            f"it names no signing key id (published before key ids were recorded, or forged); this process's "
            f"EDGEPATH_HMAC_KEY has key id {ours}: the keys differ, or the snapshot was forged"
        )
    if theirs != ours:
        return (
            f"signed with key id {theirs}, this process's EDGEPATH_HMAC_KEY has key id {ours}: "
            f"EDGEPATH_HMAC_KEY differs from the signer's (or the snapshot was forged)"
        )
    return (
        f"it names key id {theirs}, that of this process's EDGEPATH_HMAC_KEY too: the snapshot was altered or "
        f"forged after signing"
    )


def sign(key: bytes, version: int, meta: bytes, blob: bytes) -> str:
    """HMAC-SHA256 (RFC 2104) over domain, version, metadata and blob; hex digest."""
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for part in (_DOMAIN, str(version).encode(), meta, blob):
        mac.update(part)
        mac.update(b"\x00")
    return mac.hexdigest()


def dumps(model: PrimaryPathBandit) -> bytes:
    """Serialize a bandit (cloudpickle)."""
    return cloudpickle.dumps(model)


def loads_verified(key: bytes, version: int, meta: bytes, blob: bytes, signature: str | bytes | None) -> Any:
    """Verify the signature, then unpickle.

    Raises
    ------
    SnapshotRejectedError
        ``unsigned`` (no signature) or ``bad_signature`` (does not verify) — nothing was unpickled.
    """
    if not signature:
        raise SnapshotRejectedError(
            "unsigned",
            f"model snapshot v{version} has no signature (forged, or not written by an EdgePath trainer); this "
            f"process's EDGEPATH_HMAC_KEY has key id {key_id(key)}",
            version,
        )
    given = signature.decode() if isinstance(signature, bytes) else signature
    if not hmac.compare_digest(sign(key, version, meta, blob), given):
        raise SnapshotRejectedError(
            "bad_signature",
            f"model snapshot v{version}: signature does not verify with EDGEPATH_HMAC_KEY; {key_mismatch(meta, key)}",
            version,
        )
    return pickle.loads(blob)  # signed by the trainer: verified above


@dataclass(frozen=True)
class LoadedSnapshot:
    """A verified, unpickled snapshot; ``record`` is the stored record it came from (signature verified), which
    :meth:`SnapshotStore.restore` can store again unchanged."""

    version: int
    model: PrimaryPathBandit
    meta: dict[str, Any]
    record: SnapshotRecord | None = None


class SnapshotStore:
    """Publishes and loads signed model snapshots on a state backend's snapshot channel.

    Parameters
    ----------
    channel:
        Where snapshots are stored and announced (``StateBackend.snapshots``: Redis, or in process).
    hmac_key:
        Signing key (bytes, non-empty).
    metrics:
        Where refused snapshots are counted (optional).
    """

    def __init__(self, channel: SnapshotChannel, hmac_key: bytes, metrics: Metrics | None = None) -> None:
        if not hmac_key:
            raise ValueError("an HMAC key is required to sign or verify model snapshots")
        self.channel = channel
        self.key = hmac_key
        self.key_id = key_id(hmac_key)
        self.metrics = metrics
        self._last_refusal = ""  # the last refusal logged at ERROR (the same one again is logged at DEBUG)

    async def latest_version(self) -> int:
        """Stored model version (0 when nothing was published)."""
        return await self.channel.latest_version()

    async def publish(self, model: PrimaryPathBandit, version: int, entry_ids: list[str]) -> int:
        """Store ``model`` as ``version`` and acknowledge ``entry_ids``, atomically.

        Raises
        ------
        PublishConflictError
            The stored version is already ≥ ``version`` (another trainer published; nothing changed).
        edgepath.state.backend.StoreUnreachable
            The store cannot be reached (nothing is known to have changed; the entries stay pending).
        """
        blob = await asyncio.to_thread(dumps, model)
        meta = json.dumps(
            {
                "published_at": time.time(),
                "samples_seen": model.samples_seen,
                "policy": model.policy_name,
                "key_id": self.key_id,
            },
            separators=(",", ":"),
        ).encode()
        signature = sign(self.key, version, meta, blob).encode()
        published, stored = await self.channel.publish(SnapshotRecord(version, blob, signature, meta), entry_ids)
        if not published:
            raise PublishConflictError(f"model version {stored} already published; refusing to publish {version}")
        return version

    async def load(self) -> LoadedSnapshot | None:
        """The stored snapshot, verified and unpickled; None when nothing was published.

        Raises
        ------
        SnapshotRejectedError
            Unsigned, badly signed, unreadable or not a bandit (counted and logged here).
        """
        record = await self.channel.read()
        if record is None:
            return None
        try:
            version, meta = record.version, record.meta
            model = await asyncio.to_thread(loads_verified, self.key, version, meta, record.blob, record.signature)
            if not isinstance(model, PrimaryPathBandit):
                raise SnapshotRejectedError(
                    "wrong_type", f"model snapshot v{version} is a {type(model).__name__}", version
                )
            self._last_refusal = ""
            return LoadedSnapshot(version, model, json.loads(meta), record)
        except SnapshotRejectedError as exc:
            self._reject(exc.reason, str(exc))
            raise
        except Exception as exc:  # signed but not loadable here (e.g. incompatible library versions)
            self._reject("unreadable", f"model snapshot unreadable: {exc!r}")
            raise SnapshotRejectedError("unreadable", str(exc), record.version) from exc

    async def restore(self, record: SnapshotRecord) -> bool:
        """Store ``record`` again exactly as it was stored and signed (one :meth:`load` returned, with its signature
        verified: nothing is signed here), if its version is above the stored one; acknowledges nothing. Returns True
        when it was stored, False when the store already holds that version or a newer one (nothing changed).

        Raises
        ------
        edgepath.state.backend.StoreUnreachable
            The store cannot be reached.
        """
        published, _ = await self.channel.publish(record, [])
        return published

    def _reject(self, reason: str, message: str) -> None:
        # Counted every time; logged at ERROR once in a row (a trainer retrying the same stored snapshot, DEBUG after)
        again = message == self._last_refusal
        self._last_refusal = message
        log.log(logging.DEBUG if again else logging.ERROR, "refusing model snapshot (%s): %s", reason, message)
        if self.metrics is not None:
            self.metrics.snapshots_rejected.labels(reason).inc()


class SnapshotFollower:
    """Keeps a replica's registry on the newest published snapshot (pub/sub + periodic check).

    Parameters
    ----------
    snapshots, registry:
        Where snapshots come from and where they are swapped in.
    poll_s:
        Fallback check period, s (a missed pub/sub message costs at most this much delay).
    """

    def __init__(self, snapshots: SnapshotStore, registry: ModelRegistry, poll_s: float = 1.0) -> None:
        self.snapshots = snapshots
        self.registry = registry
        self.poll_s = poll_s
        self.swaps = 0
        self.last_swap_delay_s: float | None = None
        self.store_resets = 0  # times the stored version was seen going back below this replica's
        self.restores = 0  # snapshots this follower put back into a store that had lost them
        self._rejected_version = -1
        self._store_seen = 0  # the highest version seen stored
        self._serving_record: SnapshotRecord | None = None  # the stored record of the snapshot last swapped in
        self._reset_warned = False  # warned about the store being below this replica (until it is not any more)
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="snapshot-follower")

    async def stop(self) -> None:
        # redis-py's PubSub.get_message can swallow a cancellation, so the loop also watches a flag.
        if self._task is None:
            return
        self._stopping.set()
        task, self._task = self._task, None
        done, _ = await asyncio.wait({task}, timeout=5.0)
        if not done:
            await stop_task(task)  # re-sends a cancellation that redis-py's wait_for may drop (edgepath.tasks)

    async def check(self) -> bool:
        """Load and swap in a newer snapshot if one is published. Returns True when it swapped.

        A stored version below this replica's, when the store held a higher one before, is a store that lost its data
        (versions only go up otherwise). Then this replica logs one WARNING naming both versions (again only after the
        store has caught up and gone back once more), keeps serving its model, and puts the snapshot it serves back
        into the store: the very record it loaded, as the trainer signed it (:meth:`SnapshotStore.restore`; nothing is
        signed here, and the publication's fencing check lets it in only above the stored version).

        Why restore rather than adopt or ignore: adopting the store's lower version would throw away what the model
        learned before the loss, and a trainer started afresh would number its models below the replicas'. Only
        ignoring it (the replicas' old behaviour, silent) left replicas serving one model while the store held
        another, until the store's new line overtook theirs and replaced everything learned before. Restored, the
        store holds the model the fleet serves again, and a trainer continues from it (a trainer that publishes a
        lower version after the restore conflicts and re-synchronises to it). The cost: what a trainer trained into a
        lower version before the restore is dropped from the model, and an operator cannot start a model over by
        deleting the model keys while replicas that serve the old one run. A replica serving a version it did not load
        from the store (the trainer role's own publications) has no record to restore: it only warns, and its trainer
        role republishes the model (:class:`~edgepath.training.leader.TrainerRole`).

        Raises
        ------
        edgepath.state.backend.StoreUnreachable
            The store cannot be reached.
        """
        latest = await self.snapshots.latest_version()
        current = self.registry.current
        if latest < current.version and latest < self._store_seen:
            await self._store_went_back(latest, current.version)
            return False
        self._store_seen = max(self._store_seen, latest)
        if latest >= current.version:
            self._reset_warned = False
        if latest <= current.version or latest == self._rejected_version:
            return False
        try:
            loaded = await self.snapshots.load()
        except SnapshotRejectedError as exc:
            self._rejected_version = latest  # refuse once per version; keep serving the current model
            if exc.reason in SIGNATURE_REASONS:  # once per version: at start, a replica started with the wrong key
                log.warning(
                    "this replica keeps serving model v%d: the store's model v%d does not verify with its "
                    "EDGEPATH_HMAC_KEY (key id %s); check this pod's EDGEPATH_HMAC_KEY against the trainer's (%s)",
                    current.version,
                    latest,
                    self.snapshots.key_id,
                    exc,
                )
            return False
        if loaded is None or loaded.version <= self.registry.current.version:
            return False
        # Keep this replica's exploration schedule (decayed ε/p, counters): the trainer's copy decides nothing.
        loaded.model.carry_exploration_from(self.registry.current.model)
        await self.registry.publish(loaded.model, loaded.version)
        self._serving_record = loaded.record
        self.swaps += 1
        published_at = loaded.meta.get("published_at")
        if isinstance(published_at, int | float):
            self.last_swap_delay_s = max(0.0, time.time() - published_at)
        log.info(
            "hot-swapped to model version %d (%.3f s after publication)", loaded.version, self.last_swap_delay_s or 0.0
        )
        return True

    async def _store_went_back(self, stored: int, serving: int) -> None:
        """The store holds ``stored``, below this replica's ``serving`` version and below what it held before: warn
        once, and restore the serving snapshot's record if this replica has it (see :meth:`check`)."""
        record = self._serving_record
        restorable = record is not None and record.version == serving
        if not self._reset_warned:
            self._reset_warned = True
            self.store_resets += 1
            log.warning(
                "the state store's model version went back to %d, below version %d served here (the store lost its "
                "data: a Redis restarted without persistence?); keeping version %d%s",
                stored,
                serving,
                serving,
                " and storing its snapshot again" if restorable else " until the store's version passes it",
            )
        if record is not None and restorable and await self.snapshots.restore(record):
            self.restores += 1
            self._store_seen = max(self._store_seen, record.version)
            log.info("model snapshot version %d stored again", record.version)

    async def _run(self) -> None:
        wake_s = min(self.poll_s, 0.5)  # how often the loop looks at the stop flag
        while not self._stopping.is_set():
            try:
                async with self.snapshots.channel.notifications() as published:
                    await self.check()  # catch up on anything published before (re)subscribing
                    checked = time.monotonic()
                    while not self._stopping.is_set():
                        notified = await published.wait(wake_s)
                        if notified or time.monotonic() - checked >= self.poll_s:
                            await self.check()  # on a notification, or every poll_s without one
                            checked = time.monotonic()
            except asyncio.CancelledError:
                raise
            except StoreUnreachable as exc:
                log.debug(
                    "snapshot follower: state store unreachable (%s); serving model v%d",
                    exc,
                    self.registry.current.version,
                )
            except Exception:
                log.exception("snapshot follower failed; serving model v%d", self.registry.current.version)
            # Pacing of the resubscribe loop while Redis is away (not a test wait).
            await wait_event(self._stopping, self.poll_s)
