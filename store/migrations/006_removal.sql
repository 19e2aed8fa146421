-- A node whose removal began: its credential is off the bus and it is sent
-- nothing; the row and everything that hangs from it go once the removal
-- finishes (mesh node remove, run again after a failure half-way).
ALTER TABLE nodes ADD COLUMN removing_at TEXT;
