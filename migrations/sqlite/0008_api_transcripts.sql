-- How the HTTP API recognises a client that resends the whole transcript
-- instead of naming its session (`src/api/transcript.rs`): for each turn a
-- stateless request started, the SHA-256 of the visible transcript up to and
-- including the turn's user message, under the caller's key namespace
-- (`account`) and API user (`sender`). A later request whose transcript
-- extends it by the turn's reply and a new message continues the session.
CREATE TABLE api_transcripts (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    account     TEXT NOT NULL,
    sender      TEXT NOT NULL,
    prefix_sha  TEXT NOT NULL,
    session_id  TEXT NOT NULL REFERENCES sessions(id),
    inbound_id  INTEGER NOT NULL,
    created_at  INTEGER NOT NULL
);

CREATE UNIQUE INDEX api_transcripts_lookup ON api_transcripts (account, sender, prefix_sha, inbound_id);
