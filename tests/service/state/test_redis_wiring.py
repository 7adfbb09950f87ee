"""Settings and composition for the shared store: URL schemes, the HMAC-key rule, ``serve --trainer``."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from edgepath.main import Service, build_store, hmac_key_bytes
from edgepath.settings import Settings
from edgepath.state.base import display_url
from edgepath.state.memory import MemoryStore
from edgepath.state.redis import RedisStore
from edgepath.training.snapshots import DEV_HMAC_KEY
from pydantic import ValidationError
from redis import Redis

from state.redis_helpers import RedisServer, wait_until

CONTEXT = {
    "device_id": "phone-1",
    "interfaces": [
        {"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -61.0, "link_speed_mbps": 144.0},
        {"name": "wwan0", "access_type": "LTE", "rsrp_dbm": -97.0, "rsrq_db": -11.0, "sinr_db": 8.0, "cqi": 9},
    ],
}


def test_empty_hmac_key_refused_outside_dev_with_a_shared_store(tmp_path: Path) -> None:
    prod = dict(  # what the security rules of profile prod ask for (issue 9), so only the key is missing
        profile="prod", auth_jwt_key="j" * 32, tls_cert_file=tmp_path / "c.pem", tls_key_file=tmp_path / "k.pem"
    )
    with pytest.raises(ValidationError, match="hmac_key"):
        Settings(store_url="redis://127.0.0.1:6379/0", **prod)
    assert Settings(store_url="redis://127.0.0.1:6379/0", hmac_key="s" * 32, **prod).hmac_key
    assert Settings(**prod).store_url == "memory://"  # the in-process store signs nothing
    dev = Settings(store_url="redis://127.0.0.1:6379/0")
    assert hmac_key_bytes(dev) == DEV_HMAC_KEY  # dev only, with a logged warning
    assert hmac_key_bytes(Settings(hmac_key="s3cret")) == b"s3cret"
    assert "s3cret" not in repr(Settings(hmac_key="s3cret"))  # a SecretStr: never logged


async def test_store_chosen_by_url_scheme() -> None:
    assert isinstance(build_store(Settings()), MemoryStore)
    store = build_store(Settings(store_url="redis://127.0.0.1:1/3"))
    assert isinstance(store, RedisStore)
    await store.close()
    with pytest.raises(ValueError, match="unknown store URL"):
        build_store(Settings(store_url="etcd://somewhere"))


def test_train_needs_a_shared_store() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "edgepath.cli", "train", "--store", "memory://"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ},
    )
    assert proc.returncode != 0
    assert "shared store" in proc.stderr


@pytest.mark.redis
def test_train_runs_where_the_deciders_outbox_cannot_be_made(
    redis_server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    """The chart's trainer reads the deciders' settings, ``EDGEPATH_OUTBOX_DIR`` included, on a read-only root
    without their outbox volume: ``edgepath train`` keeps no outbox, so it takes the trainer lock instead of dying
    on the directory it cannot make (here one below a regular file) and stops cleanly on SIGTERM."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    env = {**os.environ, "EDGEPATH_OUTBOX_DIR": str(blocker / "outbox"), "EDGEPATH_HMAC_KEY": "k" * 32}
    env["EDGEPATH_REDIS_NAMESPACE"] = namespace
    log_file = tmp_path / "train.log"
    with log_file.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "edgepath.cli", "train", "--store", redis_server.url],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        r = Redis.from_url(redis_server.url)
        wait_until(
            lambda: proc.poll() is not None or r.exists(f"{namespace}:trainer:lock"), 60, what="the trainer lock"
        )
        assert proc.poll() is None, log_file.read_text()[-2000:]
        assert not (blocker / "outbox").exists()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log_file.read_text()[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


@pytest.mark.redis
async def test_serve_with_trainer_flag_trains_and_publishes(redis_server: RedisServer, namespace: str) -> None:
    """``serve --store redis://… --trainer``: this replica competes for the lock and trains."""
    settings = Settings(
        grpc_port=0,
        http_port=0,
        store_url=redis_server.url,
        redis_namespace=namespace,
        trainer=True,
        batch_size=5,
        hmac_key="k" * 32,
    )
    svc = Service.build(settings)
    assert svc.trainer is None and svc.trainer_role is not None and svc.follower is not None
    task = asyncio.create_task(svc.run())
    await asyncio.wait_for(svc.wait_started(), 30)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{svc.http_port}", timeout=5) as http:
            for _ in range(5):
                rec = (await http.post("/v1/recommendations", json=CONTEXT)).json()
                ack = await http.post(
                    "/v1/outcomes",
                    json={"device_id": "phone-1", "decision_id": rec["decision_id"], "throughput_bps": 4e7},
                )
                assert ack.json()["accepted"]
            await svc.registry.wait_for_version(2, timeout_s=15)
            assert (await http.get("/readyz")).json()["model_version"] == 2
        assert svc.trainer_role.is_leader
        assert int(await svc.store.redis.get(f"{namespace}:model:version")) == 2  # type: ignore[attr-defined]
    finally:
        svc.stop()
        await asyncio.wait_for(task, 30)


@pytest.mark.redis
async def test_a_burst_past_the_redis_connection_bound_waits_instead_of_degrading(
    redis_server: RedisServer, namespace: str
) -> None:
    """More concurrent pool commands than ``redis_max_connections`` (here MEC 015 session reads, which do not go
    through the auto-pipeline) queue for a connection: redis-py's default pool raised "Too many connections" at
    its 101st, and the replica took that for an unreachable Redis (degraded mode)."""
    name = f"bound-{namespace}"  # every connection of the store's pools carries it, so they can be counted
    url = f"{redis_server.url}?client_name={name}"
    store = build_store(Settings(store_url=url, redis_namespace=namespace, redis_max_connections=4, hmac_key="k" * 32))
    assert isinstance(store, RedisStore)
    watcher = Redis.from_url(redis_server.url)
    try:
        results = await asyncio.gather(*(store.get_mts_session(f"s{i}") for i in range(200)))
        assert results == [None] * 200
        assert not store.degraded
        named = [c for c in watcher.client_list() if c.get("name") == name]
        assert 1 <= len(named) <= 4  # the bound held: at most 4 connections, reused
    finally:
        watcher.close()
        await store.close()


def test_redis_max_connections_is_bounded() -> None:
    with pytest.raises(ValidationError, match="redis_max_connections"):
        Settings(redis_max_connections=0)
    with pytest.raises(ValueError, match="max_connections"):
        RedisStore("redis://127.0.0.1:1/0", max_connections=0)


@pytest.mark.redis
async def test_serve_without_trainer_flag_does_not_train(redis_server: RedisServer, namespace: str) -> None:
    settings = Settings(grpc_port=0, http_port=0, store_url=redis_server.url, redis_namespace=namespace)
    svc = Service.build(settings)
    assert svc.trainer is None and svc.trainer_role is None  # a separate `edgepath train` does it
    await svc.store.close()


@pytest.mark.redis
async def test_a_decision_and_its_outcome_take_one_and_two_round_trips(
    redis_server: RedisServer, namespace: str
) -> None:
    """On Redis the plane writes the decision beside the adapters' reads: the record's SET and the MEC 015 sessions'
    HVALS go out in one auto-pipelined round trip, and the record is stored when the reply comes back. The outcome's
    cap token goes out with its decision's GET, and its claim carries its decision-log entry (one script)."""
    from edgepath import types as ep_types

    settings = Settings(grpc_port=0, http_port=0, store_url=redis_server.url, redis_namespace=namespace)
    svc = Service.build(settings)
    store = svc.store
    assert isinstance(store, RedisStore)
    principal = ep_types.Principal(device_id="phone-1")
    request = ep_types.RecommendRequest.model_validate(
        {
            "device_id": "phone-1",
            "interfaces": [
                {"name": "wlan0", "access_type": "WIFI", "wifi_rssi_dbm": -61.0},
                {"name": "wwan0", "access_type": "LTE", "rsrp_dbm": -97.0, "rsrq_db": -11.0},
            ],
        }
    )
    try:
        await svc.plane.recommend(principal, request)  # first sight of the device: its access types are written
        before = store._auto.pipelines
        rec = await svc.plane.recommend(principal, request)
        assert store._auto.pipelines - before == 1
        assert (await store.redis.get(store.decision_key(rec.decision_id))) is not None
        # its outcome: the decision's GET beside the outcome cap's script, then the claim with the decision-log
        # entry in the same script (two round trips; the cap's script was one more, the log's XADD another)
        before = store._auto.pipelines
        report = ep_types.OutcomeReport.model_validate(
            {"device_id": "phone-1", "decision_id": rec.decision_id, "throughput_bps": 3e7}
        )
        assert (await svc.plane.report_outcome(principal, report)).accepted
        assert store._auto.pipelines - before == 2
        logged, _ = await store.read_decision_log()
        assert [e.decision_id for e in logged] == [rec.decision_id]
    finally:
        await store.close()


def test_a_store_urls_password_never_reaches_a_log_line() -> None:
    """The chart composes ``redis://:$(REDIS_PASSWORD)@…`` from its Secret: what the service prints of a store URL
    hides the password and keeps the rest (``display_url``)."""
    assert display_url("redis://:s3cret@redis:6379/0") == "redis://:***@redis:6379/0"
    assert display_url("rediss://edge:p%40ss@redis.ns.svc:6380/2?ssl_cert_reqs=none") == (
        "rediss://edge:***@redis.ns.svc:6380/2?ssl_cert_reqs=none"
    )
    assert display_url("redis://redis:6379/0") == "redis://redis:6379/0"
    assert display_url("memory://") == "memory://"
    store = RedisStore("redis://:s3cret@127.0.0.1:1/0")  # what its degraded / recovered log lines name
    assert store.url == "redis://:***@127.0.0.1:1/0"


def _ended_task(exc: BaseException, name: str | None = None) -> asyncio.Task[None]:
    """A task (named ``name``) that ended by raising ``exc``, as a service's task the callbacks are given."""

    async def died() -> None:
        raise exc

    async def run() -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(died(), name=name)
        await asyncio.wait([task])
        return task

    return asyncio.run(run())


def test_a_trainer_role_that_ends_while_serving_is_logged_at_once(caplog: pytest.LogCaptureFixture) -> None:
    """``serve --trainer``: the role's task ending before ``stop()`` means this replica no longer trains; it is
    said at once at ERROR (an audit found training stopped with nothing logged until SIGTERM)."""
    svc = Service.build(Settings())
    task = _ended_task(RuntimeError("server:ResponseError"))
    with caplog.at_level(logging.ERROR, logger="edgepath.main"):
        svc._role_ended(task)
    assert [r.getMessage() for r in caplog.records] == [
        "trainer role ended while serving: this replica no longer trains (RuntimeError('server:ResponseError'))"
    ]
    caplog.clear()
    svc.stop()
    svc._role_ended(task)  # ended because the service stops: nothing to say
    assert caplog.records == []


def test_a_background_task_that_ends_while_serving_is_logged_at_once(caplog: pytest.LogCaptureFixture) -> None:
    """``serve``'s background loops (the loop-lag monitor of admission, the gRPC health watcher, the fleet's
    exploration sync) end only when cancelled at shutdown; one that ends before says at once what no longer
    happens, with its traceback (asyncio would say it at garbage collection, if ever)."""
    svc = Service.build(Settings())
    task = _ended_task(RuntimeError("clock read failed"), name="loop-lag")
    with caplog.at_level(logging.ERROR, logger="edgepath.main"):
        svc._background_ended(task)
    assert [r.getMessage() for r in caplog.records] == [
        "background task loop-lag ended while serving: admission no longer measures the event loop's lag "
        "(no shedding on it) (RuntimeError('clock read failed'))"
    ]
    assert caplog.records[0].exc_info is not None
    caplog.clear()
    svc.stop()
    svc._background_ended(task)  # ended because the service stops: nothing to say
    assert caplog.records == []
