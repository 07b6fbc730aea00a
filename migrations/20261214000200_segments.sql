-- Segments: saved, named, versioned filters (a `domain::segment::Group` as JSON), and
-- campaign audiences made of lists and segments, each included or excluded.
create table segments (
    id bigint generated always as identity primary key,
    org_id bigint not null references orgs (id),
    name text not null check (length(name) between 1 and 200),
    -- Bumped by every change of the definition; each version's definition is kept below, so a
    -- campaign approved against version 3 is sent to version 3 whatever happens after.
    version integer not null default 1,
    definition jsonb not null check (jsonb_typeof(definition) = 'object'),
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now(),
    deleted_at timestamptz,
    unique (org_id, id)
);
create unique index segments_name on segments (org_id, lower(name)) where deleted_at is null;
create trigger segments_updated_at before update on segments
    for each row execute function mailroom_set_updated_at();

create table segment_versions (
    org_id bigint not null,
    segment_id bigint not null,
    version integer not null,
    definition jsonb not null,
    created_at timestamptz not null default now(),
    primary key (segment_id, version),
    foreign key (org_id, segment_id) references segments (org_id, id)
);

-- A campaign's segments; `version` is frozen at approval (null while the campaign is edited:
-- the estimate reads the segment as it is).
create table campaign_segments (
    org_id bigint not null,
    campaign_id bigint not null,
    segment_id bigint not null,
    exclude boolean not null default false,
    version integer,
    primary key (campaign_id, segment_id),
    foreign key (org_id, campaign_id) references campaigns (org_id, id) on delete cascade,
    foreign key (org_id, segment_id) references segments (org_id, id)
);
create index campaign_segments_segment on campaign_segments (org_id, segment_id);

-- A list may now exclude its members instead of including them.
alter table campaign_lists add column exclude boolean not null default false;
-- The recipient count the approver was shown, beside the one materialised at the start.
alter table campaigns add column approved_estimate bigint;

-- Segment conditions on events ("did X, since when, how often") read events by name.
create index events_name on events (org_id, name, occurred_at, subscriber_id);
-- Engagement conditions read a subscriber's campaign deliveries.
create index deliveries_engagement on deliveries (org_id, subscriber_id, campaign_id)
    where kind = 'campaign';
