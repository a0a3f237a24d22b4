"""The mutants ``make mutants`` applies: each breaks one reliability property on purpose.

A mutant is a list of exact edits (file, original snippet, replacement). The runner
refuses a mutant whose snippet is not found exactly once, so a refactor that moves the
code makes ``make mutants`` fail loudly instead of testing nothing. Each mutant names the
tests that should kill it: the short chaos scenarios first (so the report says when
chaos evidence, not only a unit check, catches it), then the conformance suites.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CONTROL", "MUTANTS", "Edit", "Mutant"]


@dataclass(frozen=True, slots=True)
class Edit:
    """Replace ``original`` (found exactly once in ``path``) with ``replacement``."""

    path: str
    original: str
    replacement: str


@dataclass(frozen=True, slots=True)
class Mutant:
    """One deliberate defect and the tests expected to catch it.

    Attributes:
        name: A short identifier (``fence-success``).
        breaks: The property it breaks, in words.
        edits: The edits that make the mutant.
        tests: Pytest node ids or files, run in this order with ``-x``.
        expect_killed: ``False`` only for the control mutant (a no-op that must survive).
    """

    name: str
    breaks: str
    edits: tuple[Edit, ...]
    tests: tuple[str, ...]
    expect_killed: bool = True


TASKS = "src/aster_forge/db/_tasks.py"
TASKS_PG = "src/aster_forge/db/_postgres.py"
TASK_DEPS = "src/aster_forge/db/_task_deps.py"
WORKFLOW_TESTS = "tests/db/test_workflows.py"
TASKS_SQLITE = "src/aster_forge/db/_sqlite.py"
SQLITE_SQL = "src/aster_forge/db/sql/sqlite.sql"
PG_SQL = "src/aster_forge/db/sql/postgresql.sql"
PG_RUN = "src/aster_forge/db/_postgres.py"
EFFECTS = "src/aster_forge/db/_tasks_effects.py"
SLOT_TESTS = "tests/tasks/test_slots.py"
TRANSACTION_TESTS = "tests/forge/test_task_transaction.py"
STALE_BATCHED = "tests/chaos/test_stale_writers.py::test_stale_writers_batched"
STALE_SINGLE = "tests/chaos/test_stale_writers.py::test_stale_writers_one_statement_per_write"
TAKEN_OVER = (
    "tests/chaos/test_stale_writers.py::"
    "test_a_lease_taken_over_behind_a_live_workers_back_is_reported_lost"
)
CRASH = "tests/chaos/test_worker_crashes.py::test_worker_crashes_short"
DB_FAULTS = "tests/chaos/test_db_faults.py::test_database_faults_short"
SHUTDOWN_MID_RELEASE = (
    "tests/chaos/test_shutdown.py::"
    "test_a_stop_phase_timing_out_mid_release_still_releases_every_task"
)
CHURN = "tests/chaos/test_leader_churn.py::test_leader_churn_short"
TASK_CONFORMANCE = "tests/db/test_task_store.py"
WAITING = "tests/db/test_waiting_hint.py"
TASK_BATCHED = "tests/db/test_task_store_batched.py"
SUCCEED_AND_CLAIM = "tests/db/test_succeed_and_claim.py"
DISPATCH_TESTS = "tests/tasks/test_dispatch.py"
LEASE_CONFORMANCE = "tests/db/test_lease_conformance.py"
SCHEDULED_CONFORMANCE = "tests/db/test_scheduled_conformance.py"

ENQUEUE = "src/aster_forge/db/_tasks_enqueue.py"
DEDUPE_WINDOW = "src/aster_forge/db/_tasks_dedupe_window.py"
DEDUPE_WINDOW_RACE = "tests/db/test_dedupe_window_processes.py"
ENQUEUE_BOUNDARY = "tests/db/test_enqueue_boundary.py"
COALESCER = "src/aster_forge/db/_enqueue_coalescer.py"
COALESCER_UNIT = "tests/db/test_enqueue_coalescer.py"
COALESCING = "tests/db/test_enqueue_coalescing.py"
ENQUEUE_FAULTS = "tests/chaos/test_enqueue_faults.py::test_enqueue_faults_short"
EXECUTION = "src/aster_forge/tasks/_execution.py"
HEARTBEAT = "src/aster_forge/tasks/_heartbeat.py"
WORKER = "src/aster_forge/tasks/_worker.py"
ENGINE = "src/aster_forge/db/_engine.py"
DRIVER_HOLD = "src/aster_forge/db/_driver_hold.py"
SYNC_BRIDGE = "src/aster_forge/forge/_sync_bridge.py"
ENGINE_TESTS = "tests/db/test_engine.py"
DRIVER_TESTS = "tests/db/test_enqueue_driver.py"
SYNC_TESTS = "tests/forge/test_sync_enqueue.py"
BACKEND = "src/aster_forge/forge/_backend.py"
NOTIFY_LIMITER = "src/aster_forge/db/_notify_limiter.py"
NOTIFY_LIMITER_TESTS = "tests/db/test_notify_limiter.py"

# The one place the heartbeat engine handles a renewal the store refused (fence failed).
_REFUSED_RENEWAL = "        if renewed is None:\n            guard.mark_lost()\n"

_SINGLE_FENCE = "sa.update(t).where(self._sql.fence(lease)).values(**resolved)"


def _unfenced_single(operation: str) -> Edit:
    """The one ``_fenced`` write named ``operation`` loses its token predicate."""
    return Edit(
        TASKS,
        _SINGLE_FENCE,
        "sa.update(t).where(\n"
        f"                    self._sql.fence(lease) if operation != {operation!r}\n"
        "                    else sa.and_(t.c.id == lease.task_id, t.c.status == _RUNNING)\n"
        "                ).values(**resolved)",
    )


_FENCE_TESTS = (STALE_BATCHED, TASK_CONFORMANCE)

MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "fence-success",
        "the single success write ignores the processing token",
        (_unfenced_single("mark task succeeded"),),
        (STALE_SINGLE, TASK_CONFORMANCE),
    ),
    Mutant(
        "fence-success-batched-pg",
        "the PostgreSQL batched success (UPDATE ... FROM unnest) ignores the token",
        (
            Edit(
                TASKS_PG,
                ".where(t.c.id == done.c.id, t.c.processing_token == done.c.token, *running_by_id)",
                ".where(t.c.id == done.c.id, *running_by_id)",
            ),
        ),
        (STALE_BATCHED, TASK_BATCHED, TASK_CONFORMANCE),
    ),
    Mutant(
        "fence-success-batched",
        "the SQLite/MariaDB batched success checks the row is running, not whose token it has",
        (
            Edit(
                TASKS,
                "ok = owned.get(lease.task_id) == lease.processing_token",
                "ok = lease.task_id in owned",
            ),
            Edit(
                TASKS,
                '                    t.c.processing_token == sa.bindparam("b_token", '
                "type_=sa.String()),\n",
                "",
            ),
        ),
        (TASK_BATCHED, TASK_CONFORMANCE),
    ),
    Mutant(
        "fence-task-transaction",
        "a body's transaction commits its success whoever holds the claim now",
        (
            Edit(
                EFFECTS,
                "sa.update(self._sql.table).where(self._sql.fence(lease))",
                "sa.update(self._sql.table).where(self._sql.table.c.id == lease.task_id)",
            ),
        ),
        (TRANSACTION_TESTS + "::test_a_lost_lease_rolls_the_effect_back",),
    ),
    Mutant(
        "task-transaction-kept-on-failure",
        "a failed attempt's writes are committed instead of rolled back",
        (
            Edit(
                EFFECTS,
                "            await self._conn.rollback()\n",
                "            await self._conn.commit()\n",
            ),
        ),
        (TRANSACTION_TESTS + "::test_a_failed_attempt_rolls_back_and_the_retry_writes_once",),
    ),
    Mutant(
        "fence-retry",
        "the retry write ignores the processing token",
        (_unfenced_single("mark task retry"),),
        _FENCE_TESTS,
    ),
    Mutant(
        "fence-fail",
        "the permanent-failure write ignores the processing token",
        (_unfenced_single("mark task failed"),),
        _FENCE_TESTS,
    ),
    Mutant(
        "fence-release",
        "the shutdown release ignores the processing token",
        (_unfenced_single("release task for shutdown"),),
        _FENCE_TESTS,
    ),
    Mutant(
        "fence-steps",
        "the step-progress write ignores the processing token",
        (_unfenced_single("update task steps"),),
        _FENCE_TESTS,
    ),
    Mutant(
        "fence-renew",
        "the single lease renewal ignores the processing token",
        (
            Edit(
                TASKS,
                "                .where(self._sql.fence(lease))\n"
                "                .values(lease_expires_at=self._sql.plus(now, lease_ttl), "
                "updated_at=now.expr)",
                "                .where(t.c.id == lease.task_id, t.c.status == _RUNNING)\n"
                "                .values(lease_expires_at=self._sql.plus(now, lease_ttl), "
                "updated_at=now.expr)",
            ),
        ),
        # The worker's one heartbeat engine renews through renew_task_leases_many when
        # the store has it (the SQL store does), so only the conformance suite calls this.
        (TASK_CONFORMANCE,),
    ),
    Mutant(
        "fence-renew-batched-pg",
        "the PostgreSQL batched renewal (UPDATE ... FROM unnest) ignores the token",
        (
            Edit(
                TASKS_PG,
                ".where(t.c.id == leases.c.id, t.c.processing_token == leases.c.token, "
                "*running_by_id)",
                ".where(t.c.id == leases.c.id, *running_by_id)",
            ),
            Edit(
                TASKS_PG,
                ".returning(t.c.id, t.c.processing_token, t.c.lease_expires_at, "
                "t.c.cancel_requested)",
                ".returning(t.c.id, leases.c.token, t.c.lease_expires_at, t.c.cancel_requested)",
            ),
        ),
        (STALE_BATCHED, TASK_BATCHED),
    ),
    Mutant(
        "fence-renew-batched",
        "the SQLite/MariaDB batched renewal ignores the token",
        (
            Edit(
                TASKS,
                "                stmt = (\n"
                "                    sa.update(t)\n"
                "                    .where(self._sql.fence(lease))\n"
                "                    .values(lease_expires_at=expires, updated_at=now.expr)",
                "                stmt = (\n"
                "                    sa.update(t)\n"
                "                    .where(t.c.id == lease.task_id, t.c.status == _RUNNING)\n"
                "                    .values(lease_expires_at=expires, updated_at=now.expr)",
            ),
        ),
        (TASK_BATCHED,),
    ),
    Mutant(
        "rescue-off-pg",
        "the PostgreSQL claim never rescues an expired lease",
        (
            Edit(
                PG_SQL,
                "WHERE lane = :lane AND status = 'running' AND lease_expires_at <= now(){exclude}",
                "WHERE lane = :lane AND status = 'running' AND false{exclude}",
            ),
        ),
        (CRASH, TASK_CONFORMANCE),
    ),
    Mutant(
        "fence-success-claim-pg",
        "the PostgreSQL success-and-claim statement (a worker's every success) ignores the token",
        (
            Edit(
                PG_SQL,
                "    WHERE d.id = v.id AND d.processing_token = v.token\n",
                "    WHERE d.id = v.id\n",
            ),
        ),
        (STALE_BATCHED, SUCCEED_AND_CLAIM),
    ),
    Mutant(
        "claim-token-reused-pg",
        "the PostgreSQL claim's token is the same on every claim of a row (no fresh token)",
        (Edit(PG_RUN, '"prefix": uuid.uuid4().hex + "-",', '"prefix": "claim-",'),),
        (STALE_BATCHED, TASK_CONFORMANCE),
    ),
    Mutant(
        "claim-token-reused-sqlite",
        "the SQLite claim's token is the same on every claim of a row (no fresh token)",
        (Edit(TASKS_SQLITE, '"prefix": uuid.uuid4().hex + "-",', '"prefix": "claim-",'),),
        (TASK_CONFORMANCE,),
    ),
    Mutant(
        "claim-token-reused",
        "the portable claim's token (MariaDB) is the same on every claim of a row",
        (
            Edit(
                TASKS,
                'sa.literal(uuid.uuid4().hex + "-", sa.String())',
                'sa.literal("claim-", sa.String())',
            ),
        ),
        (TASK_CONFORMANCE,),
    ),
    Mutant(
        "rescue-off-sqlite",
        "the SQLite claim never rescues an expired lease",
        (
            Edit(
                SQLITE_SQL,
                "WHERE lane = :lane AND status = '{running}' AND lease_expires_at <= :now",
                "WHERE lane = :lane AND status = '{running}' AND 0",
            ),
        ),
        (TASK_CONFORMANCE,),
    ),
    Mutant(
        "lane-limit-ignores-running",
        "the worker starts every task a claim brings, whatever its lane runs (over its limit)",
        (
            Edit(
                WORKER,
                "            if self._in_flight[lane] < slots and not self._waiting[lane]:\n",
                "            if True:\n",
            ),
        ),
        (CRASH, DISPATCH_TESTS),
    ),
    Mutant(
        "waiting-start-over-limit",
        "a freed slot starts every claimed task waiting for one (over the lane's limit)",
        (
            Edit(
                WORKER,
                "        while queue and self._in_flight[lane] < limit and not self.stopping:\n",
                "        while queue and not self.stopping:\n",
            ),
        ),
        (CRASH, SLOT_TESTS, SUCCEED_AND_CLAIM),
    ),
    Mutant(
        "paused-lane-claimed-pg",
        "the PostgreSQL claim takes due tasks of a paused lane",
        (
            Edit(
                PG_SQL,
                "AND NOT waiting AND run_at <= now()\n      AND (SELECT open FROM open_lane)\n",
                "AND NOT waiting AND run_at <= now()\n",
            ),
        ),
        (TASK_CONFORMANCE,),
    ),
    Mutant(
        "paused-lane-claimed-late-pg",
        "the PostgreSQL claim takes flagged tasks that came due in a paused lane",
        (
            Edit(
                PG_SQL,
                "AND waiting AND run_at <= now()\n      AND (SELECT open FROM open_lane)\n",
                "AND waiting AND run_at <= now()\n",
            ),
        ),
        (WAITING,),
    ),
    Mutant(
        "flagged-tasks-never-claimed-pg",
        "the PostgreSQL claim leaves out tasks still flagged waiting after they came due",
        (
            Edit(
                TASKS_PG,
                '_LATE_UNION = "\\n        " + POSTGRESQL["late_union"]',
                '_LATE_UNION = ""',
            ),
        ),
        (WAITING,),
    ),
    Mutant(
        "rescue-ignores-attempts-pg",
        "the PostgreSQL rescue claims an expired task again although its attempts are used up",
        (
            Edit(
                PG_SQL,
                "        WHERE NOT (x.cancel_requested OR x.attempt + 1 >= x.max_attempts)\n",
                "        WHERE NOT x.cancel_requested\n",
            ),
        ),
        (TASK_CONFORMANCE,),
    ),
    Mutant(
        "rescue-ending-untold-pg",
        "the PostgreSQL claim's rescue ends an awaited task without notifying its waiter",
        (Edit(PG_SQL, "\n AND ends\n", "\n AND false\n"),),
        (
            "tests/forge/test_result_push.py::test_a_rescue_that_ends_a_task_wakes_its_waiter_by_notify",
        ),
    ),
    Mutant(
        "paused-lane-claimed-sqlite",
        "the SQLite claim takes due tasks of a paused lane",
        (
            Edit(
                SQLITE_SQL,
                "      AND (SELECT open FROM open_lane)\n    ORDER BY priority DESC, run_at, id",
                "    ORDER BY priority DESC, run_at, id",
            ),
        ),
        (
            TASK_CONFORMANCE,
            "tests/db/test_task_controls.py",
            "tests/tasks/test_operator_control.py",
        ),
    ),
    Mutant(
        "fence-success-batched-sqlite-rowcount",
        "the SQLite one-executemany success reports every entry written without counting rows",
        (
            Edit(
                TASKS_SQLITE,
                'if await succeed.executemany(conn, params, {"b_now": now}) != len(params):',
                'if await succeed.executemany(conn, params, {"b_now": now}) < 0:',
            ),
        ),
        (STALE_BATCHED, TASK_BATCHED, TASK_CONFORMANCE),
    ),
    Mutant(
        "rescue-off",
        "the portable rescue (MariaDB; PostgreSQL with a saturating TTL) never runs",
        (
            Edit(
                TASKS,
                "    async def _rescue(self, conn: AsyncConnection, lane: str, now: DbNow) "
                "-> list[TaskStatus]:\n",
                "    async def _rescue(self, conn: AsyncConnection, lane: str, now: DbNow) "
                "-> list[TaskStatus]:\n        return []\n",
            ),
        ),
        (TASK_CONFORMANCE,),
    ),
    Mutant(
        "dedupe-plain-insert",
        "the portable enqueue (SQLite/MariaDB) inserts without looking up the dedupe key "
        "first (no insert-or-get)",
        (
            Edit(
                ENQUEUE,
                "            for record in await self._rows_by_key(conn, list(keys), "
                "locking_read=locking_read)\n",
                "            for record in []\n",
            ),
        ),
        (TASK_CONFORMANCE,),
    ),
    Mutant(
        "dedupe-plain-insert-pg",
        "the PostgreSQL one-statement enqueue is a plain INSERT (no ON CONFLICT DO NOTHING)",
        (
            Edit(
                PG_SQL,
                "ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING\n    ",
                "",
            ),
        ),
        (TASK_CONFORMANCE,),
    ),
    Mutant(
        "dedupe-window-release-all",
        "an enqueue with a dedupe window takes the key from its holder whatever the window "
        "(racing enqueues make several tasks for one key)",
        (
            Edit(
                DEDUPE_WINDOW,
                "                .where(t.c.dedupe_key.in_(keys[start : start + _KEY_CHUNK]), "
                "sa.or_(*ended))\n",
                "                .where(t.c.dedupe_key.in_(keys[start : start + _KEY_CHUNK]))\n",
            ),
        ),
        (DEDUPE_WINDOW_RACE, ENQUEUE_BOUNDARY),
    ),
    Mutant(
        "dedupe-window-release-all-pg",
        "PostgreSQL's driver-path enqueue with a dedupe window takes the key from its holder "
        "whatever the window",
        (
            Edit(
                PG_SQL,
                "  AND (status <> ALL($2::text[]) OR created_at <= now() - $3::interval)",
                "  AND (status <> ALL($2::text[]) OR true OR created_at <= now() - $3::interval)",
            ),
        ),
        (DEDUPE_WINDOW_RACE, ENQUEUE_BOUNDARY),
    ),
    Mutant(
        "dedupe-window-period",
        "a dedupe key held for a period is never released when the period is over",
        (
            Edit(
                DEDUPE_WINDOW,
                "            ended.append(t.c.created_at <= _minus(now, period))\n",
                "            ended.append(sa.false())\n",
            ),
        ),
        (ENQUEUE_BOUNDARY,),
    ),
    Mutant(
        "scheduled-claim-exclusive",
        "a scheduled firing can be claimed while another instance's claim is live",
        (
            Edit(
                "src/aster_forge/db/_scheduled_tasks.py",
                "                    sa.or_(t.c.claimed_by.is_(None), "
                "t.c.claim_expires_at <= now),\n",
                "",
            ),
        ),
        (CHURN, SCHEDULED_CONFORMANCE),
    ),
    Mutant(
        "scheduled-claim-owner",
        "renewal and completion of a scheduled claim do not check who owns it",
        (
            Edit(
                "src/aster_forge/db/_scheduled_tasks.py",
                "            t.c.claimed_by == claim.owner_id,\n"
                "            t.c.last_claimed_at == claim.claimed_at,\n",
                "",
            ),
        ),
        (CHURN, SCHEDULED_CONFORMANCE),
    ),
    Mutant(
        "runtime-lease-renew-owner",
        "any owner may renew a runtime lease",
        (
            Edit(
                "src/aster_forge/db/_runtime_leases.py",
                "                    t.c.lease_id == lease_id,\n"
                "                    t.c.owner_id == owner_id,\n"
                "                    t.c.expires_at > now,\n",
                "                    t.c.lease_id == lease_id,\n"
                "                    t.c.expires_at > now,\n",
            ),
        ),
        (LEASE_CONFORMANCE,),
    ),
    Mutant(
        "runtime-lease-release-owner",
        "any owner may release (delete) a runtime lease",
        (
            Edit(
                "src/aster_forge/db/_runtime_leases.py",
                "sa.delete(t).where(t.c.lease_id == lease_id, t.c.owner_id == owner_id)",
                "sa.delete(t).where(t.c.lease_id == lease_id)",
            ),
        ),
        (LEASE_CONFORMANCE,),
    ),
    Mutant(
        "batch-writer-retry-any",
        "the batch writer's retry_failed() resumes after a PERMANENT or UNKNOWN_COMMIT failure",
        (
            Edit(
                "src/aster_forge/runtime/_buffered_core.py",
                "        return self.failure_class is WriteFailureClass.RETRYABLE\n",
                "        return True\n",
            ),
        ),
        ("tests/runtime/test_buffered_failures.py", "tests/runtime/test_buffered_basics.py"),
    ),
    Mutant(
        "shutdown-release-unshielded",
        "the shutdown release write is not shielded from the caller's cancellation",
        (
            Edit(
                EXECUTION,
                "                await shielded(\n"
                "                    self._write(release, ctx), "
                'name=f"aster-forge:task-release-{task.id}"\n'
                "                )\n",
                "                await self._write(release, ctx)\n",
            ),
            Edit(
                EXECUTION,
                "            report = await shielded(\n"
                "                self._write(decision, ctx), "
                'name=f"aster-forge:task-outcome-{task.id}"\n'
                "            )\n",
                "            report = await (\n"
                "                self._write(decision, ctx)\n"
                "                if decision.outcome is ClaimedTaskOutcome.RELEASED\n"
                "                else shielded(self._write(decision, ctx))\n"
                "            )\n",
            ),
        ),
        (SHUTDOWN_MID_RELEASE, "tests/tasks/test_execution.py"),
    ),
    Mutant(
        "heartbeat-ignores-lost-lease",
        "the heartbeat keeps a lease whose renewal was refused (no lease-lost signal)",
        (
            Edit(
                HEARTBEAT,
                _REFUSED_RENEWAL,
                "        if renewed is None:\n"
                "            entry.next_due = started + self._interval\n"
                "            return\n",
            ),
        ),
        (TAKEN_OVER + "[batched-success-postgres]", "tests/tasks/test_heartbeat.py"),
    ),
    Mutant(
        "closed-call-awaits-release",
        "a driver call closed mid-statement (its loop closed under it) awaits its release",
        (
            Edit(
                "src/aster_forge/db/_driver_hold.py",
                "        if not isinstance(exc, Exception | asyncio.CancelledError):\n",
                "        if not isinstance(exc, BaseException):\n",
            ),
        ),
        (
            "tests/db/test_enqueue_driver.py::test_a_call_closed_mid_statement_terminates_its_connection",
        ),
    ),
    Mutant(
        "coalesce-refusal-fails-the-batch",
        "a row the database refuses fails every caller whose task shared its statement",
        (
            Edit(
                COALESCER,
                "            if len(batch) == 1:\n                _settle(batch, exc)",
                "            if batch:\n                _settle(batch, exc)",
            ),
        ),
        (
            COALESCING + "::test_a_row_the_database_refuses_fails_only_its_own_caller",
            COALESCER_UNIT,
        ),
    ),
    Mutant(
        "coalesce-results-misrouted",
        "a batch's results reach the wrong callers (each is told another task's id)",
        (
            Edit(
                COALESCER,
                "zip(batch, results, strict=True)",
                "zip(batch, results[::-1], strict=True)",
            ),
        ),
        (ENQUEUE_FAULTS, COALESCING),
    ),
    Mutant(
        "coalesce-unknown-outcome-replayed",
        "a batch whose outcome is unknown (the connection broke) is sent again",
        (
            Edit(
                COALESCER, "        except _REFUSED as exc:\n", "        except Exception as exc:\n"
            ),
        ),
        (COALESCER_UNIT,),
    ),
    Mutant(
        "coalesce-writes-a-cancelled-caller",
        "a caller cancelled while its task waited for the next batch still has it written",
        (
            Edit(
                COALESCER,
                "            if not future.done():  # a caller cancelled while queued",
                "            if True:  # a caller cancelled while queued",
            ),
        ),
        (COALESCING + "::test_a_caller_cancelled_while_queued_writes_nothing", COALESCER_UNIT),
    ),
    Mutant(
        "notify-trail-dropped-uncovered",
        "a NOTIFY issued before a quiet commit cancels the trailing NOTIFY that commit needs",
        (
            Edit(
                NOTIFY_LIMITER,
                "                and self._covered(lane)\n",
                "                and True\n",
            ),
        ),
        (
            NOTIFY_LIMITER_TESTS
            + "::test_an_enqueue_issued_before_a_quiet_commit_does_not_announce_it",
        ),
    ),
    Mutant(
        "notify-trail-called-off-still-armed",
        "a quiet commit right after a NOTIFY announced the others finds the called-off wait "
        "still armed and is never announced",
        (
            Edit(
                NOTIFY_LIMITER,
                "                del self._trailing[lane]\n                trailing.cancel()\n",
                "                trailing.cancel()\n",
            ),
        ),
        (
            NOTIFY_LIMITER_TESTS
            + "::test_a_quiet_commit_right_after_a_notify_announced_the_others_is_announced",
        ),
    ),
    Mutant(
        "heartbeat-refusal-retried",
        "the heartbeat treats a refused renewal as a transient error and retries it",
        (
            Edit(
                HEARTBEAT,
                _REFUSED_RENEWAL,
                "        if renewed is None:\n"
                "            self._retry_later(entry, started, None)\n"
                "            return\n",
            ),
        ),
        (TAKEN_OVER + "[single-success-postgres]", "tests/tasks/test_heartbeat.py"),
    ),
    Mutant(
        "checkout-reuses-a-closed-connection",
        "a pooled PostgreSQL connection the server closed is handed out at checkout",
        (
            Edit(
                ENGINE,
                "    if is_closed is not None and is_closed():\n        return",
                "    if False:\n        return",
            ),
        ),
        (ENGINE_TESTS + "::test_a_pooled_connection_the_server_ended_is_replaced_at_checkout",),
    ),
    Mutant(
        "checkout-reuses-an-idle-connection",
        "a PostgreSQL connection unused for five minutes (maybe dropped by a NAT) is reused",
        (Edit(ENGINE, "    if idle_seconds > MAX_IDLE:\n", "    if False:\n"),),
        (ENGINE_TESTS,),
    ),
    Mutant(
        "held-connection-reused-after-close",
        "a kept connection the server closed is used for the next call (which then fails)",
        (
            Edit(
                DRIVER_HOLD,
                "if stale_reason(held.driver_connection, self._monotonic() - self._freed_at)",
                "if True or stale_reason(held.driver_connection, self._monotonic() - 0.0)",
            ),
        ),
        (DRIVER_TESTS,),
    ),
    Mutant(
        "sync-close-cancels-calls-in-flight",
        "closing the synchronous-enqueue thread cancels the calls already on its loop",
        (
            Edit(
                SYNC_BRIDGE,
                "    await asyncio.gather(*calls, return_exceptions=True)\n",
                "    del calls\n",
            ),
        ),
        (SYNC_TESTS + "::test_closing_while_threads_enqueue_hangs_no_call_and_loses_none",),
    ),
    Mutant(
        "sync-bridge-per-call-connection",
        "each synchronous enqueue opens a new connection (no pool kept across calls)",
        (
            Edit(
                BACKEND,
                "        engine = create_database_engine(self.url)\n",
                "        engine = create_database_engine(self.url, poolclass=sa.pool.NullPool)\n",
            ),
        ),
        (SYNC_TESTS + "::test_sequential_sync_enqueues_reuse_one_connection",),
    ),
    Mutant(
        "trace-attempt-unlinked",
        "an attempt's span no longer links to the enqueue whose context the row stores",
        (Edit("src/aster_forge/_tracing.py", "        links=_links(trace_context),\n", ""),),
        (
            "tests/forge/test_tracing.py::"
            "test_an_enqueue_in_a_request_links_the_attempt_on_another_engine",
        ),
    ),
    Mutant(
        "trace-context-dropped-by-pg-bulk-insert",
        "a plain PostgreSQL batch enqueue stores no trace context",
        (
            Edit(
                PG_SQL,
                "now(), now(), run_at > now(), trace_context,\n",
                "now(), now(), run_at > now(), NULL,\n",
            ),
        ),
        ("tests/db/test_trace_context.py::test_every_enqueue_path_stores_the_trace_context",),
    ),
    Mutant(
        "workflow-join-unlocked",
        "a fan-in's count is read without locking its row: two last dependencies ending "
        "at once each read the other's ending uncommitted and the join is never made due",
        (
            Edit(
                TASK_DEPS,
                "        waiting = self._locked(waiting)\n",
                "",
            ),
        ),
        (
            WORKFLOW_TESTS + "::test_the_join_is_made_due_once_when_its_last_two_dependencies"
            "_end_at_once",
        ),
    ),
    Mutant(
        "partition-dropped-by-pg-bulk-insert",
        "a plain PostgreSQL batch enqueue stores no partition",
        (
            Edit(
                PG_SQL,
                "COALESCE(partition_key, $19::text) AS partition_key, ord",
                "COALESCE(NULL, $19::text) AS partition_key, ord",
            ),
        ),
        ("tests/db/test_partition_column.py::test_every_enqueue_path_stores_the_partition",),
    ),
    Mutant(
        "rate-count-ignored",
        "a rate-limited claim forgets the starts already counted in its window",
        (
            Edit(
                "src/aster_forge/db/_task_lanes.py",
                "return max(count - (started or 0), 0)",
                "return count",
            ),
        ),
        (
            "tests/db/test_task_store.py::"
            "test_db_store[mysql-check_racing_claims_never_exceed_the_rate_in_any_window]",
            "tests/db/test_rate_limit_processes.py::"
            "test_no_window_sees_more_starts_than_the_rate_with_an_instance_killed",
        ),
    ),
    Mutant(
        "pg-rate-count-ignored",
        "PostgreSQL's one-statement rate-limited claim takes its limit, not the budget left",
        (
            Edit(
                "src/aster_forge/db/sql/postgresql.sql",
                "THEN (SELECT n FROM rate_left) ELSE 0 END",
                "THEN {limit} ELSE 0 END",
            ),
        ),
        (
            "tests/db/test_task_store.py::"
            "test_db_store[postgres-check_racing_claims_never_exceed_the_rate_in_any_window]",
            "tests/db/test_rate_limit_processes.py::"
            "test_no_window_sees_more_starts_than_the_rate_with_an_instance_killed[postgres]",
        ),
    ),
    Mutant(
        "pg-rate-row-not-locked",
        "PostgreSQL's rate-limited claim reads the lane's count without locking its row",
        (
            Edit(
                "src/aster_forge/db/sql/postgresql.sql",
                "FROM {lanes} WHERE lane = :lane FOR UPDATE",
                "FROM {lanes} WHERE lane = :lane",
            ),
        ),
        (
            "tests/db/test_task_store.py::"
            "test_db_store[postgres-check_racing_claims_never_exceed_the_rate_in_any_window]",
            "tests/db/test_rate_limit_processes.py::"
            "test_no_window_sees_more_starts_than_the_rate_with_an_instance_killed[postgres]",
        ),
    ),
    Mutant(
        "partition-rate-budget-ignored",
        "a claim under a partition rate limit takes a spent partition's tasks",
        (
            Edit(
                "src/aster_forge/db/_tasks_partitioned.py",
                "ranked.c.turn + sa.func.coalesce(spent.c.spent, 0) <= budget.count",
                "ranked.c.turn + sa.func.coalesce(spent.c.spent, 0) >= 0 - budget.count",
            ),
        ),
        (
            "tests/db/test_task_store.py::"
            "test_db_store[sqlite-check_partition_rate_limit_skips_spent_partitions]",
            "tests/db/test_partition_rate_processes.py::"
            "test_no_partition_starts_more_than_its_rate_in_any_window",
        ),
    ),
    Mutant(
        "pg-partition-rate-budget-ignored",
        "PostgreSQL's one-statement claim under a partition rate limit takes a spent "
        "partition's tasks",
        (
            Edit(
                PG_SQL,
                "r.turn + COALESCE(s.spent, 0) <= :part_count",
                "r.turn + COALESCE(s.spent, 0) >= 0 - :part_count",
            ),
        ),
        (
            "tests/db/test_partition_rate_paths.py::"
            "test_with_a_cluster_limit_the_room_binds[driver]",
            "tests/db/test_partition_rate_processes.py::"
            "test_no_partition_starts_more_than_its_rate_in_any_window[postgres]",
        ),
    ),
    Mutant(
        "pg-partition-rate-stale-snapshot",
        "PostgreSQL's partition-rate-limited claim reads the counts of a snapshot taken "
        "before it waited for the lane's row",
        (Edit(PG_SQL, "SELECT r.version = l.ctid FROM", "SELECT true FROM"),),
        (
            "tests/db/test_partition_rate_paths.py::"
            "test_a_claim_that_waited_for_a_counting_claim_reads_its_count[driver]",
        ),
    ),
    Mutant(
        "rate-refill-wait-skipped",
        "a worker claims a rate-limited lane again before its window refills",
        (
            Edit(
                "src/aster_forge/tasks/_worker.py",
                "if requested <= 0 or self.stopping or self._rate_waiting(config):",
                "if requested <= 0 or self.stopping:",
            ),
        ),
        (
            "tests/tasks/test_dispatch_worker.py::"
            "test_a_rate_limited_lane_sleeps_until_its_window_refills",
        ),
    ),
    Mutant(
        "partition-limit-not-applied",
        "a partitioned claim takes every rank of a partition, past its limit",
        (
            Edit(
                "src/aster_forge/db/_tasks_partitioned.py",
                "ranked.c.turn + taken <= partition_limit",
                "ranked.c.turn + taken >= 0",
            ),
        ),
        (
            "tests/db/test_task_store.py::"
            "test_db_store[mysql-check_partition_limit_caps_each_partition]",
            "tests/db/test_partition_processes.py::"
            "test_never_more_than_the_partition_limit_run_with_an_instance_killed",
        ),
    ),
    Mutant(
        "pg-partition-limit-not-applied",
        "PostgreSQL's partitioned claim takes every rank of a partition, past its limit",
        (
            Edit(
                PG_SQL,
                "r.turn + COALESCE(ri.n, 0) <= :plim",
                "r.turn + COALESCE(ri.n, 0) >= 0 - :plim",
            ),
        ),
        (
            "tests/db/test_task_store.py::"
            "test_db_store[postgres-check_partition_limit_caps_each_partition]",
            "tests/db/test_partition_processes.py::"
            "test_never_more_than_the_partition_limit_run_with_an_instance_killed",
        ),
    ),
    Mutant(
        "pg-partition-turns-ignored",
        "PostgreSQL's partitioned claim takes due tasks in plain due order",
        (
            Edit(
                PG_SQL,
                "ORDER BY r.turn, r.priority DESC, r.run_at, r.id",
                "ORDER BY r.priority DESC, r.run_at, r.id",
            ),
        ),
        (
            "tests/forge/test_partition_fairness.py::"
            "test_the_small_partition_starts_within_the_first_hundred[postgres]",
        ),
    ),
    Mutant(
        "partition-turns-ignored",
        "a partitioned claim takes due tasks in plain due order, not partition by partition",
        (
            Edit(
                "src/aster_forge/db/_tasks_partitioned.py",
                ".order_by(ranked.c.turn, ranked.c.priority.desc()",
                ".order_by(ranked.c.priority.desc()",
            ),
        ),
        (
            "tests/forge/test_partition_fairness.py::"
            "test_the_small_partition_starts_within_the_first_hundred",
        ),
    ),
)

CONTROL = Mutant(
    "control-no-op",
    "nothing (a no-op edit): must SURVIVE, or the runner itself is broken",
    (
        Edit(
            TASKS,
            '"""Fenced: store step progress."""',
            '"""Fenced: store step progress."""  # no-op mutant',
        ),
    ),
    (TASK_CONFORMANCE + "::test_in_memory_store",),
    expect_killed=False,
)
