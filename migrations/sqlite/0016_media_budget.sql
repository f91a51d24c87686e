-- Media limits (issue 15): the bytes of files each person sent on each UTC
-- day, so that `media.principal_daily_bytes` holds across instances and
-- restarts. `day` is the date, `YYYY-MM-DD` in UTC. A message's files are
-- added in one statement that adds nothing when they would pass the limit.
-- The maintenance task removes the rows of past days.
CREATE TABLE media_usage (
    principal_id INTEGER NOT NULL,
    day          TEXT NOT NULL,
    bytes        INTEGER NOT NULL,
    PRIMARY KEY (principal_id, day)
);
