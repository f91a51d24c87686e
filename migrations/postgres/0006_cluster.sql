-- Several instances on one database.

-- Session leases carry a fencing token that only grows: a new grant adds
-- one, and a release keeps the row so the count survives. Lease times come
-- from the database's clock.
ALTER TABLE session_leases ADD COLUMN token BIGINT NOT NULL DEFAULT 0;

-- A request to stop a running turn (`/stop`, or an interrupting message),
-- set by whichever instance received it and read by whichever runs the turn.
ALTER TABLE inbound ADD COLUMN stop_cause TEXT;

-- A batch written under a lease first inserts into this table a row whose
-- value is NULL when the lease is no longer current: the NOT NULL
-- constraint then fails the whole batch. No row is ever stored here.
CREATE TABLE lease_fence (
    must_hold_lease BIGINT NOT NULL
);

-- An outbox row is delivered by the instance that claimed it, until the
-- claim expires.
ALTER TABLE outbox ADD COLUMN claimed_by TEXT;
ALTER TABLE outbox ADD COLUMN claim_expires_at BIGINT;

-- One holder per platform connection (the Telegram long poll, a Discord
-- gateway connection), fenced and timed like session leases.
CREATE TABLE platform_leases (
    name       TEXT PRIMARY KEY,
    owner      TEXT NOT NULL,
    expires_at BIGINT NOT NULL,
    token      BIGINT NOT NULL
);

CREATE INDEX session_leases_expiry ON session_leases (expires_at);

-- Instances learn of changes through NOTIFY on channel `switchboard`, sent
-- when the change commits: a turn's reply is stored (`reply:<inbound id>`),
-- a stop is requested (`stop:<session id>`), a session's lease is handed
-- back with work left in it (`handback:<session id>`). Listeners also poll, so a missed notification
-- only delays.
CREATE FUNCTION switchboard_notify_reply() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('switchboard', 'reply:' || NEW.inbound_id);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER outbox_reply_stored AFTER INSERT ON outbox
    FOR EACH ROW EXECUTE FUNCTION switchboard_notify_reply();

CREATE FUNCTION switchboard_notify_stop() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('switchboard', 'stop:' || NEW.session_id);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER inbound_stop_requested AFTER UPDATE OF stop_cause ON inbound
    FOR EACH ROW WHEN (NEW.stop_cause IS NOT NULL AND OLD.stop_cause IS DISTINCT FROM NEW.stop_cause)
    EXECUTE FUNCTION switchboard_notify_stop();

CREATE FUNCTION switchboard_notify_handback() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('switchboard', 'handback:' || NEW.session_id);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER session_lease_handed_back AFTER UPDATE OF expires_at ON session_leases
    FOR EACH ROW WHEN (NEW.expires_at = -1 AND OLD.expires_at <> -1)
    EXECUTE FUNCTION switchboard_notify_handback();
