-- Long-term memory (issue 19): short facts about a person, kept per principal
-- and read into the system prompt of that principal's new direct-chat
-- sessions. Written by the `memory` tool; listed and removed with `/memory`.
-- A link that leaves a principal without identities moves its facts along
-- with its sessions.
CREATE TABLE memories (
    id           BIGSERIAL PRIMARY KEY,
    principal_id BIGINT NOT NULL REFERENCES principals(id),
    text         TEXT NOT NULL,
    -- The session whose conversation remembered it (NULL when none).
    session_id   TEXT,
    created_at   BIGINT NOT NULL
);
CREATE INDEX memories_principal ON memories (principal_id, id);
