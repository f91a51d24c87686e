-- The prompt cache to its limit (issue 29): tokens written to Anthropic's
-- cache for an hour (priced at twice the input price, not 1.25×), and the
-- input of a call cut by a crash, `/stop` or a timeout, which the provider
-- billed without sending usage: estimated from the request's size and
-- marked so (`input_estimated` = 1).
ALTER TABLE usage ADD COLUMN cache_write_1h_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage ADD COLUMN input_estimated INTEGER NOT NULL DEFAULT 0;
