"""The dispatch stats collector: families, labels, scrape-time reads, lane limits."""

from __future__ import annotations

import enum

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from aster_forge.metrics import PrometheusDispatchStatsCollector
from aster_forge.metrics._dispatch import lane_label
from aster_forge.tasks import ClaimedTaskOutcome, DispatchStatsRecorder


class Lane(enum.StrEnum):
    MEDIA = "media"
    MAINTENANCE = "maintenance"


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Parse the exposition back (so the text format itself is checked)."""
    text = generate_latest(registry).decode()
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def busy_recorder() -> DispatchStatsRecorder:
    recorder = DispatchStatsRecorder([Lane.MEDIA, Lane.MAINTENANCE])
    recorder.record_claim(
        Lane.MEDIA, claimed=3, rescued=1, latency_seconds=0.004, queue_lag_seconds=1.5
    )
    recorder.record_claim(
        Lane.MEDIA, claimed=0, rescued=0, latency_seconds=0.002, queue_lag_seconds=0.0
    )
    recorder.record_claim_error(Lane.MEDIA)
    for _ in range(3):
        recorder.record_started(Lane.MEDIA)
    recorder.record_outcome(Lane.MEDIA, ClaimedTaskOutcome.SUCCEEDED)
    recorder.record_outcome(Lane.MEDIA, ClaimedTaskOutcome.RETRIED)
    return recorder


def test_families_and_values_per_lane() -> None:
    registry = CollectorRegistry()
    PrometheusDispatchStatsCollector(busy_recorder(), registry)
    got = samples(registry)
    media = (("lane", "media"),)
    assert got[("dispatch_tasks_claimed_total", media)] == 3
    assert got[("dispatch_tasks_rescued_total", media)] == 1
    assert got[("dispatch_claim_calls_total", media)] == 3
    assert got[("dispatch_claim_errors_total", media)] == 1
    assert got[("dispatch_claim_latency_seconds_count", media)] == 2
    assert got[("dispatch_claim_latency_seconds_sum", media)] == pytest.approx(0.006)
    assert got[("dispatch_claim_latency_max_seconds", media)] == pytest.approx(0.004)
    assert got[("dispatch_queue_lag_seconds", media)] == 0.0
    assert got[("dispatch_in_flight", media)] == 1
    outcome = {
        label: got[("dispatch_task_outcomes_total", (("lane", "media"), ("outcome", label)))]
        for label in ("succeeded", "retried", "failed", "lease_lost", "released", "store_error")
    }
    assert outcome == {
        "succeeded": 1,
        "retried": 1,
        "failed": 0,
        "lease_lost": 0,
        "released": 0,
        "store_error": 0,
    }
    # A pre-registered idle lane reports zeros rather than disappearing.
    assert got[("dispatch_tasks_claimed_total", (("lane", "maintenance"),))] == 0


def test_values_are_read_at_scrape_time() -> None:
    recorder = DispatchStatsRecorder()
    registry = CollectorRegistry()
    PrometheusDispatchStatsCollector(recorder, registry)
    assert not any(name == "dispatch_in_flight" for name, _ in samples(registry))
    recorder.record_started("fallback")
    assert samples(registry)[("dispatch_in_flight", (("lane", "fallback"),))] == 1
    recorder.record_outcome("fallback", ClaimedTaskOutcome.LEASE_LOST)
    got = samples(registry)
    assert got[("dispatch_in_flight", (("lane", "fallback"),))] == 0
    assert (
        got[("dispatch_task_outcomes_total", (("lane", "fallback"), ("outcome", "lease_lost")))]
        == 1
    )


def test_lane_limits_from_a_mapping_or_callable() -> None:
    limits = {Lane.MEDIA: 2, "fallback": 4}
    registry = CollectorRegistry()
    PrometheusDispatchStatsCollector(DispatchStatsRecorder(), registry, lane_limits=lambda: limits)
    got = samples(registry)
    assert got[("dispatch_lane_limit", (("lane", "media"),))] == 2
    assert got[("dispatch_lane_limit", (("lane", "fallback"),))] == 4
    # Limited lanes report zero activity before their first claim.
    assert got[("dispatch_in_flight", (("lane", "fallback"),))] == 0
    limits[Lane.MEDIA] = 3  # the callable is re-read on each scrape
    assert samples(registry)[("dispatch_lane_limit", (("lane", "media"),))] == 3


def test_only_low_cardinality_labels() -> None:
    registry = CollectorRegistry()
    PrometheusDispatchStatsCollector(busy_recorder(), registry, lane_limits={"media": 2})
    labels = {name for (_, pairs) in samples(registry) for name, _ in pairs}
    assert labels <= {"lane", "outcome", "quantile"}


def test_registering_twice_on_one_registry_is_refused() -> None:
    registry = CollectorRegistry()
    PrometheusDispatchStatsCollector(DispatchStatsRecorder(), registry)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        PrometheusDispatchStatsCollector(DispatchStatsRecorder(), registry)


def test_a_source_without_lanes_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="lanes"):
        PrometheusDispatchStatsCollector(object())  # type: ignore[arg-type]


def test_lane_labels() -> None:
    assert lane_label(Lane.MEDIA) == "media"
    assert lane_label("x") == "x"
    assert lane_label(3) == "3"
