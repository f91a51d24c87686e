-- A random id for this database, made with it: reply idempotency keys start
-- with it (`sb-<random_id>-<outbox id>`), so a recreated database or another
-- deployment never repeats an earlier key within a platform's dedup window,
-- while every instance sharing this database derives the same key for the
-- same reply. One row, never changed. Ten hex digits keep the keys short
-- enough for Discord's 25-character nonces.
CREATE TABLE database_id (
    singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
    random_id TEXT NOT NULL
);

INSERT INTO database_id (singleton, random_id)
VALUES (1, substr(md5(random()::text || clock_timestamp()::text || pg_backend_pid()::text), 1, 10));
