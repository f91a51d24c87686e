-- A person in the loop (issue 33). A tool call whose tool asks first, an
-- `ask_user` question and a call left in doubt by a crash each become an
-- `approvals` row; its turn parks (inbound status `waiting`, its call's
-- checkpoint `awaiting`) until a decision, an answer or the expiry sets
-- `status`, exactly once (`WHERE status = 'pending'`), and puts the turn
-- back in its session's queue. The row is also the audit: the tool, a hash
-- of its arguments, who decided, when and how.
CREATE TABLE approvals (
    id             BIGSERIAL PRIMARY KEY,
    nonce          TEXT NOT NULL,
    session_id     TEXT NOT NULL REFERENCES sessions(id),
    inbound_id     BIGINT NOT NULL REFERENCES inbound(id),
    request_id     TEXT NOT NULL,
    call_id        TEXT NOT NULL,
    kind           TEXT NOT NULL,
    tool           TEXT NOT NULL,
    arguments      TEXT NOT NULL,
    arguments_sha  TEXT NOT NULL,
    choices        TEXT,
    principal_id   BIGINT,
    platform       TEXT NOT NULL,
    account        TEXT NOT NULL,
    chat_id        TEXT NOT NULL,
    thread_id      TEXT,
    sender_id      TEXT NOT NULL,
    approver       TEXT NOT NULL,
    status         TEXT NOT NULL,
    answer         TEXT,
    decided_by     TEXT,
    decided_via    TEXT,
    created_at     BIGINT NOT NULL,
    expires_at     BIGINT NOT NULL,
    decided_at     BIGINT
);
CREATE INDEX approvals_inbound ON approvals (inbound_id, status);
CREATE INDEX approvals_request ON approvals (request_id);
CREATE INDEX approvals_session ON approvals (session_id, status);
CREATE INDEX approvals_due ON approvals (expires_at) WHERE status = 'pending';

-- "Allow for this conversation": the tool runs without asking in the
-- session from then on.
CREATE TABLE session_tool_grants (
    session_id  TEXT NOT NULL REFERENCES sessions(id),
    tool        TEXT NOT NULL,
    approval_id BIGINT NOT NULL,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (session_id, tool)
);

-- Buttons under a message (JSON, the contract's `Button`s), and which
-- approval a notice asks about (the messages to update once it is decided).
ALTER TABLE outbox ADD COLUMN buttons TEXT;
ALTER TABLE outbox ADD COLUMN approval_id BIGINT;
CREATE INDEX outbox_approval ON outbox (approval_id);
