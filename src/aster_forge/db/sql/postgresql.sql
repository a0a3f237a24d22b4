-- PostgreSQL statements of the task store (see aster_forge/db/_postgres.py): the
-- claim, the batched success, the enqueue and the fragments they are built from.
-- Placeholders in braces ({t}, {limit}, ...) are filled once per store, when its
-- statements are built.

-- late --
-- Due tasks come from the due index, which leaves out rows written with a later run_at
-- (``waiting``, see background_tasks_table): a table crowded with tasks due later costs
-- the claim nothing. The lane claim also reads the waiting index (``late``) for such
-- rows that came due before a worker's stager cleared their flag, so no flag hides a
-- task. The success-and-claim leaves that part out: it refills a busy worker's slots
-- many times a second, and the flagged rows reach it once staged (within a second).
, late AS (
    SELECT id, priority, run_at FROM {t}
    WHERE lane = :lane AND status = 'pending' AND waiting AND run_at <= now()
      AND (SELECT open FROM open_lane)
    ORDER BY priority DESC, run_at, id LIMIT {limit} FOR UPDATE SKIP LOCKED
)

-- late_union --
SELECT id, priority, run_at FROM late
        UNION ALL

-- claim --
-- The final UPDATE names its targets twice: joined (for the claim flag) and as an id
-- array, which lets PostgreSQL reach the rows through the primary key. Joined only, the
-- planner scanned the whole table for a table of a few thousand rows (most of the
-- statement's time); tests/db/test_pg_claim_plans.py checks the plan.
--
-- ``exp`` reads each expired row as it locks it (under READ COMMITTED, FOR UPDATE
-- returns the newest version), so its flags are those the UPDATE then writes from, and
-- ``rescue_told`` notifies the awaited rows the rescue ends. A filter of ``target``
-- reads it (a CTE no query reads never runs; the filter is reached for every row the
-- rescue ends, as no such row is in ``cand``). A NOTIFY is delivered at commit, so one
-- queued before the UPDATE runs is seen no earlier than its write.
WITH exp AS (
    SELECT id, result_awaited,
           cancel_requested OR attempt + 1 >= max_attempts AS ends
    FROM {t}
    WHERE lane = :lane AND status = 'running' AND lease_expires_at <= now(){exclude}
    ORDER BY lease_expires_at LIMIT {rescue} FOR UPDATE SKIP LOCKED
), rescue_told AS (
    {rescue_told}
), open_lane AS (
    SELECT NOT EXISTS (SELECT 1 FROM {lanes} WHERE lane = :lane AND paused) AS open
){gate}{pick}, target AS (
    SELECT id, true AS claim FROM cand
    UNION ALL
    SELECT id, false AS claim FROM exp
    WHERE id NOT IN (SELECT id FROM cand) AND (SELECT count(*) FROM rescue_told) >= 0
)
UPDATE {t} AS t SET
    status = CASE WHEN target.claim THEN '{running}'
                  WHEN t.cancel_requested THEN '{cancelled}'
                  WHEN t.attempt + 1 >= t.max_attempts THEN '{failed}'
                  ELSE '{pending}' END,
    failure_reason = CASE WHEN t.status = '{running}' THEN
                         CASE WHEN t.cancel_requested THEN '{reason_cancelled}'
                              ELSE '{reason_expired}' END
                     ELSE t.failure_reason END,
    rescued = CASE WHEN t.status = '{running}'
                   THEN NOT (t.cancel_requested OR t.attempt + 1 >= t.max_attempts)
                   ELSE t.rescued END,
    finished_at = CASE WHEN t.status <> '{running}' THEN t.finished_at
                       WHEN t.cancel_requested OR t.attempt + 1 >= t.max_attempts THEN now()
                       ELSE NULL END,
    last_error = CASE WHEN t.status = '{running}' THEN :lease_error ELSE t.last_error END,
    last_traceback = CASE WHEN t.status = '{running}' THEN NULL ELSE t.last_traceback END,
    attempt = CASE WHEN t.status = '{running}' THEN t.attempt + 1 ELSE t.attempt END,
    processing_token = CASE WHEN target.claim THEN :prefix || CAST(t.id AS TEXT) ELSE NULL END,
    lease_expires_at = CASE WHEN target.claim THEN now() + :ttl ELSE NULL END,
    claimed_by = CASE WHEN target.claim THEN :owner ELSE t.claimed_by END,
    started_at = CASE WHEN target.claim THEN now() ELSE t.started_at END,
    waiting = false,
    updated_at = now()
FROM target
WHERE t.id = target.id AND t.id = ANY(ARRAY(SELECT id FROM target))
RETURNING {returning}

-- pick --
-- The claim's pick: the first ``limit`` due tasks by priority, due time and id, and the
-- rows it rescues that may run again.
, due AS (
    SELECT id, priority, run_at FROM {t}
    WHERE lane = :lane AND status = 'pending' AND NOT waiting AND run_at <= now()
      AND (SELECT open FROM open_lane)
    ORDER BY priority DESC, run_at, id LIMIT {limit} FOR UPDATE SKIP LOCKED
){late}, cand AS (
    SELECT c.id FROM (
        SELECT id, priority, run_at FROM due
        UNION ALL{late_union}
        SELECT x.id, x.priority, x.run_at FROM {t} x JOIN exp ON x.id = exp.id
        WHERE NOT (x.cancel_requested OR x.attempt + 1 >= x.max_attempts)
          AND (SELECT open FROM open_lane)
    ) c ORDER BY c.priority DESC, c.run_at, c.id LIMIT {cand_limit}
)

-- fair_pick --
-- A partitioned lane's pick (always behind a gate, see ``gate`` and
-- ``partition_rate_gate``): the due tasks ranked within each partition, the ranks a
-- partition has no room for left out (``{caps}``: under a partition limit, its running
-- rows in the snapshot, less those this statement writes as succeeded; those it
-- rescues still count, which only claims less; under a partition rate limit, the
-- starts it has left in the window), taken by rank so partitions take turns. Window
-- functions cannot lock rows: the ranked ids are locked after. Rescued rows become
-- pending and wait for the next claim.
{running_in}, ranked AS (
    SELECT r.id FROM (
        SELECT id, partition_key, priority, run_at, row_number() OVER (
            PARTITION BY partition_key ORDER BY priority DESC, run_at, id) AS turn
        FROM {t}
        WHERE lane = :lane AND status = 'pending' AND run_at <= now()
          AND (SELECT open FROM open_lane)
    ) r{joins}
    WHERE r.partition_key IS NULL OR ({caps})
    ORDER BY r.turn, r.priority DESC, r.run_at, r.id LIMIT {cand_limit}
), cand AS (
    SELECT d.id FROM {t} d WHERE d.id IN (SELECT id FROM ranked) AND d.status = 'pending'
    FOR UPDATE SKIP LOCKED
)

