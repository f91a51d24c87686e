-- What became of a sent message, as the platform reported it after the send
-- (WhatsApp's status callbacks: sent, delivered, read, failed): one row per
-- platform message, pointing at the outbox row whose reply it carried when
-- the outbox recorded that message id. Reports repeat and come out of order:
-- `progress` only grows (sent 1, delivered 2, read 3, failed 4), so a late
-- "delivered" never overwrites a "read".
CREATE TABLE delivery_statuses (
    platform   TEXT NOT NULL,
    account    TEXT NOT NULL,
    message_id TEXT NOT NULL,
    chat_id    TEXT NOT NULL,
    outbox_id  BIGINT,
    state      TEXT NOT NULL,
    progress   BIGINT NOT NULL,
    error_code BIGINT,
    reason     TEXT,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (platform, account, message_id)
);
CREATE INDEX delivery_statuses_outbox ON delivery_statuses (outbox_id);
CREATE INDEX outbox_platform_message ON outbox (platform, account, platform_message_id);
