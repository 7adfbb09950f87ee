"""The agent's replay and the service's training loader map the same real rows to the same contexts.

Both use the one reader, edgepath_agent.mobilebandwidth (issue 14, item 5); the service's lab adds
InterfaceContext validation. This test keeps the two identical on the vendored real rows, so the
warm-started model sees at serving time exactly the contexts it was trained on (no train/serve skew),
checks that the reader's ranges are the service's validation ranges, and that neither side grew a
reader of its own again.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from edgepath.datasets import mobilebandwidth as service_loader
from edgepath.engines.features import context_features
from edgepath.types import InterfaceContext
from edgepath_agent import mobilebandwidth as reader
from edgepath_agent import replay

DATA = Path(__file__).resolve().parents[2] / "service" / "data" / "mobilebandwidth"


@pytest.mark.parametrize(
    ("name", "agent_fn", "service_fn"),
    [
        ("wifi4.csv", replay.wifi_interface, service_loader.wifi_interface),
        ("4G.csv", replay.cellular_interface, service_loader.cellular_interface),
    ],
)
def test_same_context_and_features_on_real_rows(name, agent_fn, service_fn) -> None:
    df = replay.load_tests(DATA / name).head(1500)
    mismatches = []
    for i, row in df.iterrows():
        from_agent = InterfaceContext.model_validate(agent_fn(row))
        from_service = service_fn({k: str(v) for k, v in row.items()})
        if from_agent != from_service or not np.array_equal(
            context_features([from_agent]), context_features([from_service])
        ):
            mismatches.append((i, from_agent, from_service))
    assert not mismatches, mismatches[:2]


def test_sentinel_rows_agree() -> None:
    df = replay.load_tests(DATA / "4G.csv").head(400)
    rows = df[df["cell_rssi"].str.contains("2147483647") & df["cell_bandwidth"].eq("2147483647")]
    assert len(rows) > 0
    row = rows.iloc[0]
    agent = replay.cellular_interface(row)
    assert "cell_rssi_dbm" not in agent and "channel_bandwidth_mhz" not in agent
    service = service_loader.cellular_interface({k: str(v) for k, v in row.items()})
    assert service.cell_rssi_dbm is None and service.channel_bandwidth_mhz is None


def test_the_readers_ranges_are_the_services_validation_ranges() -> None:
    for field, (lo, hi) in reader.RANGES.items():
        assert service_loader.bounds(field) == (lo, hi), field


def test_one_reader_serves_both_sides() -> None:
    assert service_loader.series_median is reader.series_median and replay.series_median is reader.series_median
    assert service_loader.earfcn_to_downlink_mhz is reader.earfcn_to_downlink_mhz
    for module in (replay, service_loader):
        source = Path(module.__file__).read_text()
        assert "statistics.median" not in source and "_EUTRA_DL" not in source, module.__name__
