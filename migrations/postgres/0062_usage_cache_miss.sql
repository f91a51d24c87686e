-- The prompt-cache report (issue 29): a model call that read less from the
-- provider's prompt cache than the conversation's previous call left there
-- records why, in words (the part of the request that changed, or the time
-- since that call); NULL for a call that read what it could. Each call also
-- keeps its request's fingerprint (running hashes and lengths of its fixed
-- parts and of the whole, no text), so the first call after a restart is
-- compared with the last one recorded.
ALTER TABLE usage ADD COLUMN cache_miss TEXT;
ALTER TABLE usage ADD COLUMN prompt_fingerprint TEXT;
