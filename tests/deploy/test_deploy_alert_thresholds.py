"""Each share-based alert of the chart's PrometheusRule has its own value (charts/edgepath/values.yaml,
``prometheusRule``): EdgePathOutcomesRefused fires past ``outcomesRefusedShare`` of the outcome reports, not past
EdgePathRateLimited's ``rateLimitedShare`` (the promtool unit tests, tests/deploy/promtool/, run the defaults)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from deploy_helpers import RenderError, one

MONITORING = "monitoring-networkpolicy-values.yaml"


def thresholds(objects: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Each alert's ``> <number>`` comparisons, in order."""
    rules = one(objects, "PrometheusRule")["spec"]["groups"][0]["rules"]
    return {r["alert"]: re.findall(r">\s*([0-9.]+)", r["expr"]) for r in rules}


def test_outcomes_refused_has_its_own_share(render: Any) -> None:
    defaults = thresholds(render(MONITORING))
    assert defaults["EdgePathOutcomesRefused"] == ["0.1"] and defaults["EdgePathRateLimited"] == ["0.1", "0.1"]
    own = thresholds(render(MONITORING, "--set-json", "prometheusRule.outcomesRefusedShare=0.25"))
    assert own["EdgePathOutcomesRefused"] == ["0.25"]
    assert own["EdgePathRateLimited"] == ["0.1", "0.1"]  # its share is rateLimitedShare's alone
    other = thresholds(render(MONITORING, "--set-json", "prometheusRule.rateLimitedShare=0.3"))
    assert other["EdgePathOutcomesRefused"] == ["0.1"] and other["EdgePathRateLimited"] == ["0.3", "0.3"]


@pytest.mark.parametrize("share", ["1.5", "-0.1"])
def test_the_schema_keeps_outcomes_refused_share_a_share(render: Any, share: str) -> None:
    with pytest.raises(RenderError, match="outcomesRefusedShare"):
        render(MONITORING, "--set-json", f"prometheusRule.outcomesRefusedShare={share}")
