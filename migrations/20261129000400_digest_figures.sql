-- The digest's figures read one org's rows of one week: find them by (org, time), not by
-- scanning the org's whole history.
create index subscribers_org_created on subscribers (org_id, created_at);
create index suppressions_org_created on suppressions (org_id, created_at);
create index deliveries_needing_attention on deliveries (org_id, finished_at)
    where status in ('failed', 'unknown');
-- The Digests page's history: one org's digests newest first.
create index digest_sends_org_history on digest_sends (org_id, created_at desc);
