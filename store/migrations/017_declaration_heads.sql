-- The head of each node's last declaration (all but its body), in an index
-- that answers DeclarationHeads alone: every batch of heartbeats and of
-- reports reads the heads of its nodes, and a row of the table holds the
-- body twice (as sent and as applied), about a page a node at 1 KB each.
CREATE INDEX declaration_heads ON declarations (node, seq, content, sent_at, expires_at, sig);
