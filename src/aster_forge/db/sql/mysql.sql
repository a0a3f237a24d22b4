-- MariaDB statements (see aster_forge/db/_mysql.py).

-- utc_now --
-- The server's clock, naive UTC by definition.
SELECT UTC_TIMESTAMP(6)

-- acquire_runtime_lease --
-- MariaDB evaluates ON DUPLICATE KEY UPDATE assignments left to right, each seeing the
-- previous ones: owner_id changes only when the lease is free, expired or ours, and the
-- later assignments key off the new owner_id.
INSERT INTO runtime_leases (lease_id, owner_id, expires_at, acquired_at, updated_at)
VALUES (:lease_id, :owner_id, :expires_at, :now, :now)
ON DUPLICATE KEY UPDATE
acquired_at = IF(expires_at <= :now AND owner_id <> :owner_id, :now, acquired_at),
owner_id = IF(expires_at <= :now OR owner_id = :owner_id, :owner_id, owner_id),
expires_at = IF(owner_id = :owner_id, :expires_at, expires_at),
updated_at = IF(owner_id = :owner_id, :now, updated_at)
