-- Link codes are credentials: only the SHA-256 of each code (hex, of the
-- upper-case code as issued) is kept, and codes are looked up by it. Codes
-- stored before this migration were plain text; they are dropped, which
-- invalidates them (a code lives ten minutes at most; its owner asks for a
-- new one with /link).
DROP TABLE link_codes;

CREATE TABLE link_codes (
    code_sha256  TEXT PRIMARY KEY,
    principal_id BIGINT NOT NULL REFERENCES principals(id),
    identity_id  BIGINT NOT NULL REFERENCES identities(id),
    expires_at   BIGINT NOT NULL,
    used_at      BIGINT
);
