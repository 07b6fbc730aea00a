-- Click tracking, off unless an owner turns it on: links in campaign mail become signed
-- redirects (the target inside the signed token, so never an open redirect), and each click is
-- a row. Clicks by link scanners and prefetchers are kept apart (`scanner`). An erasure keeps
-- the click but forgets whose it was.
alter table orgs add column click_tracking boolean not null default false;

create table link_clicks (
    id bigint generated always as identity primary key,
    org_id bigint not null references orgs (id),
    campaign_id bigint,
    -- Null once the subscriber is erased.
    job_id text check (length(job_id) <= 300),
    subscriber_id bigint,
    url text not null check (length(url) <= 2000),
    clicked_at timestamptz not null default now(),
    scanner boolean not null,
    foreign key (org_id, campaign_id) references campaigns (org_id, id) on delete cascade
);
create index link_clicks_campaign on link_clicks (org_id, campaign_id, url);
create index link_clicks_subscriber on link_clicks (org_id, subscriber_id) where subscriber_id is not null;

alter table webhook_out_endpoints drop constraint webhook_out_endpoints_event_types_check;
alter table webhook_out_endpoints add constraint webhook_out_endpoints_event_types_check check (
    cardinality(event_types) between 1 and 20
    and event_types <@ array['message.delivered', 'message.failed', 'message.unknown',
                             'message.bounced', 'message.complained',
                             'subscriber.unsubscribed', 'subscriber.suppressed',
                             'subscriber.confirmed', 'subscriber.erased',
                             'campaign.sent', 'campaign.paused', 'link.clicked',
                             'webhook.test']::text[]);

-- A person's click (scanners' are not reported).
create function webhook_clicks_inserted() returns trigger language plpgsql as $$
begin
    if not exists (select 1 from webhook_out_endpoints where enabled) then
        return null;
    end if;
    perform webhook_fan_out(coalesce(jsonb_agg(jsonb_build_object(
        'org_id', n.org_id, 'type', 'link.clicked', 'key', 'click:' || n.id,
        'timestamp', webhook_time(n.clicked_at),
        'data', jsonb_build_object('url', n.url, 'job_id', n.job_id,
                                   'campaign_id', n.campaign_id,
                                   'subscriber_id', n.subscriber_id))), '[]'))
    from new_rows n where not n.scanner;
    return null;
end $$;
create trigger link_clicks_webhooks after insert on link_clicks
    referencing new table as new_rows
    for each statement execute function webhook_clicks_inserted();
