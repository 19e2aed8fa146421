-- Whether a node's last report failed (a resource failed, or the whole
-- declaration was refused): a push does not take a node whose last apply
-- failed for one that holds its declaration, and sends it again. Reports
-- recorded before the column are read once here.
ALTER TABLE reports ADD COLUMN failed INTEGER NOT NULL DEFAULT 0;
UPDATE reports SET failed = 1
	WHERE json_extract(body, '$.refused') IS NOT NULL
	   OR EXISTS (SELECT 1 FROM json_each(body, '$.results') WHERE json_extract(value, '$.outcome') = 'failed');
CREATE INDEX reports_failed ON reports (node, seq) WHERE failed = 1;
