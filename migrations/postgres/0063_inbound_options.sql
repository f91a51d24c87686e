-- Per-request settings (issue 28, points 5 and 6): what an HTTP API request
-- asked of its turn beyond its text (structured output, sampling settings,
-- an answer cap, stop sequences, a seed; the client's instructions), as
-- JSON, read back when the turn runs (on any instance, after a restart).
-- NULL: nothing asked.
ALTER TABLE inbound ADD COLUMN options TEXT;
-- The client's instructions in effect for a session (issue 28, point 6):
-- those its system prompt took when it started, or those a later turn
-- noted in its history. NULL: none.
ALTER TABLE sessions ADD COLUMN client_instructions TEXT;