-- running_in --
-- The running rows of each partition, for the cap of a partition limit.
, running_in AS (
    SELECT partition_key, count(*) AS n FROM {t}
    WHERE lane = :lane AND status = '{running}' AND partition_key IS NOT NULL{counted}
    GROUP BY partition_key
)

-- running_join --
LEFT JOIN running_in ri ON ri.partition_key = r.partition_key

-- running_cap --
r.turn + COALESCE(ri.n, 0) <= :plim

-- budget_join --
LEFT JOIN spent_in s ON s.partition_key = r.partition_key

-- budget_cap --
r.turn + COALESCE(s.spent, 0) <= :part_count AND (SELECT current FROM part_current)

-- done --
-- Successes written and freed slots claimed in one statement: this CTE in front of the
-- claim, whose rescue leaves out the rows being written (one statement must not modify a
-- row twice: PostgreSQL would apply only one of the two writes).
--
-- The written rows are named as an id array too, and their status is compared to an
-- uncorrelated subquery, which the planner cannot match to the partial index of running
-- rows: it reaches them through the primary key. With the plain comparison and
-- statistics read while few tasks ran (autovacuum analyzes after a tenth of the table
-- changed), the cached plan hashed every running row of every worker for each write, so
-- a success grew slower with every task other workers were running
-- (tests/db/test_pg_claim_plans.py checks the plan).
WITH done AS (
    UPDATE {t} AS d SET
        status = '{succeeded}',
        result_json = v.result_json,
        steps_json = COALESCE(v.steps_json, d.steps_json),
        failure_reason = NULL,
        processing_token = NULL,
        lease_expires_at = NULL,
        finished_at = now(),
        updated_at = now()
    FROM unnest(:ids, :tokens, :results, :steps) AS v(id, token, result_json, steps_json)
    WHERE d.id = v.id AND d.processing_token = v.token
      AND d.id = ANY(:ids) AND d.status = (SELECT '{running}')
    RETURNING d.id, v.token, d.result_awaited
), told AS (
    {told}
)

