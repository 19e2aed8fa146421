-- How often each node said it sends a heartbeat, in milliseconds: a node
-- that misses two is silent. 0: not said (a host older than the field), and
-- the controller falls back to a fixed window.
ALTER TABLE nodes ADD COLUMN heartbeat_ms INTEGER NOT NULL DEFAULT 0;
