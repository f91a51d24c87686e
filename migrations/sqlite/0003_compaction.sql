-- Context compaction: summaries that stand in for older history in the wire
-- view. The raw messages they replace stay in `messages`.
CREATE TABLE compactions (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id      TEXT NOT NULL REFERENCES sessions(id),
    -- The pinned first user message, kept verbatim before the summary.
    pinned_id       INTEGER NOT NULL,
    -- The last message the summary replaces (everything after `pinned_id`
    -- up to and including this one).
    through_id      INTEGER NOT NULL,
    summary         TEXT NOT NULL,
    created_at      INTEGER NOT NULL
);
CREATE INDEX compactions_session ON compactions (session_id, id);

-- Characters of each model request, to calibrate token estimates against
-- the provider's reported input tokens.
ALTER TABLE usage ADD COLUMN request_chars INTEGER;
