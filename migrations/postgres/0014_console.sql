-- The web console (issue 20) shows each turn's trace id: the `trace_id` on
-- every log line of the turn, written when the turn starts its task (with
-- the user message). NULL for turns from before this migration, commands,
-- and turns that ended before a task started.
ALTER TABLE inbound ADD COLUMN trace_id TEXT;