-- not_done --
-- The success statement's rescue leaves the rows it writes alone. Today its UPDATE of
-- them runs first and PostgreSQL skips a row its own command already changed, but which
-- of two changes to one row in a statement lands is unspecified: this keeps it so.
AND id <> ALL(:ids)

-- done_result --
-- One row at least (the LEFT JOIN); the written pairs ride on the first row only (on
-- every row they would be sent and decoded once per claimed task). The filter reads
-- ``told`` (the awaited successes' NOTIFY, see _tasks_results): a CTE no query reads
-- never runs.
SELECT CASE WHEN row_number() OVER () = 1 THEN (SELECT array_agg(id) FROM done) END
           AS done_ids,
       CASE WHEN row_number() OVER () = 1 THEN (SELECT array_agg(token) FROM done) END
           AS done_tokens,
       c.*
FROM (SELECT 1) AS one LEFT JOIN claimed AS c ON true
WHERE (SELECT count(*) FROM told) >= 0

-- gate --
-- A lane with a cluster-wide limit claims at most the room left under it: the lane's
-- running rows, less those this statement rescues or writes as succeeded. The count is
-- only as new as the statement's snapshot, and a lock taken within the statement cannot
-- make it newer. So every capped claim also rewrites the lane's row in the lane table
-- (``bump``, an upsert that waits for the claim holding the row, or creates it) and
-- then reads the version of that row its own snapshot sees: when another transaction
-- had rewritten that version (its ``xmax`` is set, and not by this one) or the snapshot
-- sees none, a claim this snapshot misses may have committed, and the statement claims
-- nothing (``fresh`` false; the caller runs it again with a new snapshot). Otherwise
-- every capped claim before this one is in the snapshot; so it is when this statement
-- created the row (no capped claim ran before). ``fresh`` is read per row of ``bump``,
-- so only once the row lock is held.
, bump AS (
    INSERT INTO {lanes} AS b (lane, paused, paused_at, updated_at)
    VALUES (:lane, false, NULL, now())
    ON CONFLICT (lane) DO UPDATE SET paused = b.paused
    RETURNING b.lane, b.xmax = '0'::xid AS created
), fresh AS (
    SELECT b.created OR COALESCE((
        SELECT l.xmax = '0'::xid OR l.xmax = pg_current_xact_id()::xid
        FROM {lanes} AS l WHERE l.lane = b.lane
    ), false) AS fresh
    FROM bump AS b
)

-- rate_gate --
-- A lane with a rate limit (and no other limit) claims in one statement too. It locks
-- the lane's row with FOR UPDATE, which returns the newest version of the row once
-- the claim holding it committed (not the snapshot's): the window's count is read
-- there (``rate_left``), the pick takes no more than what is left of it, and ``rated``
-- adds the claimed rows to the count, in the same statement (the UPDATE reaches that
-- newest version, whose lock the statement holds). The due rows come from the
-- snapshot, as in the plain claim: one taken since is locked or no longer pending, and
-- skipped. A lane without a row creates it (``made``) and claims nothing (``fresh``
-- false; the caller runs the statement again).
, rate_row AS (
    SELECT rate_window_start, rate_started FROM {lanes} WHERE lane = :lane FOR UPDATE
){made}, fresh AS (
    SELECT EXISTS (SELECT 1 FROM rate_row) AS fresh
)

-- made --
, made AS (
    INSERT INTO {lanes} (lane, paused, paused_at, updated_at)
    SELECT :lane, false, NULL, now() WHERE NOT EXISTS (SELECT 1 FROM rate_row)
    ON CONFLICT (lane) DO NOTHING
)

-- rate_left --
-- The lane's window is the one ``now()`` falls in, aligned to the epoch (``:rate_us``,
-- the period in microseconds), as ``rate_window`` computes it; a row that already
-- counted a later window leaves no budget (see ``rate_budget_left``).
, rate_win AS (
    SELECT timestamptz 'epoch' + floor(extract(epoch FROM now()) * 1000000 / :rate_us)
        * :rate_us * interval '1 microsecond' AS win
), rate_left AS (
    SELECT CASE WHEN r.rate_window_start IS NULL OR r.rate_window_start < w.win THEN :rate_count
                WHEN r.rate_window_start > w.win THEN 0
                ELSE GREATEST(:rate_count - COALESCE(r.rate_started, 0), 0) END AS n
    FROM rate_win AS w LEFT JOIN rate_row AS r ON true
)

-- partition_rate_gate --
-- A lane with a partition rate limit (with or without the other limits) claims in one
-- statement as well, its lane row locked as under ``rate_gate``. The partition counts
-- live in rows of the partition rate table, which the statement reads from its
-- snapshot: the snapshot must hold every counting claim before this one. Each such
-- claim that started a task rewrote the lane's row (``rated`` or ``touched``), in the
-- transaction that counted; so the statement compares the version of the row it
-- locked (the newest, once the claim holding it committed) with its snapshot's: when
-- they differ (or the snapshot sees none), a claim this snapshot misses may have
-- committed, and the statement claims nothing (``fresh`` false; the caller runs it
-- again with a new snapshot). The partition window is the one ``now()`` falls in
-- (``:part_us``); a partition's starts counted in it (``spent_in``) come off its
-- budget, and once any partition counted a later window (a claim whose "now" was later
-- committed first), no partition has budget (``part_current``, as
-- ``partition_budget``). ``spent_in`` is read once (MATERIALIZED, a row per partition):
-- inlined, the plan probed the rate table's index once per ranked task.
, rate_row AS (
    SELECT ctid AS version, rate_window_start, rate_started FROM {lanes}
    WHERE lane = :lane FOR UPDATE
){made}, fresh AS (
    SELECT COALESCE((
        SELECT r.version = l.ctid FROM rate_row AS r, {lanes} AS l WHERE l.lane = :lane
    ), false) AS fresh
), part_win AS (
    SELECT timestamptz 'epoch' + floor(extract(epoch FROM now()) * 1000000 / :part_us)
        * :part_us * interval '1 microsecond' AS win
), spent_in AS MATERIALIZED (
    SELECT partition_key, started AS spent FROM {rates}
    WHERE lane = :lane AND window_start = (SELECT win FROM part_win)
), part_current AS (
    SELECT NOT EXISTS (
        SELECT 1 FROM {rates} WHERE lane = :lane AND window_start > (SELECT win FROM part_win)
    ) AS current
)

-- fresh_limit --
CASE WHEN (SELECT fresh FROM fresh) THEN {limit} ELSE 0 END

-- partition_rated --
-- The claimed rows' starts counted per partition in its window, after the lane's rows
-- of ended windows were deleted (but those of the partitions counted here, which the
-- upsert overwrites: one statement must not modify a row twice), as
-- ``record_partition_starts`` does.
, part_started AS (
    SELECT partition_key, count(*) AS n FROM claimed
    WHERE status = '{running}' AND partition_key IS NOT NULL
    GROUP BY partition_key
), part_pruned AS (
    DELETE FROM {rates} AS p
    WHERE p.lane = :lane AND p.window_start < (SELECT win FROM part_win)
      AND EXISTS (SELECT 1 FROM part_started)
      AND p.partition_key NOT IN (SELECT partition_key FROM part_started)
), part_counted AS (
    INSERT INTO {rates} AS p (lane, partition_key, window_start, started)
    SELECT :lane, s.partition_key, (SELECT win FROM part_win), s.n FROM part_started AS s
    ON CONFLICT (lane, partition_key) DO UPDATE SET
        started = CASE WHEN p.window_start = EXCLUDED.window_start
                       THEN p.started + EXCLUDED.started ELSE EXCLUDED.started END,
        window_start = EXCLUDED.window_start
)

-- touched --
-- A lane without a rate of its own: its row rewritten all the same when the statement
-- started a task, for the next claim's ``fresh`` (see ``partition_rate_gate``).
, touched AS (
    UPDATE {lanes} AS l SET paused = l.paused
    WHERE l.lane = :lane AND EXISTS (SELECT 1 FROM claimed WHERE status = '{running}')
)

-- rate_limit --
LEAST({limit}, CASE WHEN (SELECT fresh FROM fresh)
        THEN (SELECT n FROM rate_left) ELSE 0 END)

-- rated --
, rated AS (
    UPDATE {lanes} AS l SET
        rate_started = CASE WHEN l.rate_window_start = (SELECT win FROM rate_win)
                            THEN COALESCE(l.rate_started, 0) ELSE 0 END
                       + (SELECT count(*) FROM claimed WHERE status = '{running}'),
        rate_window_start = (SELECT win FROM rate_win)
    WHERE l.lane = :lane AND EXISTS (SELECT 1 FROM claimed WHERE status = '{running}')
)

-- cluster_limit --
LEAST({limit}, CASE WHEN (SELECT fresh FROM fresh) THEN GREATEST(0, :cap - (
        SELECT count(*) FROM {t} WHERE lane = :lane AND status = '{running}'{counted}
    ) + (SELECT count(*) FROM exp)) ELSE 0 END)

-- counted_done --
AND id NOT IN (SELECT id FROM done)

-- fresh --
(SELECT fresh FROM fresh) AS fresh,

-- gated_result --
SELECT (SELECT fresh FROM fresh) AS fresh, c.*
FROM (SELECT 1) AS one LEFT JOIN claimed AS c ON true

-- insert_columns --
-- ``waiting``: written true for a task not yet due (see ``background_tasks_table``).
INSERT INTO {t} (kind, lane, status, payload_json, steps_json, attempt, max_attempts,
                     run_at, priority, dedupe_key, manual_retry_allowed, cancel_requested,
                     rescued, created_at, updated_at, waiting, trace_context,
                     partition_key)

-- on_conflict --
-- Shared by both statements: a dedupe hit inserts nothing and is read back instead.
ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
    RETURNING {returning}
)

