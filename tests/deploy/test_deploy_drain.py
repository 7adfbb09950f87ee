"""Issue 17, item 3 (chart side): the pod's shutdown budget matches the service's drain.

``helm template`` of the chart (pinned helm, as the other chart tests): the replica's preStop sleep,
the EDGEPATH_DRAIN_* settings and terminationGracePeriodSeconds agree, the durable outbox is mounted,
and a grace period shorter than the drain is refused with the reason.
"""

from __future__ import annotations

from typing import Any

import pytest
from deploy_helpers import RenderError, by_kind, one

pytestmark = pytest.mark.timeout(600)  # the first render builds helm (scripts/install-helm.sh)


def _replica(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return next(d for d in by_kind(objects, "Deployment") if not d["metadata"]["name"].endswith("trainer"))


def test_pre_stop_and_grace_period_cover_the_drain(render: Any) -> None:
    objects = render("defaults")
    pod = _replica(objects)["spec"]["template"]["spec"]
    container = pod["containers"][0]
    sleep_cmd = container["lifecycle"]["preStop"]["exec"]["command"]
    pre_stop_s = float(sleep_cmd[-1].split("sleep(")[1].rstrip(")"))
    data = one(objects, "ConfigMap", "-settings")["data"]
    drain_s = (
        pre_stop_s
        + float(data["EDGEPATH_DRAIN_READINESS_DELAY_S"])
        + float(data["EDGEPATH_DRAIN_GRACE_S"])
        + float(data["EDGEPATH_DRAIN_FLUSH_TIMEOUT_S"])
    )
    assert pod["terminationGracePeriodSeconds"] >= drain_s
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["outbox"] == data["EDGEPATH_OUTBOX_DIR"]
    assert any(v["name"] == "outbox" and "emptyDir" in v for v in pod["volumes"])


def test_a_grace_period_shorter_than_the_drain_is_refused(render: Any) -> None:
    with pytest.raises(RenderError, match="shorter than the drain"):
        render("defaults", "--set", "terminationGracePeriodSeconds=8")
