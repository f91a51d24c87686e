-- In a group chat, who sent the message, as the model is told it
-- (`[Name] text`): kept with the message so the user entry the turn stores
-- is the same whichever instance runs it. NULL outside group chats.
ALTER TABLE inbound ADD COLUMN speaker TEXT;
