-- SQLite statements of the task store (see aster_forge/db/_sqlite.py). Placeholders in
-- braces ({t}, {running}, ...) are filled once per store: table names and constants.

-- claim --
-- Rescue the lane's expired leases and claim up to :lim due tasks, in one statement.
WITH exp AS MATERIALIZED (
    SELECT id FROM {t}
    WHERE lane = :lane AND status = '{running}' AND lease_expires_at <= :now
    ORDER BY lease_expires_at LIMIT {rescue}
), open_lane AS MATERIALIZED (
    SELECT NOT EXISTS (SELECT 1 FROM {lanes} WHERE lane = :lane AND paused) AS open
), due AS MATERIALIZED (
    SELECT id, priority, run_at FROM {t}
    WHERE lane = :lane AND status = '{pending}' AND run_at <= :now
      AND (SELECT open FROM open_lane)
    ORDER BY priority DESC, run_at, id LIMIT :lim
), cand AS MATERIALIZED (
    SELECT c.id FROM (
        SELECT id, priority, run_at FROM due
        UNION ALL
        SELECT x.id, x.priority, x.run_at FROM {t} x JOIN exp ON x.id = exp.id
        WHERE NOT (x.cancel_requested OR x.attempt + 1 >= x.max_attempts)
          AND (SELECT open FROM open_lane)
    ) c ORDER BY c.priority DESC, c.run_at, c.id LIMIT {cand_limit}
), target AS MATERIALIZED (
    SELECT id, 1 AS claim FROM cand
    UNION ALL
    SELECT id, 0 AS claim FROM exp WHERE id NOT IN (SELECT id FROM cand)
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
                       WHEN t.cancel_requested OR t.attempt + 1 >= t.max_attempts THEN :now
                       ELSE NULL END,
    last_error = CASE WHEN t.status = '{running}' THEN :lease_error ELSE t.last_error END,
    last_traceback = CASE WHEN t.status = '{running}' THEN NULL ELSE t.last_traceback END,
    attempt = CASE WHEN t.status = '{running}' THEN t.attempt + 1 ELSE t.attempt END,
    processing_token = CASE WHEN target.claim THEN :prefix || CAST(t.id AS TEXT) ELSE NULL END,
    lease_expires_at = CASE WHEN target.claim THEN :expires ELSE NULL END,
    claimed_by = CASE WHEN target.claim THEN :owner ELSE t.claimed_by END,
    started_at = CASE WHEN target.claim THEN :now ELSE t.started_at END,
    updated_at = :now
FROM target
WHERE t.id = target.id
RETURNING {returning}

-- cluster_limit --
-- The claim's candidate limit under a cluster-wide limit: the room left, counting the
-- lane's running rows less the ones this statement rescues (the transaction is the
-- database's only writer).
MIN(:lim, MAX(0, :cap - (
        SELECT count(*) FROM {t} WHERE lane = :lane AND status = '{running}'
    ) + (SELECT count(*) FROM exp)))
