-- Replies the HTTP API handed to their caller (issue 28). A request without
-- an Idempotency-Key that repeats an earlier one byte for byte joins that
-- one's turn while it runs; once the turn has finished, only when its reply
-- was not handed out (a 504, a dropped connection): then a client's
-- automatic retry gets it, while the same words sent again after the reply
-- are a new message. Pruned with the dedup records.
CREATE TABLE api_answered (
    inbound_id  INTEGER PRIMARY KEY,
    answered_at INTEGER NOT NULL
);
