use std::fmt;

use anyhow::anyhow;
use rand::Rng;
use sqlx::PgPool;

use app::db;
use app::domain::{EmailAddress, Role};

pub struct Login {
    pub org: String,
    pub email: String,
    pub role: Role,
    pub password: String,
}

pub struct DemoLogins(pub Vec<Login>);

impl fmt::Display for DemoLogins {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "Demo logins (passwords are shown only this once):")?;
        for l in &self.0 {
            writeln!(
                f,
                "  {:<8} {:<7} {:<28} {}",
                l.org,
                l.role.as_str(),
                l.email,
                l.password
            )?;
        }
        Ok(())
    }
}

/// A password to print once: 16 letters and digits.
pub fn new_password() -> String {
    const ALPHABET: &[u8] = b"abcdefghjkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789";
    let mut rng = rand::thread_rng();
    (0..16)
        .map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())] as char)
        .collect()
}

struct OrgSpec {
    slug: &'static str,
    name: &'static str,
    timezone: &'static str,
    domain: &'static str,
    subscribers: usize,
    users: &'static [(&'static str, &'static str, Role)],
}

const ORGS: [OrgSpec; 2] = [
    OrgSpec {
        slug: "acme",
        name: "Acme Analytics",
        timezone: "Europe/Berlin",
        domain: "acme.example",
        subscribers: 3000,
        users: &[
            ("olivia", "Olivia Owner", Role::Owner),
            ("adam", "Adam Admin", Role::Admin),
            ("amy", "Amy Admin", Role::Admin),
            ("vera", "Vera Viewer", Role::Viewer),
        ],
    },
    OrgSpec {
        slug: "globex",
        name: "Globex Labs",
        timezone: "America/New_York",
        domain: "globex.example",
        subscribers: 1200,
        users: &[
            ("grace", "Grace Owner", Role::Owner),
            ("hank", "Hank Admin", Role::Admin),
        ],
    },
];

const MAIL_DOMAINS: [&str; 5] = [
    "example.com",
    "mail.example.org",
    "post.example.net",
    "inbox.example.io",
    "example.de",
];
const FIRST: [&str; 12] = [
    "ann", "ben", "chloé", "dev", "eva", "finn", "gus", "hana", "ivan", "jürgen", "kim", "lena",
];

/// Seeds the two demo organisations in one transaction, unless they exist. Returns the logins.
pub async fn seed(pool: &PgPool) -> anyhow::Result<Option<DemoLogins>> {
    if db::orgs::id_by_slug(pool, ORGS[0].slug).await?.is_some() {
        return Ok(None);
    }
    let mut logins = Vec::new();
    let mut tx = pool.begin().await?;
    for spec in &ORGS {
        let from = format!("news@{}", spec.domain);
        let org_id = db::orgs::create(
            &mut tx,
            db::orgs::NewOrg {
                name: spec.name,
                slug: spec.slug,
                timezone: spec.timezone,
                from_name: spec.name,
                from_address: &from,
            },
        )
        .await?;
        let mut owner = None;
        for (local, name, role) in spec.users {
            let email = EmailAddress::parse(&format!("{local}@{}", spec.domain))
                .map_err(|e| anyhow!("{e}"))?;
            let password = new_password();
            let hash = app::auth::hash_password(&password)
                .map_err(|e| anyhow!("cannot hash a password: {e}"))?;
            let id = db::user::create(
                &mut tx,
                db::user::NewUser {
                    org_id,
                    email: &email,
                    name,
                    role: *role,
                    password_hash: &hash,
                },
            )
            .await?;
            owner.get_or_insert(id);
            logins.push(Login {
                org: spec.slug.into(),
                email: email.to_string(),
                role: *role,
                password,
            });
        }
        let owner = owner.ok_or_else(|| anyhow!("a demo organisation needs a user"))?;
        let draft = seed_audience(&mut tx, org_id, owner, spec.subscribers).await?;
        if spec.slug == "acme" {
            seed_deliveries(&mut tx, org_id, draft, spec.domain).await?;
        }
        db::audit::record(
            &mut tx,
            db::audit::Entry {
                org_id,
                actor_id: None,
                api_token_id: None,
                action: app::domain::AuditAction::DemoSeed,
                object_type: "org",
                object_id: Some(org_id.to_string()),
                before: None,
                after: None,
            },
        )
        .await?;
    }
    tx.commit().await?;
    Ok(Some(DemoLogins(logins)))
}

