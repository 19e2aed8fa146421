-- The digest of what each node's last declaration holds, without its
-- sequence and times: the controller compares it with what it would send
-- now. '': recorded before the digest was kept.
ALTER TABLE declarations ADD COLUMN content TEXT NOT NULL DEFAULT '';
