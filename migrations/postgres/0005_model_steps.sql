-- Model calls as recorded steps (issue 6): each call is written `running`
-- before it starts and `done`/`failed` after, with a request id, timings and
-- a cost estimate. Usage is attributed to the principal who sent the
-- message, for the daily spend cap and the per-principal report.
ALTER TABLE usage ADD COLUMN status TEXT NOT NULL DEFAULT 'done';
ALTER TABLE usage ADD COLUMN request_id TEXT;
ALTER TABLE usage ADD COLUMN scope TEXT NOT NULL DEFAULT '';
ALTER TABLE usage ADD COLUMN started_at BIGINT;
ALTER TABLE usage ADD COLUMN finished_at BIGINT;
-- Estimated cost in billionths of a US dollar; NULL when the model has no price.
ALTER TABLE usage ADD COLUMN cost_nanousd BIGINT;
ALTER TABLE usage ADD COLUMN error TEXT;
ALTER TABLE usage ADD COLUMN principal_id BIGINT REFERENCES principals(id);
CREATE UNIQUE INDEX usage_request ON usage (request_id);
CREATE INDEX usage_principal ON usage (principal_id, created_at);

-- The sender's principal, resolved when the message arrived.
ALTER TABLE inbound ADD COLUMN principal_id BIGINT REFERENCES principals(id);

-- A compaction made in the middle of a long task keeps that task's user
-- message (its goal) verbatim, though it lies inside the replaced range.
ALTER TABLE compactions ADD COLUMN kept_id BIGINT;
