-- The settings an assignment gives its module, as JSON {"name": "value"}.
ALTER TABLE assignments ADD COLUMN settings TEXT NOT NULL DEFAULT '{}';

-- The last declaration each node reported applying: what it still serves.
ALTER TABLE declarations ADD COLUMN received_seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE declarations ADD COLUMN received_body BLOB;
