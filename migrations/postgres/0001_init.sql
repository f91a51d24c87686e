-- Switchboard schema (PostgreSQL). Timestamps are Unix milliseconds; flags are 0/1.

CREATE TABLE sessions (
    id                 TEXT PRIMARY KEY,
    origin_key         TEXT NOT NULL,
    platform           TEXT NOT NULL,
    account            TEXT NOT NULL,
    chat_id            TEXT NOT NULL,
    thread_id          TEXT,
    system_prompt      TEXT NOT NULL,
    model              TEXT NOT NULL,
    toolset            TEXT NOT NULL,
    title              TEXT,
    input_tokens       BIGINT NOT NULL DEFAULT 0,
    output_tokens      BIGINT NOT NULL DEFAULT 0,
    cache_read_tokens  BIGINT NOT NULL DEFAULT 0,
    cache_write_tokens BIGINT NOT NULL DEFAULT 0,
    cost_micros        BIGINT NOT NULL DEFAULT 0,
    created_at         BIGINT NOT NULL,
    updated_at         BIGINT NOT NULL
);

CREATE TABLE routes (
    route_key  TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions(id),
    updated_at BIGINT NOT NULL
);

CREATE TABLE inbound (
    id          BIGSERIAL PRIMARY KEY,
    platform    TEXT NOT NULL,
    account     TEXT NOT NULL,
    event_id    TEXT NOT NULL,
    session_id  TEXT NOT NULL REFERENCES sessions(id),
    chat_id     TEXT NOT NULL,
    thread_id   TEXT,
    message_id  TEXT,
    sender_id   TEXT NOT NULL,
    sender_name TEXT,
    text        TEXT NOT NULL,
    status      TEXT NOT NULL,
    outcome     TEXT,
    received_at BIGINT NOT NULL,
    finished_at BIGINT,
    UNIQUE (platform, account, event_id)
);
CREATE INDEX inbound_pending ON inbound (session_id, status, id);

CREATE TABLE messages (
    id                 BIGSERIAL PRIMARY KEY,
    session_id         TEXT NOT NULL REFERENCES sessions(id),
    task_id            BIGINT,
    scope              TEXT NOT NULL DEFAULT '',
    role               TEXT NOT NULL,
    content            TEXT,
    tool_calls         TEXT,
    tool_call_id       TEXT,
    is_error           BIGINT NOT NULL DEFAULT 0,
    reasoning          TEXT,
    model              TEXT,
    finish_reason      TEXT,
    input_tokens       BIGINT,
    output_tokens      BIGINT,
    cache_read_tokens  BIGINT,
    cache_write_tokens BIGINT,
    latency_ms         BIGINT,
    request_id         TEXT,
    created_at         BIGINT NOT NULL
);
CREATE INDEX messages_session ON messages (session_id, scope, id);

CREATE TABLE tool_calls (
    request_id  TEXT PRIMARY KEY,
    session_id  TEXT NOT NULL REFERENCES sessions(id),
    task_id     BIGINT,
    scope       TEXT NOT NULL DEFAULT '',
    call_id     TEXT NOT NULL,
    name        TEXT NOT NULL,
    arguments   TEXT NOT NULL,
    status      TEXT NOT NULL,
    result      TEXT,
    started_at  BIGINT NOT NULL,
    finished_at BIGINT
);
CREATE INDEX tool_calls_session ON tool_calls (session_id, task_id);

CREATE TABLE usage (
    id                 BIGSERIAL PRIMARY KEY,
    session_id         TEXT NOT NULL REFERENCES sessions(id),
    task_id            BIGINT,
    provider           TEXT NOT NULL,
    model              TEXT NOT NULL,
    input_tokens       BIGINT NOT NULL,
    output_tokens      BIGINT NOT NULL,
    cache_read_tokens  BIGINT NOT NULL,
    cache_write_tokens BIGINT NOT NULL,
    latency_ms         BIGINT NOT NULL,
    created_at         BIGINT NOT NULL
);
CREATE INDEX usage_session ON usage (session_id, created_at);
CREATE INDEX usage_task ON usage (task_id);

CREATE TABLE outbox (
    id                  BIGSERIAL PRIMARY KEY,
    session_id          TEXT NOT NULL REFERENCES sessions(id),
    inbound_id          BIGINT NOT NULL UNIQUE REFERENCES inbound(id),
    platform            TEXT NOT NULL,
    account             TEXT NOT NULL,
    chat_id             TEXT NOT NULL,
    thread_id           TEXT,
    reply_to            TEXT,
    text                TEXT NOT NULL,
    status              TEXT NOT NULL,
    platform_message_id TEXT,
    attempts            BIGINT NOT NULL DEFAULT 0,
    created_at          BIGINT NOT NULL,
    sent_at             BIGINT
);
CREATE INDEX outbox_pending ON outbox (status, id);

CREATE TABLE session_leases (
    session_id TEXT PRIMARY KEY,
    owner      TEXT NOT NULL,
    expires_at BIGINT NOT NULL
);
