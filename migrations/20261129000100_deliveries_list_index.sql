-- The dashboard's delivery list: one org's rows newest first, paged by (created_at, job_id).
create index deliveries_org_list on deliveries (org_id, created_at desc, job_id desc);
