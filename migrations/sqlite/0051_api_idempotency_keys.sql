-- The requests the HTTP API's Idempotency-Keys were first used with (issue
-- 30). A key is claimed, in one insert, before its message is recorded: the
-- same key again with the same body from the same caller is a retry (it gets
-- the first request's turn); with another body it is refused (422), from
-- another caller of the namespace it is refused (409), and neither stores
-- anything. Pruned with the dedup records.
CREATE TABLE api_idempotency_keys (
    account         TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    sender          TEXT NOT NULL,
    fingerprint     TEXT NOT NULL,
    created_at      INTEGER NOT NULL,
    PRIMARY KEY (account, idempotency_key)
);
