-- The revision of the last entry of the store's log this store applied,
-- when it is a view of that log: one row, written in the same transaction
-- as the entry's effect.
CREATE TABLE view (
	id      INTEGER PRIMARY KEY CHECK (id = 1),
	applied INTEGER NOT NULL
);
INSERT INTO view (id, applied) VALUES (1, 0);
