-- Failed sign-ins, counted per scope ('pair' = address + client IP, 'ip', 'account' = address)
-- in the database so that every replica sees the same counts. Keyed by what was typed, not by
-- user id: an unknown address is throttled exactly like a real one. The policy (free failures,
-- doubling locks, caps) lives in app/src/domain/login_throttle.rs.
create table login_throttle (
    scope text not null check (scope in ('pair', 'ip', 'account')),
    key text not null,
    failures integer not null default 0 check (failures >= 0),
    last_failure_at timestamptz not null default now(),
    primary key (scope, key)
);

-- Old rows are swept by age.
create index login_throttle_last_failure_at on login_throttle (last_failure_at);
