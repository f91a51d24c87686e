-- The platform message that shows a turn's reply while it is written (a
-- draft edited in place), recorded when the draft is first shown so that an
-- instance finishing the turn after a crash edits that message instead of
-- leaving a partial copy behind; copied to the reply's outbox row, whose
-- first part replaces the draft's content. NULL when no draft message
-- exists (streaming off, an ephemeral draft, or nothing shown yet).
ALTER TABLE inbound ADD COLUMN draft_message_id TEXT;
ALTER TABLE outbox ADD COLUMN replaces TEXT;
