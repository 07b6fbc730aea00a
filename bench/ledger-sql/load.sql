truncate deliveries, delivery_mark_groups, delivery_counts cascade;
insert into deliveries (job_id, org_id, kind, priority, recipient, email_lower, next_attempt_at, created_at)
select 'j' || lpad(g::text, 7, '0'), 1, 'test', 3, 'r' || g || '@example.org', 'r' || g || '@example.org',
       now() - interval '1 hour' + g * interval '1 ms', now()
from generate_series(1, :n) g;
do $$ begin
    if to_regclass('delivery_queue') is not null then
        truncate delivery_queue;
        insert into delivery_queue select job_id, priority, org_id, coalesce(campaign_id, 0), next_attempt_at
        from deliveries;
        analyze delivery_queue;
    end if;
end $$;
vacuum analyze deliveries;
checkpoint;
