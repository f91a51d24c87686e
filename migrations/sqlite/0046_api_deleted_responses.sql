-- Responses API responses deleted by their caller (issue 28): a response is
-- a turn (`resp_<turn>`); once deleted it can no longer be read or continued
-- by its id (`previous_response_id`). The conversation it belongs to stays.
CREATE TABLE api_deleted_responses (
    inbound_id INTEGER PRIMARY KEY,
    deleted_at INTEGER NOT NULL
);
