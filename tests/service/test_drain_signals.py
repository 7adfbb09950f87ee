"""A second SIGTERM while the service drains reaches :meth:`Service.stop`, not the default action (death).

uvicorn's ``Server.serve`` captures SIGINT/SIGTERM for its run and restores the previous handlers when it returns,
early in the drain; the service's ``install_signal_handlers = lambda: None`` no longer switched that off (uvicorn
≥ 0.29 has ``capture_signals`` instead), so a SIGTERM during the rest of the drain (trainer, outbox flush, store
close) killed the process. The service runs in a child process of its own: signals go to that process only.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

#: A service in the main thread (signals are delivered there) whose outbox flush, drain step 4 (after the HTTP
#: server has stopped), sends the process a second SIGTERM.
SCRIPT = textwrap.dedent(
    """
    import asyncio, os, signal
    from edgepath.main import Service
    from edgepath.settings import Settings

    async def main() -> None:
        settings = Settings(grpc_port=0, http_port=0, drain_grace_s=0.1, drain_readiness_delay_s=0)
        service = Service.build(settings)
        flush = service.backend.flush_outbox

        async def flush_after_a_second_sigterm(timeout_s: float) -> int:
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.sleep(0)  # one loop turn: the signal's handler runs
            return await flush(timeout_s)

        service.backend.flush_outbox = flush_after_a_second_sigterm
        task = asyncio.create_task(service.run())
        await service.wait_started()
        os.kill(os.getpid(), signal.SIGTERM)
        await task
        print("drained")

    asyncio.run(main())
    """
)


def test_a_second_sigterm_during_the_drain_does_not_kill_the_process() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGEPATH_")}
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, env=env, check=False
    )
    assert out.returncode == 0, (out.returncode, out.stderr)
    assert out.stdout.splitlines() == ["drained"], out.stdout
