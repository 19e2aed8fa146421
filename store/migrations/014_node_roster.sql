-- The roster message each node's host said (in its heartbeats) it holds:
-- 0 until it says (a host older than roster messages never does).
ALTER TABLE nodes ADD COLUMN roster_seq INTEGER NOT NULL DEFAULT 0;
