-- The delivery workers' view of their SMTP relay, kept by its circuit breaker for the dashboard:
-- one row per relay (host:port), written on each change of state by whichever process saw it.
create table relay_health (
    relay text primary key check (length(relay) between 1 and 300),
    state text not null check (state in ('healthy', 'open')),
    -- Unknown outcomes and connection failures in a row when the circuit opened.
    failures int not null default 0 check (failures >= 0),
    -- Failed probes since it opened; the pause before the next probe grows with them.
    probes_failed int not null default 0 check (probes_failed >= 0),
    opened_at timestamptz,
    next_probe_at timestamptz,
    last_error text check (length(last_error) <= 1000),
    updated_at timestamptz not null default now()
);

-- A campaign the breaker paused because its relay kept failing: the reason shown on its page.
-- The breaker resumes exactly these when a probe succeeds; any admin transition clears it.
alter table campaigns add column relay_pause_reason text check (length(relay_pause_reason) <= 500);
