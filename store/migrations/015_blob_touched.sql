-- When each blob was last made whole or offered again (an upload of a blob
-- already whole), fixed-width so times compare as text: the collector of
-- unused blobs leaves a blob alone for a while after it, so that a blob is
-- never collected between its upload and the register or publish that
-- names it. A blob stored before this is counted as touched now: one
-- uploaded by the controller before an upgrade keeps its grace.
ALTER TABLE blobs ADD COLUMN touched_at TEXT NOT NULL DEFAULT '';
UPDATE blobs SET touched_at = strftime('%Y-%m-%dT%H:%M:%S', 'now') || '.000000000Z';
