"""A framework-agnostic conformance suite for :class:`~aster_forge.tasks.ScheduledTaskStore`."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Awaitable
from datetime import UTC, datetime, timedelta
from typing import ClassVar

from ..tasks import CronSchedule, IntervalSchedule, ScheduledTaskOutcome, ScheduledTaskStore
from ..tasks._internal import ScheduledTaskClaim, ScheduledTaskRunStatus
from ..tasks.errors import ScheduledTaskValueError
from ._conformance import StoreConformance

__all__ = ["ScheduledTaskStoreConformance"]

_HOUR = timedelta(hours=1)


class ScheduledTaskStoreConformance(StoreConformance[ScheduledTaskStore]):
    """Checks every :class:`~aster_forge.tasks.ScheduledTaskStore` must pass.

    Each ``check_*`` coroutine raises ``AssertionError`` on a violation. Parametrize a
    test over :attr:`CHECKS` and call :meth:`run`; each check uses a fresh namespace.

    Args:
        make_store: Returns a store instance; called several times where a check
            simulates several processes (instances must share state).
        advance: Moves the stores' time forward (``ManualClock.advance`` or ``asyncio.sleep``).
        short_ttl: The claim TTL / interval used by expiry checks.
        expiry_slack: Extra time advanced past ``short_ttl`` before expecting expiry.
        contenders: How many concurrent claimers the race checks use.
    """

    CHECKS: ClassVar[tuple[str, ...]] = (
        "check_ensure_is_idempotent",
        "check_ensure_is_concurrency_safe",
        "check_ensure_updates_interval_only",
        "check_initial_delay_defers_first_firing",
        "check_claim_due_firing",
        "check_claimed_firing_is_exclusive",
        "check_unknown_task_is_not_claimable",
        "check_renew_extends_claim",
        "check_expired_uncontested_claim_is_renewable",
        "check_reclaimed_firing_cannot_be_renewed_or_completed",
        "check_complete_advances_and_releases",
        "check_complete_with_explicit_next_run",
        "check_complete_is_ownership_checked",
        "check_overflowing_durations_saturate",
        "check_tricky_values_round_trip",
        "check_invalid_input_is_rejected",
        "check_concurrent_claim_has_one_winner",
        "check_cron_schedule_round_trips",
        "check_changed_schedule_is_stored",
        "check_cron_completion_defaults_to_the_next_instant",
    )

    @staticmethod
    def _ns() -> str:
        return f"conformance-{uuid.uuid4().hex}"

    async def _due_claim(
        self, store: ScheduledTaskStore, ttl: timedelta = _HOUR
    ) -> ScheduledTaskClaim:
        ns = self._ns()
        await store.ensure_scheduled_task(ns, "job", IntervalSchedule(every=_HOUR))
        claim = await store.claim_scheduled_task(ns, "job", "owner-a", ttl)
        assert claim is not None, "a due, unclaimed firing must be claimable"
        return claim

    async def check_ensure_is_idempotent(self) -> None:
        """Ensuring twice returns the same row, due immediately, unclaimed."""
        store = self._make_store()
        ns = self._ns()
        first = await store.ensure_scheduled_task(
            ns, "job", IntervalSchedule(every=timedelta(minutes=5))
        )
        second = await store.ensure_scheduled_task(
            ns, "job", IntervalSchedule(every=timedelta(minutes=5))
        )
        assert first.task_id == second.task_id
        assert first.next_run_at == second.next_run_at
        assert (first.namespace, first.name, first.interval) == (ns, "job", timedelta(minutes=5))
        assert first.claimed_by is None and first.run_count == 0
        assert first.next_run_at.utcoffset() == timedelta(0), "times must be aware UTC"
        assert [r.name for r in await store.list_scheduled_tasks(ns)] == ["job"]
        fetched = await store.get_scheduled_task(ns, "job")
        assert fetched is not None and fetched.task_id == first.task_id
        assert await store.get_scheduled_task(ns, "missing") is None

    async def check_ensure_is_concurrency_safe(self) -> None:
        """Concurrent ensures from many instances create exactly one row."""
        ns = self._ns()
        stores = [self._make_store() for _ in range(self.contenders)]
        rows = await asyncio.gather(
            *(
                store.ensure_scheduled_task(ns, "job", IntervalSchedule(every=_HOUR))
                for store in stores
            )
        )
        assert len({row.task_id for row in rows}) == 1, "ensure created duplicate rows"
        assert len(await stores[0].list_scheduled_tasks(ns)) == 1

    async def check_ensure_updates_interval_only(self) -> None:
        """Re-ensuring with a new interval keeps the schedule and claim, updates the interval."""
        store = self._make_store()
        claim = await self._due_claim(store)
        row = await store.ensure_scheduled_task(
            claim.namespace, "job", IntervalSchedule(every=timedelta(minutes=7))
        )
        assert row.interval == timedelta(minutes=7)
        assert row.claimed_by == "owner-a" and row.next_run_at == claim.scheduled_at
        assert await store.complete_scheduled_task(claim, ScheduledTaskOutcome.succeeded())
        after = await store.get_scheduled_task(claim.namespace, "job")
        assert after is not None and after.last_run_finished_at is not None
        assert after.next_run_at == after.last_run_finished_at + timedelta(minutes=7)

    async def check_initial_delay_defers_first_firing(self) -> None:
        """With an initial delay the first firing is due only after the delay."""
        store = self._make_store()
        ns = self._ns()
        await store.ensure_scheduled_task(
            ns, "job", IntervalSchedule(every=_HOUR, initial_delay=self.short_ttl)
        )
        assert await store.claim_scheduled_task(ns, "job", "owner-a", _HOUR) is None
        await self._expire()
        assert await store.claim_scheduled_task(ns, "job", "owner-a", _HOUR) is not None

    async def check_claim_due_firing(self) -> None:
        """The claim carries the owner, the claim timestamp and the firing time."""
        store = self._make_store()
        ns = self._ns()
        row = await store.ensure_scheduled_task(ns, "job", IntervalSchedule(every=_HOUR))
        claim = await store.claim_scheduled_task(ns, "job", "owner-a", timedelta(minutes=2))
        assert claim is not None
        assert (claim.task_id, claim.namespace, claim.name, claim.owner_id) == (
            row.task_id,
            ns,
            "job",
            "owner-a",
        )
        assert claim.scheduled_at == row.next_run_at
        assert claim.claim_expires_at == claim.claimed_at + timedelta(minutes=2)
        stored = await store.get_scheduled_task(ns, "job")
        assert stored is not None and stored.claimed_by == "owner-a"
        assert stored.last_claimed_at == claim.claimed_at
        assert stored.claim_expires_at == claim.claim_expires_at

    async def check_claimed_firing_is_exclusive(self) -> None:
        """A claimed, unexpired firing cannot be claimed again (by anyone)."""
        first, second = self._make_store(), self._make_store()
        claim = await self._due_claim(first)
        assert await second.claim_scheduled_task(claim.namespace, "job", "owner-b", _HOUR) is None
        assert await first.claim_scheduled_task(claim.namespace, "job", "owner-a", _HOUR) is None

    async def check_unknown_task_is_not_claimable(self) -> None:
        """Claiming a task that was never ensured returns ``None``."""
        store = self._make_store()
        assert await store.claim_scheduled_task(self._ns(), "job", "owner-a", _HOUR) is None

    async def check_renew_extends_claim(self) -> None:
        """Renewal by the owner moves the claim expiry forward and changes nothing else."""
        store = self._make_store()
        claim = await self._due_claim(store, timedelta(minutes=1))
        before = await store.get_scheduled_task(claim.namespace, "job")
        assert await store.renew_scheduled_task_claim(claim, timedelta(hours=2))
        after = await store.get_scheduled_task(claim.namespace, "job")
        assert before is not None and after is not None
        assert after.claim_expires_at is not None and before.claim_expires_at is not None
        assert after.claim_expires_at > before.claim_expires_at
        assert (after.claimed_by, after.last_claimed_at, after.next_run_at) == (
            before.claimed_by,
            before.last_claimed_at,
            before.next_run_at,
        )

    async def check_expired_uncontested_claim_is_renewable(self) -> None:
        """An expired claim nobody else took is renewed by its owner (no duplicate run)."""
        store = self._make_store()
        claim = await self._due_claim(store, self.short_ttl)
        await self._expire()
        assert await store.renew_scheduled_task_claim(claim, _HOUR)
        assert await store.claim_scheduled_task(claim.namespace, "job", "owner-b", _HOUR) is None

    async def check_reclaimed_firing_cannot_be_renewed_or_completed(self) -> None:
        """Once another owner (or a newer claim) took the firing, the old claim is dead."""
        first, second = self._make_store(), self._make_store()
        claim = await self._due_claim(first, self.short_ttl)
        await self._expire()
        taken = await second.claim_scheduled_task(claim.namespace, "job", "owner-b", _HOUR)
        assert taken is not None, "an expired claim must be claimable"
        assert taken.scheduled_at == claim.scheduled_at, "it is the same firing"
        assert not await first.renew_scheduled_task_claim(claim, _HOUR)
        assert not await first.complete_scheduled_task(claim, ScheduledTaskOutcome.succeeded())
        row = await first.get_scheduled_task(claim.namespace, "job")
        assert row is not None and row.claimed_by == "owner-b" and row.run_count == 0
        # Same owner, newer claim: the older claim's timestamp no longer matches.
        await self._expire()
        store = self._make_store()
        ns = self._ns()
        await store.ensure_scheduled_task(ns, "job", IntervalSchedule(every=_HOUR))
        old = await store.claim_scheduled_task(ns, "job", "owner-a", self.short_ttl)
        assert old is not None
        await self._expire()
        new = await store.claim_scheduled_task(ns, "job", "owner-a", _HOUR)
        assert new is not None and new.claimed_at > old.claimed_at
        assert not await store.renew_scheduled_task_claim(old, _HOUR)
        assert await store.renew_scheduled_task_claim(new, _HOUR)

    async def check_complete_advances_and_releases(self) -> None:
        """Completion records the outcome, releases the claim, sets next_run = now + interval."""
        store = self._make_store()
        claim = await self._due_claim(store)
        outcome = ScheduledTaskOutcome.failed("boom: 'quoted'", timedelta(milliseconds=1234))
        assert await store.complete_scheduled_task(claim, outcome)
        row = await store.get_scheduled_task(claim.namespace, "job")
        assert row is not None
        assert row.claimed_by is None and row.claim_expires_at is None
        assert row.last_claimed_at == claim.claimed_at
        assert row.last_run_status is ScheduledTaskRunStatus.FAILED
        assert row.last_run_error == "boom: 'quoted'"
        assert row.last_run_duration == timedelta(milliseconds=1234)
        assert row.run_count == 1 and row.last_run_finished_at is not None
        assert row.next_run_at == row.last_run_finished_at + _HOUR
        assert row.next_run_at > claim.scheduled_at
        assert await store.claim_scheduled_task(claim.namespace, "job", "owner-b", _HOUR) is None
        assert not await store.renew_scheduled_task_claim(claim, _HOUR)
        assert not await store.complete_scheduled_task(claim, ScheduledTaskOutcome.succeeded())

    async def check_complete_with_explicit_next_run(self) -> None:
        """An explicit next_run_at is stored as given; the firing is due again at that time."""
        store = self._make_store()
        claim = await self._due_claim(store)
        nxt = datetime(2001, 2, 3, 4, 5, 6, 789012, tzinfo=UTC)
        assert await store.complete_scheduled_task(
            claim, ScheduledTaskOutcome.succeeded(), next_run_at=nxt
        )
        row = await store.get_scheduled_task(claim.namespace, "job")
        assert row is not None and row.next_run_at == nxt
        assert row.last_run_status is ScheduledTaskRunStatus.SUCCEEDED
        again = await store.claim_scheduled_task(claim.namespace, "job", "owner-b", _HOUR)
        assert again is not None and again.scheduled_at == nxt

    async def check_complete_is_ownership_checked(self) -> None:
        """A forged claim (other owner, other timestamp, other id) completes nothing."""
        store = self._make_store()
        claim = await self._due_claim(store)
        forged = [
            _replace(claim, owner_id="owner-b"),
            _replace(claim, claimed_at=claim.claimed_at + timedelta(microseconds=1)),
            _replace(claim, task_id=claim.task_id + 10_000_000),
        ]
        for fake in forged:
            assert not await store.complete_scheduled_task(fake, ScheduledTaskOutcome.succeeded())
            assert not await store.renew_scheduled_task_claim(fake, _HOUR)
        row = await store.get_scheduled_task(claim.namespace, "job")
        assert row is not None and row.claimed_by == "owner-a" and row.run_count == 0

    async def check_overflowing_durations_saturate(self) -> None:
        """Huge claim TTLs and intervals saturate to "never" instead of raising."""
        store = self._make_store()
        ns = self._ns()
        await store.ensure_scheduled_task(ns, "job", IntervalSchedule(every=timedelta.max))
        claim = await store.claim_scheduled_task(ns, "job", "owner-a", timedelta.max)
        assert claim is not None and claim.claim_expires_at.year == 9999
        assert await store.renew_scheduled_task_claim(claim, timedelta.max)
        assert await store.complete_scheduled_task(claim, ScheduledTaskOutcome.succeeded())
        row = await store.get_scheduled_task(ns, "job")
        assert row is not None and row.next_run_at.year == 9999
        assert await store.claim_scheduled_task(ns, "job", "owner-b", _HOUR) is None

    async def check_tricky_values_round_trip(self) -> None:
        """Quotes, SQL, unicode, 255-character names and a 10 KB error text round-trip."""
        store = self._make_store()
        ns = f"ns 'quoted' \"dq\" ; DROP TABLE scheduled_tasks; -- 名前 🚀 {uuid.uuid4().hex}"
        names = ["job 'x'", "任务/タスク ✓", "%_\\ wildcard", "🚀" * 255, "Job", "job"]
        for name in names:
            await store.ensure_scheduled_task(ns, name, IntervalSchedule(every=_HOUR))
        listed = [row.name for row in await store.list_scheduled_tasks(ns)]
        assert sorted(listed) == sorted(names), "names must be stored verbatim and case-sensitive"
        claim = await store.claim_scheduled_task(ns, "🚀" * 255, "owner 'ü' 🚀", _HOUR)
        assert claim is not None and claim.owner_id == "owner 'ü' 🚀"
        error = ("错误 'quote' \"dq\" \\ \t tab \n newline 🚀 " * 400)[:10_240]
        assert await store.complete_scheduled_task(claim, ScheduledTaskOutcome.failed(error))
        row = await store.get_scheduled_task(ns, "🚀" * 255)
        assert row is not None and row.last_run_error == error

    async def check_invalid_input_is_rejected(self) -> None:
        """Bad names, owners, durations and outcomes raise ScheduledTaskValueError."""
        store = self._make_store()
        ns = self._ns()
        bad_ids = ["", "  ", "trailing ", "x" * 10_240, "nul\x00", "tab\tname", "c1\x85"]
        for bad in bad_ids:
            await _expect_value_error(
                store.ensure_scheduled_task(bad, "job", IntervalSchedule(every=_HOUR)),
                repr(bad[:20]),
            )
            await _expect_value_error(
                store.ensure_scheduled_task(ns, bad, IntervalSchedule(every=_HOUR)), repr(bad[:20])
            )
            await _expect_value_error(
                store.claim_scheduled_task(ns, "job", bad, _HOUR), repr(bad[:20])
            )
        for duration in (timedelta(0), timedelta(seconds=-5)):
            # A bare duration is not a schedule: refused before anything is written.
            await _expect_value_error(
                store.ensure_scheduled_task(ns, "job", duration),  # type: ignore[arg-type]
                str(duration),
            )
            await _expect_value_error(
                store.claim_scheduled_task(ns, "job", "o", duration), str(duration)
            )
        claim = await self._due_claim(store)
        await _expect_value_error(
            store.renew_scheduled_task_claim(claim, timedelta(0)), "zero claim_ttl"
        )
        await _expect_value_error(
            store.complete_scheduled_task(
                claim,
                ScheduledTaskOutcome.succeeded(),
                next_run_at=datetime(2030, 1, 1),  # naive on purpose
            ),
            "naive next_run_at",
        )
        try:
            ScheduledTaskOutcome.failed("nul\x00byte")
        except ScheduledTaskValueError:
            pass
        else:
            raise AssertionError("a NUL in the error text must be rejected")
        row = await store.get_scheduled_task(claim.namespace, "job")
        assert row is not None and row.claimed_by == "owner-a", "rejected calls changed the row"

    async def check_concurrent_claim_has_one_winner(self) -> None:
        """Many instances racing for one due firing: exactly one claims it."""
        ns = self._ns()
        stores = [self._make_store() for _ in range(self.contenders)]
        await stores[0].ensure_scheduled_task(ns, "job", IntervalSchedule(every=_HOUR))
        results = await asyncio.gather(
            *(
                store.claim_scheduled_task(ns, "job", f"owner-{index}", _HOUR)
                for index, store in enumerate(stores)
            )
        )
        winners = [claim for claim in results if claim is not None]
        assert len(winners) == 1, f"expected one winner, got {len(winners)}"

    async def check_cron_schedule_round_trips(self) -> None:
        """A cron row stores its expression and timezone; its first firing is the next instant."""
        store = self._make_store()
        ns = self._ns()
        paris = CronSchedule("*/5 * * * *", timezone="Europe/Paris")
        row = await store.ensure_scheduled_task(ns, "job", paris)
        assert (row.cron_expression, row.cron_timezone) == ("*/5 * * * *", "Europe/Paris")
        assert row.interval == timedelta(0) and row.schedule == paris
        assert row.schedule_text == "*/5 * * * * (Europe/Paris)"
        assert row.next_run_at == paris.next_after(row.created_at), "first firing: next instant"
        again = await store.ensure_scheduled_task(ns, "job", paris)
        assert (again.task_id, again.next_run_at, again.updated_at) == (
            row.task_id,
            row.next_run_at,
            row.updated_at,
        ), "ensuring an unchanged cron schedule changes nothing"
        assert await store.claim_scheduled_task(ns, "job", "owner-a", _HOUR) is None, "not due"
        listed = await store.list_scheduled_tasks(ns)
        assert [r.schedule for r in listed] == [paris]
        interval = await store.ensure_scheduled_task(ns, "every", IntervalSchedule(every=_HOUR))
        assert interval.cron_expression is None and interval.cron_timezone is None
        assert interval.schedule == IntervalSchedule(every=_HOUR)
        assert interval.schedule_text == "every 1h"

    async def check_changed_schedule_is_stored(self) -> None:
        """Ensure stores a changed schedule; a new cron schedule moves an unclaimed firing."""
        store = self._make_store()
        ns = self._ns()
        first = await store.ensure_scheduled_task(ns, "job", IntervalSchedule(every=_HOUR))
        daily = CronSchedule("0 3 * * *")
        row = await store.ensure_scheduled_task(ns, "job", daily)
        assert row.task_id == first.task_id and row.cron_expression == "0 3 * * *"
        assert row.next_run_at == daily.next_after(row.updated_at), "moved to the cron instant"
        assert row.updated_at >= first.updated_at
        often = CronSchedule("*/5 * * * *", timezone="America/New_York")
        row = await store.ensure_scheduled_task(ns, "job", often)
        assert (row.cron_expression, row.cron_timezone) == ("*/5 * * * *", "America/New_York")
        assert row.next_run_at == often.next_after(row.updated_at)
        back = await store.ensure_scheduled_task(
            ns, "job", IntervalSchedule(every=timedelta(minutes=7))
        )
        assert back.cron_expression is None and back.cron_timezone is None
        assert back.interval == timedelta(minutes=7)
        assert back.next_run_at == row.next_run_at, "an interval change keeps the pending firing"
        # A claimed row keeps its firing and its claim whatever the new schedule.
        claim = await self._due_claim(store)
        held = await store.ensure_scheduled_task(claim.namespace, "job", daily)
        assert held.cron_expression == "0 3 * * *"
        assert held.claimed_by == "owner-a" and held.next_run_at == claim.scheduled_at

    async def check_cron_completion_defaults_to_the_next_instant(self) -> None:
        """Completing a cron row without an explicit next firing sets the next cron instant."""
        store = self._make_store()
        claim = await self._due_claim(store)
        daily = CronSchedule("30 2 * * *", timezone="Europe/Paris")
        await store.ensure_scheduled_task(claim.namespace, "job", daily)
        assert await store.complete_scheduled_task(claim, ScheduledTaskOutcome.succeeded())
        row = await store.get_scheduled_task(claim.namespace, "job")
        assert row is not None and row.last_run_finished_at is not None
        assert row.next_run_at == daily.next_after(row.last_run_finished_at)
        assert row.run_count == 1 and row.claimed_by is None


def _replace(
    claim: ScheduledTaskClaim,
    *,
    owner_id: str | None = None,
    claimed_at: datetime | None = None,
    task_id: int | None = None,
) -> ScheduledTaskClaim:
    return dataclasses.replace(
        claim,
        owner_id=claim.owner_id if owner_id is None else owner_id,
        claimed_at=claim.claimed_at if claimed_at is None else claimed_at,
        task_id=claim.task_id if task_id is None else task_id,
    )


async def _expect_value_error(call: Awaitable[object], what: str) -> None:
    try:
        await call
    except ScheduledTaskValueError:
        return
    raise AssertionError(f"invalid input {what} was not rejected with ScheduledTaskValueError")
