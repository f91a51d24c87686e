-- A message merged into an earlier one of the same sender's burst (see
-- `sessions.burst_window_ms`): the id of the burst's first message, whose
-- turn answers them all. NULL for every other message.
ALTER TABLE inbound ADD COLUMN burst_of INTEGER;
CREATE INDEX inbound_burst ON inbound (burst_of) WHERE burst_of IS NOT NULL;