/// Subscribers over three overlapping lists, with case-variant duplicates of some addresses
/// (the same person imported twice in different spelling), a few suppressions, and a draft.
async fn seed_audience(
    conn: &mut sqlx::PgConnection,
    org_id: i64,
    owner: i64,
    count: usize,
) -> anyhow::Result<i64> {
    let mut people = Vec::with_capacity(count + count / 25);
    for i in 0..count {
        let first = FIRST[i % FIRST.len()];
        let address = format!("{first}.{i}@{}", MAIL_DOMAINS[i % MAIL_DOMAINS.len()]);
        let email = EmailAddress::parse(&address).map_err(|e| anyhow!("{e}"))?;
        people.push((email, format!("{} {i}", capitalise(first))));
        if i % 25 == 0 {
            // Same mailbox, other letter case: a different subscriber row, one recipient.
            let variant =
                EmailAddress::parse(&address.to_uppercase()).map_err(|e| anyhow!("{e}"))?;
            people.push((variant, format!("{} {i} (old import)", capitalise(first))));
        }
    }
    let ids = db::audience::insert_subscribers(conn, org_id, &people).await?;
    let pick = |m: usize| {
        ids.iter()
            .enumerate()
            .filter(|(i, _)| i % m == 0)
            .map(|(_, id)| *id)
            .collect::<Vec<_>>()
    };
    let newsletter = db::audience::create_list(conn, org_id, "Newsletter").await?;
    let product = db::audience::create_list(conn, org_id, "Product updates").await?;
    let beta = db::audience::create_list(conn, org_id, "Beta testers").await?;
    db::audience::add_members(conn, org_id, newsletter, &pick(2)).await?;
    db::audience::add_members(conn, org_id, product, &pick(3)).await?;
    db::audience::add_members(conn, org_id, beta, &pick(7)).await?;
    for (n, (email, _)) in people
        .iter()
        .enumerate()
        .filter(|(n, _)| n % 97 == 5)
        .take(20)
    {
        let reason = if n % 2 == 0 {
            app::domain::SuppressionReason::Unsubscribed
        } else {
            app::domain::SuppressionReason::HardBounce
        };
        db::audience::suppress(conn, org_id, email, reason, "demo").await?;
    }
    let draft = db::campaign::create_draft(
        conn,
        db::campaign::NewDraft {
            org_id,
            author_id: owner,
            name: "December product update",
            subject: "What's new in December, {{ name }}",
            body: "Hello {{ name }},\n\nHere is what we shipped this month…\n",
            list_ids: &[newsletter, product],
        },
    )
    .await?;
    Ok(draft)
}

/// Test mails of the draft in every state the Deliveries page shows: delivered, two refused
/// (failed, with the server's reply), two whose worker was lost mid-send (unknown), and a few
/// still queued (a delivery worker, when running, sends or captures those).
async fn seed_deliveries(
    conn: &mut sqlx::PgConnection,
    org_id: i64,
    draft: i64,
    domain: &str,
) -> anyhow::Result<()> {
    use app::db::demo::DemoDelivery;
    use app::domain::{DeliveryStatus, JobId};
    let lost = "worker lost while the body was in flight";
    let rows: [(&str, DeliveryStatus, Option<String>); 10] = [
        (
            "olivia",
            DeliveryStatus::Delivered,
            Some("250 2.0.0 Ok: queued as 4Q8XJ21ZkNz9".into()),
        ),
        (
            "adam",
            DeliveryStatus::Delivered,
            Some("250 2.0.0 Ok: queued as 4Q8XJ24bTmz7".into()),
        ),
        (
            "vera",
            DeliveryStatus::Delivered,
            Some("250 2.0.0 Ok: queued as 4Q8XJ27dWqz2".into()),
        ),
        (
            "marketing",
            DeliveryStatus::Delivered,
            Some("250 2.0.0 Ok: queued as 4Q8XJ2BfYsz5".into()),
        ),
        ("former.intern", DeliveryStatus::Failed, None),
        ("old-sales", DeliveryStatus::Failed, None),
        ("support", DeliveryStatus::Unknown, None),
        ("billing", DeliveryStatus::Unknown, None),
        ("design", DeliveryStatus::Queued, None),
        ("qa", DeliveryStatus::Queued, None),
    ];
    for (i, (local, status, reply)) in rows.into_iter().enumerate() {
        let to = EmailAddress::parse(&format!("{local}@{domain}")).map_err(|e| anyhow!("{e}"))?;
        let job = JobId::test(draft, 1, &format!("demo{i}"), &to).map_err(|e| anyhow!("{e}"))?;
        let reply = match status {
            DeliveryStatus::Failed => Some(format!(
                "550 5.1.1 <{}>: Recipient address rejected: User unknown in virtual mailbox table",
                to.lower()
            )),
            _ => reply,
        };
        let delivery = DemoDelivery {
            job: &job,
            recipient: &to,
            status,
            attempt: i32::from(status != DeliveryStatus::Queued),
            last_error: (status == DeliveryStatus::Unknown).then_some(lost),
            smtp_reply: reply.as_deref(),
        };
        app::db::demo::delivery(conn, org_id, delivery).await?;
    }
    Ok(())
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}
