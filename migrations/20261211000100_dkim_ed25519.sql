-- A second DKIM key, Ed25519 (RFC 8463), for dual signing: receivers that know ed25519-sha256
-- check that signature, the others the RSA one beside it. It signs for the RSA key's domain
-- under its own selector (one DNS name holds one key record).
alter table org_dkim
    add column ed25519_selector text,
    add column ed25519_private_key_pem text, -- PKCS#8; never leaves the server
    add column ed25519_public_key text,      -- base64 of the raw 32-byte key: the record's p=
    add constraint org_dkim_ed25519_whole check (
        (ed25519_selector is null) = (ed25519_private_key_pem is null)
        and (ed25519_selector is null) = (ed25519_public_key is null)),
    add constraint org_dkim_selectors_differ check (ed25519_selector <> selector);