-- enqueue --
WITH v AS (
    SELECT * FROM unnest({arrays}) WITH ORDINALITY AS v({names}, ord)
), ins AS (
    {columns}
    SELECT kind, lane, '{pending}', payload_json, steps_json, 0, max_attempts,
           COALESCE(run_at, now() + delay), priority, dedupe_key, true, false, false,
           now(), now(), COALESCE(run_at, now() + delay) > now(), trace_context,
           partition_key
    FROM v ORDER BY ord{on_conflict}{woke}
SELECT true AS created, ins.* FROM ins{woke_join}
UNION ALL
SELECT false AS created, {existing}
FROM unnest(CAST(:keys AS text[])) AS k(key) JOIN {t} AS e ON e.dedupe_key = k.key

-- enqueue_one --
-- One task (a web request's enqueue): plain parameters, no arrays to build or unnest,
-- a plan PostgreSQL caches (the array statement costs more to plan than to run).
WITH ins AS (
    {columns}
    VALUES ($1::text, $2::text, '{pending}', $3::text, $4::text, 0, $5::integer,
            COALESCE($6::timestamptz, now() + $7::interval), $8::integer, $11::text,
            true, false, false, now(), now(),
            COALESCE($6::timestamptz, now() + $7::interval) > now(),
            $9::text, $10::text){on_conflict}{woke}
SELECT true AS created, ins.* FROM ins{woke_join}
UNION ALL
SELECT false AS created, {existing} FROM {t} AS e WHERE e.dedupe_key = $11::text

-- insert_unkeyed --
{columns}
    VALUES ($1::text, $2::text, '{pending}', $3::text, $4::text, 0, $5::integer,
            COALESCE($6::timestamptz, now() + $7::interval), $8::integer, NULL,
            true, false, false, now(), now(),
            COALESCE($6::timestamptz, now() + $7::interval) > now(), $9::text, $10::text)
{returning}{notify}

-- insert_unkeyed_many --
-- A column whose value every task of the batch shares (one kind, one lane, the kind's
-- initial steps, no delay: the usual bulk enqueue) comes as that one value ($11 to $19)
-- and an empty array (unnest pads it with NULLs); the payloads always come as an array,
-- which gives the row count. The driver then checks and encodes one element per task,
-- not five, and the server unnests one array.
WITH v AS (
    SELECT COALESCE(kind, $11::text) AS kind, COALESCE(lane, $12::text) AS lane,
           payload_json, COALESCE(steps_json, $13::text) AS steps_json,
           COALESCE(max_attempts, $14::integer) AS max_attempts,
           COALESCE(run_at, $15::timestamptz, now() + COALESCE(delay, $16::interval), now())
               AS run_at,
           COALESCE(priority, $17::integer, 0) AS priority,
           COALESCE(trace_context, $18::text) AS trace_context,
           COALESCE(partition_key, $19::text) AS partition_key, ord
    FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::integer[],
                $6::timestamptz[], $7::interval[], $8::integer[], $9::text[], $10::text[])
         WITH ORDINALITY AS v(kind, lane, payload_json, steps_json, max_attempts, run_at,
                              delay, priority, trace_context, partition_key, ord)
), ins AS (
    {columns}
    SELECT kind, lane, '{pending}', payload_json, steps_json, 0, max_attempts, run_at,
           priority, NULL, true, false, false, now(), now(), run_at > now(), trace_context,
           partition_key
    FROM v ORDER BY ord
    RETURNING id, {due_later}, lane
){woke}
SELECT array_agg(ins.id ORDER BY ins.id) AS ids,
       CASE WHEN count(ins.run_at) > 0 THEN array_agg(ins.run_at ORDER BY ins.id) END AS due,
       (SELECT {created}) AS created_at
FROM ins{woke_join}

-- woke --
, woke AS (
    SELECT count(pg_notify({channel}, l.lane)) AS n FROM (SELECT DISTINCT lane FROM ins) AS l
)

-- by_key --
SELECT {columns} FROM {t} WHERE dedupe_key = ANY($1::text[])

-- release_keys --
-- Keys of a dedupe window ($2 the statuses that hold, $3 the period; either NULL: no
-- such limit) moved off holders whose window ended; run before the insert-or-get.
UPDATE {t} SET dedupe_key = NULL
WHERE dedupe_key = ANY($1::text[])
  AND (status <> ALL($2::text[]) OR created_at <= now() - $3::interval)

-- notify --
SELECT pg_notify($1::text, $2::text)

-- notified --
-- The awaited rows among those ``{written}`` ended, each notified on the results
-- channel (``RESULTS_CHANNEL`` in _tasks_results.py); unawaited rows send nothing.
SELECT pg_notify('aster_forge_results', CAST(id AS TEXT)) FROM {written} WHERE result_awaited{ended}

-- rescue_ended --
-- Of the rows a claim's rescue takes (``exp``), those it ends: cancelled or failed.
 AND ends

-- told --
-- ``notified`` of ``done`` as a FROM item: a filter of the batched success reads it, so it runs.
({notified_done}) AS told
