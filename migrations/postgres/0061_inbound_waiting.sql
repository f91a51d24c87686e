-- Parked turns (issue 33): the requeue after a decision and the scheduler's
-- periodic sweep look for `waiting` messages whose approvals are all
-- decided; this keeps that lookup off the whole inbound table.
CREATE INDEX inbound_waiting ON inbound (id) WHERE status = 'waiting';
