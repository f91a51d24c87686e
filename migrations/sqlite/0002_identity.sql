-- Identity (issue 7): principals, the platform identities that belong to them,
-- one-time link codes, failed link attempts (rate limiting), pairing requests
-- from unknown senders (access control), the principal
-- owning each direct-chat session, and hidden (undone) transcript entries.

CREATE TABLE principals (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at INTEGER NOT NULL,
    -- 1 once a pairing request of one of its identities was approved.
    approved   INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE identities (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    platform     TEXT NOT NULL,
    account      TEXT NOT NULL,
    user_id      TEXT NOT NULL,
    principal_id INTEGER NOT NULL REFERENCES principals(id),
    created_at   INTEGER NOT NULL,
    UNIQUE (platform, account, user_id)
);
CREATE INDEX identities_principal ON identities (principal_id);

CREATE TABLE link_codes (
    code         TEXT PRIMARY KEY,
    principal_id INTEGER NOT NULL REFERENCES principals(id),
    identity_id  INTEGER NOT NULL REFERENCES identities(id),
    expires_at   INTEGER NOT NULL,
    used_at      INTEGER
);

CREATE TABLE link_failures (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    identity_id INTEGER NOT NULL REFERENCES identities(id),
    failed_at   INTEGER NOT NULL
);
CREATE INDEX link_failures_identity ON link_failures (identity_id, failed_at);

-- Unknown direct-chat senders while access.allowlist is set: one request per
-- identity, decided by `switchboard pairing approve|deny CODE`.
CREATE TABLE pairing_requests (
    code         TEXT PRIMARY KEY,
    identity_id  INTEGER NOT NULL UNIQUE REFERENCES identities(id),
    platform     TEXT NOT NULL,
    account      TEXT NOT NULL,
    user_id      TEXT NOT NULL,
    display_name TEXT,
    status       TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    decided_at   INTEGER
);

-- NULL for group and sub-agent sessions (and for sessions from before this
-- migration): they belong to no one principal.
ALTER TABLE sessions ADD COLUMN principal_id INTEGER REFERENCES principals(id);
CREATE INDEX sessions_principal ON sessions (principal_id, updated_at);

-- 1 for entries dropped from the wire view by /undo or /retry; kept stored.
ALTER TABLE messages ADD COLUMN hidden INTEGER NOT NULL DEFAULT 0;
