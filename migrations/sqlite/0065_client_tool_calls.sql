-- The calls of an API client's own tools handed to the client and not yet
-- answered (status 'client'), found per session when its next request
-- brings their results.
CREATE INDEX tool_calls_client ON tool_calls (session_id) WHERE status = 'client';
