-- Several instances on one database.

-- Session leases carry a fencing token that only grows: a new grant adds
-- one, and a release keeps the row so the count survives. Lease times come
-- from the database's clock.
ALTER TABLE session_leases ADD COLUMN token INTEGER NOT NULL DEFAULT 0;

-- A request to stop a running turn (`/stop`, or an interrupting message),
-- set by whichever instance received it and read by whichever runs the turn.
ALTER TABLE inbound ADD COLUMN stop_cause TEXT;

-- A batch written under a lease first inserts into this table a row whose
-- value is NULL when the lease is no longer current: the NOT NULL
-- constraint then fails the whole batch. No row is ever stored here.
CREATE TABLE lease_fence (
    must_hold_lease INTEGER NOT NULL
);

-- An outbox row is delivered by the instance that claimed it, until the
-- claim expires.
ALTER TABLE outbox ADD COLUMN claimed_by TEXT;
ALTER TABLE outbox ADD COLUMN claim_expires_at INTEGER;

-- One holder per platform connection (the Telegram long poll, a Discord
-- gateway connection), fenced and timed like session leases.
CREATE TABLE platform_leases (
    name       TEXT PRIMARY KEY,
    owner      TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    token      INTEGER NOT NULL
);

CREATE INDEX session_leases_expiry ON session_leases (expires_at);
