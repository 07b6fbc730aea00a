-- Bounces mailed back: VERP envelope senders on an org's bounce domain, DSNs and ARF reports
-- as event sources, the relay's own message id kept from its 250 reply, and the campaign
-- safety valve (pause itself when bounce or complaint rates climb). Expand only: every column
-- is nullable or has a constant default, so no table is rewritten.

-- Mail to <local>+<token>@<bounce domain> is this org's: one org per domain.
alter table orgs
    add column bounce_domain text check (bounce_domain ~ '^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$'),
    -- A sending campaign pauses itself at these shares (percent of delivered) of hard bounces
    -- or complaints, once it has delivered this many (SES reviews at 5 % and 0.1 %).
    add column pause_bounce_pct float8 not null default 5
        check (pause_bounce_pct > 0 and pause_bounce_pct <= 100),
    add column pause_complaint_pct float8 not null default 0.1
        check (pause_complaint_pct > 0 and pause_complaint_pct <= 100),
    add column pause_min_delivered int not null default 500
        check (pause_min_delivered between 1 and 100000000);
create unique index orgs_bounce_domain on orgs (bounce_domain) where bounce_domain is not null;

-- The id a relay named in its 250 reply (SES `250 Ok <id>`, Postfix `queued as <id>`): how
-- its later webhook finds the delivery when it does not echo our Message-ID.
alter table deliveries add column relay_id text check (length(relay_id) <= 200);
create index deliveries_relay_id on deliveries (org_id, relay_id) where relay_id is not null;

alter table delivery_events drop constraint delivery_events_source_check;
alter table delivery_events add constraint delivery_events_source_check
    check (source in ('generic', 'mailgun', 'postmark', 'sendgrid', 'ses', 'dsn', 'arf'));
alter table delivery_events drop constraint delivery_events_matched_by_check;
alter table delivery_events add constraint delivery_events_matched_by_check
    check (matched_by in ('token', 'message_id', 'relay_id', 'recipient', 'none'));
-- A mailed report is verified only by our signed VERP token; one without it is kept and shown
-- but changes no suppression (job ids can be guessed, envelope senders forged).
alter table delivery_events add column verified boolean not null default true;
-- The campaign of the matched delivery, so its page counts bounces without a join.
alter table delivery_events add column campaign_id bigint;
create index delivery_events_campaign on delivery_events (campaign_id, kind)
    where campaign_id is not null;

-- Why the campaign paused itself (null: it never did). Kept after a resume: a campaign pauses
-- itself once, and an admin who resumes it has overruled the rates.
alter table campaigns add column pause_reason text check (length(pause_reason) <= 500);
