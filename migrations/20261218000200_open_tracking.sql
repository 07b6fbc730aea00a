-- Open tracking, a separate opt-in from click tracking and off unless an owner turns it on: the
-- HTML of campaign mail carries a one-pixel image whose address is signed for its delivery, and
-- each fetch of it is a row. Opens are unreliable (many clients block images, and some fetch
-- every image on arrival), so machines' fetches are kept apart as for clicks. An erasure keeps
-- the open counted but forgets whose it was.
alter table orgs add column open_tracking boolean not null default false;

create table message_opens (
    id bigint generated always as identity primary key,
    org_id bigint not null references orgs (id),
    campaign_id bigint,
    -- Null once the subscriber is erased.
    job_id text check (length(job_id) <= 300),
    subscriber_id bigint,
    opened_at timestamptz not null default now(),
    scanner boolean not null,
    foreign key (org_id, campaign_id) references campaigns (org_id, id) on delete cascade
);
create index message_opens_campaign on message_opens (org_id, campaign_id);
create index message_opens_subscriber on message_opens (org_id, subscriber_id)
    where subscriber_id is not null;
