-- How many times a resumed roll asked a node to try its binary again: the
-- host's launcher clears its "bad" mark of the release once for each new
-- count. It goes back to 0 whenever the node's binary becomes another
-- release.
ALTER TABLE node_binaries ADD COLUMN retry INTEGER NOT NULL DEFAULT 0;
