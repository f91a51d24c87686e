-- Files in tool results (issue 30, point 5): the files a tool call's
-- result carries (an MCP server's images, stored in the blob store), as
-- the JSON array of their references the result's transcript entry gets,
-- so that a result reused from its checkpoint after a restart still
-- carries them. NULL: none.
ALTER TABLE tool_calls ADD COLUMN media TEXT;
