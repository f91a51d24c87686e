-- Identity (issue 7): principals, the platform identities that belong to them,
-- one-time link codes, failed link attempts (rate limiting), pairing requests
-- from unknown senders (access control), the principal
-- owning each direct-chat session, and hidden (undone) transcript entries.

CREATE TABLE principals (
    id         BIGSERIAL PRIMARY KEY,
    created_at BIGINT NOT NULL,
    -- 1 once a pairing request of one of its identities was approved.
    approved   BIGINT NOT NULL DEFAULT 0
);

CREATE TABLE identities (
    id           BIGSERIAL PRIMARY KEY,
    platform     TEXT NOT NULL,
    account      TEXT NOT NULL,
    user_id      TEXT NOT NULL,
    principal_id BIGINT NOT NULL REFERENCES principals(id),
    created_at   BIGINT NOT NULL,
    UNIQUE (platform, account, user_id)
);
CREATE INDEX identities_principal ON identities (principal_id);

CREATE TABLE link_codes (
    code         TEXT PRIMARY KEY,
    principal_id BIGINT NOT NULL REFERENCES principals(id),
    identity_id  BIGINT NOT NULL REFERENCES identities(id),
    expires_at   BIGINT NOT NULL,
    used_at      BIGINT
);

CREATE TABLE link_failures (
    id          BIGSERIAL PRIMARY KEY,
    identity_id BIGINT NOT NULL REFERENCES identities(id),
    failed_at   BIGINT NOT NULL
);
CREATE INDEX link_failures_identity ON link_failures (identity_id, failed_at);

-- Unknown direct-chat senders while access.allowlist is set: one request per
-- identity, decided by `switchboard pairing approve|deny CODE`.
CREATE TABLE pairing_requests (
    code         TEXT PRIMARY KEY,
    identity_id  BIGINT NOT NULL UNIQUE REFERENCES identities(id),
    platform     TEXT NOT NULL,
    account      TEXT NOT NULL,
    user_id      TEXT NOT NULL,
    display_name TEXT,
    status       TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    decided_at   BIGINT
);

-- NULL for group and sub-agent sessions (and for sessions from before this
-- migration): they belong to no one principal.
ALTER TABLE sessions ADD COLUMN principal_id BIGINT REFERENCES principals(id);
CREATE INDEX sessions_principal ON sessions (principal_id, updated_at);

-- 1 for entries dropped from the wire view by /undo or /retry; kept stored.
ALTER TABLE messages ADD COLUMN hidden BIGINT NOT NULL DEFAULT 0;
