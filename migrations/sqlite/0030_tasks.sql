-- Tasks (issue 32): work on the gateway's own clock. A task is a schedule
-- (once, every interval, cron in a time zone) and a prompt, owned by the
-- principal who asked for it and reporting to the conversation (session and
-- chat) it was made in. The scheduler reads the next due time from
-- `tasks_due` and sleeps until then; each due run is a `task_runs` row,
-- unique per (task, run key), and an inbound message (event id
-- `task-run:<run id>`, unique too) that its session's runner takes like any
-- other: exactly once across crashes and instances. A background task's runs
-- go to a session of their own; their answer is relayed to the
-- conversation by an inbound message whose `relay` holds it.
CREATE TABLE tasks (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    principal_id INTEGER,
    session_id   TEXT NOT NULL REFERENCES sessions(id),
    platform     TEXT NOT NULL,
    account      TEXT NOT NULL,
    chat_id      TEXT NOT NULL,
    thread_id    TEXT,
    sender_id    TEXT NOT NULL,
    sender_name  TEXT,
    prompt       TEXT NOT NULL,
    kind         TEXT NOT NULL,
    spec         TEXT NOT NULL,
    timezone     TEXT NOT NULL,
    until_at     INTEGER,
    max_runs     INTEGER,
    runs         INTEGER NOT NULL DEFAULT 0,
    background   INTEGER NOT NULL DEFAULT 0,
    run_session  TEXT,
    status       TEXT NOT NULL,
    next_run_at  INTEGER,
    failures     INTEGER NOT NULL DEFAULT 0,
    last_outcome TEXT,
    last_run_at  INTEGER,
    hook_nonce   TEXT,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL
);
CREATE INDEX tasks_due ON tasks (next_run_at) WHERE status = 'active';
CREATE INDEX tasks_owner ON tasks (principal_id, status);

CREATE TABLE task_runs (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id     INTEGER NOT NULL REFERENCES tasks(id),
    run_key     TEXT NOT NULL,
    due_at      INTEGER NOT NULL,
    trigger     TEXT NOT NULL,
    status      TEXT NOT NULL,
    inbound_id  INTEGER,
    claimed_at  INTEGER NOT NULL,
    finished_at INTEGER,
    outcome     TEXT,
    context     TEXT,
    UNIQUE (task_id, run_key)
);
CREATE INDEX task_runs_inbound ON task_runs (inbound_id);

ALTER TABLE inbound ADD COLUMN task_run_id INTEGER;
ALTER TABLE inbound ADD COLUMN relay TEXT;

-- A person's settings that outlive their sessions: their time zone
-- (`/timezone`), which task times are given and shown in.
CREATE TABLE principal_settings (
    principal_id INTEGER PRIMARY KEY,
    timezone     TEXT
);
