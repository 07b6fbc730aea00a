-- A relay's event ids (and Mailgun's signature tokens) are unique within the relay, and any org
-- can post any value to its own endpoint: the ledger's arbiter is per org, so one org's event
-- (or token) can never pre-empt another org's genuine one.
alter table delivery_events drop constraint delivery_events_source_provider_event_id_key;
alter table delivery_events add constraint delivery_events_org_source_event_key
    unique (org_id, source, provider_event_id);

alter table webhook_nonces drop constraint webhook_nonces_pkey;
alter table webhook_nonces add column org_id bigint references orgs (id);
-- A token taken before this migration stays taken, for every org that has such an endpoint, so
-- a request replayed across the upgrade is still recognised (tokens are forgotten after 2 hours).
insert into webhook_nonces (org_id, source, nonce, body_sha256, seen_at)
    select distinct e.org_id, n.source, n.nonce, n.body_sha256, n.seen_at
    from webhook_nonces n join webhook_endpoints e on e.source = n.source
    where n.org_id is null;
delete from webhook_nonces where org_id is null;
alter table webhook_nonces alter column org_id set not null;
alter table webhook_nonces add primary key (org_id, source, nonce);
