-- Media in conversations (issue 15): files sent to the bot are kept once each
-- in the blob store, named by the SHA-256 of their bytes. A message refers to
-- its files by hash, as a JSON array of {hash, media_type, name, size, width,
-- height}: the inbound row from the moment it is recorded (so a restart before
-- the turn loses nothing), and the user entry of the transcript (so history
-- replays byte-identically, on any instance). NULL: no files.
ALTER TABLE inbound ADD COLUMN media TEXT;
ALTER TABLE messages ADD COLUMN media TEXT;
