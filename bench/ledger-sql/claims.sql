-- The lease rows of the hot and narrow variants: one per claim, holding its attempts.
create table delivery_claims (
    id bigint generated always as identity primary key,
    holder text not null,
    lease_until timestamptz not null,
    job_ids text[] not null,
    attempts int[] not null
);
create index delivery_claims_lease on delivery_claims (lease_until);
