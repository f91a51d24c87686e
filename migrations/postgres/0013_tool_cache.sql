-- Cached tool results, shared by every instance on this database: a call of
-- a cacheable tool with the same canonical arguments (and, for a per-user
-- tool, the same principal) within its TTL reuses `result`, the exact bytes
-- the model saw from the live call. The maintenance task deletes expired rows.
CREATE TABLE tool_cache (
    cache_key  TEXT PRIMARY KEY,
    tool       TEXT NOT NULL,
    result     TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX tool_cache_expiry ON tool_cache (expires_at);

-- A tool step answered from the cache instead of a live call.
ALTER TABLE tool_calls ADD COLUMN cache_hit BIGINT NOT NULL DEFAULT 0;
