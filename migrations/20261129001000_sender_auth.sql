-- Sender authentication per org (issue 7): an optional DKIM key. The envelope sender lives in
-- `orgs.return_path` (null: the From address), a column the first schema already has.
-- Expand only: older replicas ignore the new table and keep sending unsigned.

-- One DKIM key per org, in its own row rather than in `secrets`: `secrets` holds the process's
-- own keys under global names, while this key belongs to an org (keyed by org_id like every
-- org-owned row, never listed with the process's secrets). Stored like those secrets: plain, in
-- the database every replica reads, never sent to a browser. The PEM is PKCS#1, normalised when
-- saved, so the sender parses it as is. Replacing the key turns signing off until the owner has
-- published the new DNS record and enables it again.
create table org_dkim (
    org_id bigint primary key references orgs (id),
    domain text not null,
    selector text not null,
    private_key_pem text not null,
    public_key text not null, -- base64 DER, the DNS record's p=; pages read this, never the PEM
    enabled boolean not null default false,
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now()
);
