-- +goose Up
-- A send-and-end session (whitepaper §7.2) may be reopened by its invitees,
-- who never had the chance to join; the flag clears at the first reopen.
ALTER TABLE sessions ADD COLUMN send_and_end INTEGER NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE sessions DROP COLUMN send_and_end;
