use std::path::PathBuf;

use anyhow::anyhow;

use crate::cli::{
    Cli, Command, OrgAddArgs, OrgCommand, ServeArgs, UserAddArgs, UserCommand, UserPasswordArgs,
};
use crate::http;
use crate::ops::database::{Database, Migrations};
use crate::ops::demo;
use crate::ops::secret::Secret;
use crate::ops::shutdown::Shutdown;
use crate::workers::host;

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match &cli.command {
        Command::Serve(args) => serve(&cli, args).await,
        Command::Worker(args) => {
            allow_fake_clock("--digest-now", args.digest_now)?;
            allow_fake_clock("--automation-now", args.automation_now)?;
            let shutdown = Shutdown::on_signals()?;
            let transport = args.transport(cli.captured_dir())?;
            let bounce_imap = args.bounce_imap()?;
            let db = Database::open(&cli.database(), Migrations::Tolerant).await?;
            let keys = match unsubscribe_keys(&db, args).await {
                Ok(keys) => keys,
                Err(e) => return db.close().await.and(Err(e)),
            };
            host::run(
                db.pool.clone(),
                args.plan(transport, keys, cli.captured_dir(), bounce_imap),
                host::Mode::Worker,
                shutdown,
            )
            .await;
            db.close().await
        }
        Command::Migrate => {
            let db = Database::open(&cli.database(), Migrations::Strict).await?;
            println!("migrations are up to date");
            db.close().await
        }
        Command::Demo => {
            let db = Database::open(&cli.database(), Migrations::Tolerant).await?;
            let result = demo::seed(&db.pool).await;
            db.close().await?;
            match result? {
                Some(logins) => println!("{logins}"),
                None => println!("the demo organisations exist already (their passwords were printed when they were made; `mailroom user add` makes another login)"),
            }
            Ok(())
        }
        Command::Org(OrgCommand::Add(args)) => {
            let db = Database::open(&cli.database(), Migrations::Tolerant).await?;
            let result = org_add(&db, args).await;
            db.close().await?;
            result
        }
        Command::User(UserCommand::Add(args)) => {
            let db = Database::open(&cli.database(), Migrations::Tolerant).await?;
            let result = user_add(&db, args).await;
            db.close().await?;
            result
        }
        Command::DigestTick(args) => {
            allow_fake_clock("--now", args.now)?;
            let db = Database::open(&cli.database(), Migrations::Tolerant).await?;
            let started = std::time::Instant::now();
            let result = app::digest::tick(
                &db.pool,
                args.now,
                args.chunk.max(1),
                app::digest::Templates::builtin(),
            )
            .await;
            db.close().await?;
            let r = result?;
            println!(
                "{}",
                serde_json::json!({
                    "claimed": r.claimed,
                    "skipped": r.skipped,
                    "recipients": r.recipients,
                    "failed_orgs": r.failed_orgs,
                    "seconds": started.elapsed().as_secs_f64(),
                })
            );
            Ok(())
        }
        Command::Backup(args) => crate::ops::backup::backup(&cli, args).await,
        Command::Restore(args) => crate::ops::backup::restore(&cli, args).await,
        Command::User(UserCommand::Password(args)) => {
            let db = Database::open(&cli.database(), Migrations::Tolerant).await?;
            let result = user_password(&db, args).await;
            db.close().await?;
            result
        }
    }
}

/// The unsubscribe signing keys (callers stop the embedded database cleanly on an error, such
/// as a bad `MAILROOM_UNSUBSCRIBE_KEYS`).
async fn unsubscribe_keys(
    db: &Database,
    args: &crate::cli::WorkerArgs,
) -> anyhow::Result<app::unsubscribe::Keys> {
    crate::http::unsubscribe::load_keys(
        &db.pool,
        args.unsubscribe_keys.as_ref().map(Secret::expose),
    )
    .await
}

async fn serve(cli: &Cli, args: &ServeArgs) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    allow_fake_clock("--digest-now", args.worker.digest_now)?;
    allow_fake_clock("--automation-now", args.worker.automation_now)?;
    raise_open_file_limit();
    let shutdown = Shutdown::on_signals()?;
    // Bind first: a port in use is reported before any database work starts.
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| {
            anyhow!(
                "cannot listen on {}: {e}: choose another address with --listen or MAILROOM_LISTEN",
                args.listen
            )
        })?;
    let addr = listener.local_addr()?;
    let site = Site::find(args.site_root.clone())?;
    let transport = args.worker.transport(cli.captured_dir())?;
    let bounce_imap = args.worker.bounce_imap()?;
    let db = Database::open(&cli.database(), Migrations::Tolerant).await?;
    let keys = match unsubscribe_keys(&db, &args.worker).await {
        Ok(keys) => keys,
        Err(e) => return db.close().await.and(Err(e)),
    };
    let edge = http::Edge {
        trust_proxy: args.trust_proxy,
        request_timeout: std::time::Duration::from_secs(args.request_timeout_seconds),
        listen: crate::http::listen::Limits {
            header_read_timeout: std::time::Duration::from_secs(args.header_read_timeout_seconds),
            per_client: if args.trust_proxy {
                0
            } else {
                args.max_connections_per_client
            },
        },
        allowed_hosts: allowed_hosts(args),
        metrics_token: args.metrics_token.clone(),
        api_limits: crate::rest::Limits {
            // At least 0.01: a smaller rate is refused when the flag is parsed.
            per_second: args.api_rate_per_second,
            burst: args.api_burst.max(1.0),
        },
        signup_limits: crate::http::signup::Limits {
            per_hour: args.signup_per_hour.max(0.01),
            burst: args.signup_burst.max(1.0),
        },
    };
    let app = http::build(
        http::Settings {
            pool: db.pool.clone(),
            site_root: site.root(),
            embedded_site: matches!(site, Site::Embedded),
            // Set by `cargo leptos watch`.
            dev: std::env::var("LEPTOS_ENV").is_ok_and(|v| v.eq_ignore_ascii_case("dev")),
            unsubscribe_keys: keys.clone(),
            edge: edge.clone(),
            api: app::api::ApiConfig {
                secure_cookies: args.secure_cookies,
                captured_dir: Some(cli.captured_dir()),
                campaign_bin_days: args.worker.campaign_bin_days,
                public_url: args.worker.public_url.clone(),
            },
        },
        addr,
        shutdown.clone(),
    );
    let bounces = match args.bounce_listen {
        Some(at) => match tokio::net::TcpListener::bind(at).await {
            Ok(l) => {
                let cfg = crate::feedback::listener::Config {
                    hostname: url::Url::parse(&args.worker.public_url)
                        .ok()
                        .and_then(|u| u.host_str().map(str::to_owned))
                        .unwrap_or_else(|| "mailroom".into()),
                    max_size: args.bounce_max_size,
                    max_connections: usize::try_from(args.bounce_max_connections)
                        .unwrap_or(usize::MAX),
                    per_client: args.bounce_max_connections_per_client,
                    idle: std::time::Duration::from_secs(args.bounce_idle_seconds),
                };
                if cfg.per_client.saturating_mul(2) > cfg.max_connections {
                    tracing::warn!(
                        per_client = cfg.per_client,
                        max = cfg.max_connections,
                        "one client may hold half or more of the bounce listener's connections: \
                         lower --bounce-max-connections-per-client"
                    );
                }
                tracing::info!(addr = %l.local_addr()?, "bounce intake listening");
                Some(tokio::spawn(crate::feedback::listener::serve(
                    l,
                    db.pool.clone(),
                    cfg,
                    shutdown.clone(),
                )))
            }
            Err(e) => {
                let e = anyhow!("cannot listen for bounces on {at}: {e}: choose another address with --bounce-listen or MAILROOM_BOUNCE_LISTEN");
                return db.close().await.and(Err(e));
            }
        },
        None => None,
    };
    let workers = (!args.no_workers).then(|| {
        tokio::spawn(host::run(
            db.pool.clone(),
            args.worker
                .plan(transport, keys, cli.captured_dir(), bounce_imap),
            host::Mode::Serve,
            shutdown.clone(),
        ))
    });
    tracing::info!(
        elapsed_ms = started.elapsed().as_millis() as u64,
        workers = !args.no_workers,
        site = %site,
        "ready"
    );
    if let Err(e) = announce_first_run(&db.pool, &args.worker.public_url).await {
        tracing::warn!(error = %e, "cannot check for a first run");
    }
    println!("Mailroom is ready at http://{addr}");
    // The peer's address is the client's, unless --trust-proxy (login throttling counts by it).
    crate::http::listen::serve(listener, app, edge.listen, shutdown.clone()).await;
    if let Some(workers) = workers {
        let _ = workers.await;
    }
    if let Some(bounces) = bounces {
        let _ = bounces.await;
    }
    db.close().await
}

/// With no organisation in the database, prints where to create the first one and the one-time
/// setup token that page asks for (every replica prints the same one; it is used up there).
async fn announce_first_run(pool: &sqlx::PgPool, public_url: &str) -> sqlx::Result<()> {
    use app::api::setup::SETUP_SECRET;
    if !app::db::orgs::none_exist(pool).await? {
        return Ok(());
    }
    let fresh = app::auth::new_session_token();
    let stored = app::db::secrets::ensure(pool, SETUP_SECRET, fresh.as_bytes()).await?;
    let token = stored
        .first()
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .unwrap_or(fresh);
    let url = format!("{}/setup", public_url.trim_end_matches('/'));
    tracing::warn!(%url, "no organisation yet: open the first-run page with the setup token printed below");
    println!("No organisation yet: open {url} and enter the one-time setup token {token}");
    println!("(or create one with `mailroom org add`)");
    Ok(())
}

/// The host names the dashboard answers for: --public-url's, loopback, the listen address and
/// --allowed-hosts; none (any) when that lists `*`.
fn allowed_hosts(args: &ServeArgs) -> Vec<String> {
    if args.allowed_hosts.iter().any(|h| h.trim() == "*") {
        return Vec::new();
    }
    let public = url::Url::parse(&args.worker.public_url)
        .ok()
        .and_then(|u| u.host_str().map(http::host_name));
    let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1"]
        .into_iter()
        .map(String::from)
        .chain(public)
        .chain((!args.listen.ip().is_unspecified()).then(|| args.listen.ip().to_string()))
        .chain(args.allowed_hosts.iter().map(|h| http::host_name(h)))
        .filter(|h| !h.is_empty())
        .collect();
    hosts.sort();
    hosts.dedup();
    hosts
}

/// Every connection is a file descriptor: take the most the system allows this process (the
/// usual soft limit, 1,024, is far below the hard one).
fn raise_open_file_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => tracing::info!(from = soft, to = hard, "raised the open file limit"),
            Err(e) => tracing::warn!(error = %e, soft, hard, "cannot raise the open file limit"),
        },
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "cannot read the open file limit"),
    }
}

/// Where the dashboard's built files come from.
enum Site {
    /// Built into this executable (a release build by cargo-leptos).
    Embedded,
    Dir(PathBuf),
}

impl Site {
    /// The flag (an operator's explicit choice), else the site inside the executable, else
    /// `LEPTOS_SITE_ROOT` (set by cargo-leptos), `site/` beside the executable's profile
    /// directory, `./target/site`.
    fn find(flag: Option<PathBuf>) -> anyhow::Result<Site> {
        let has_site = |dir: &PathBuf| dir.join("pkg").join("mailroom.js").is_file();
        if let Some(dir) = flag {
            return if has_site(&dir) {
                Ok(Site::Dir(dir))
            } else {
                Err(anyhow!(
                    "--site-root: {} has no pkg/mailroom.js: build the site with `cargo leptos build --release`",
                    dir.display()
                ))
            };
        }
        if crate::http::site_assets::embedded() {
            return Ok(Site::Embedded);
        }
        let candidates = std::env::var_os("LEPTOS_SITE_ROOT")
            .map(PathBuf::from)
            .into_iter()
            .chain(
                std::env::current_exe()
                    .ok()
                    .and_then(|exe| Some(exe.parent()?.parent()?.join("site"))),
            )
            .chain(Some(PathBuf::from("target/site")));
        let mut tried = Vec::new();
        for dir in candidates {
            if has_site(&dir) {
                return Ok(Site::Dir(dir));
            }
            tried.push(dir.display().to_string());
        }
        Err(anyhow!(
            "this executable has no dashboard built in, and its built files (pkg/mailroom.js) were not found in {}: build with `cargo leptos build --release`, or point --site-root at them",
            tried.join(", ")
        ))
    }

    /// Leptos's site root: only read for files on disk.
    fn root(&self) -> String {
        match self {
            Site::Embedded => String::new(),
            Site::Dir(dir) => dir.to_string_lossy().into_owned(),
        }
    }
}

impl std::fmt::Display for Site {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Site::Embedded => f.write_str("built in"),
            Site::Dir(dir) => write!(f, "{}", dir.display()),
        }
    }
}

/// A flag that replaces the database clock is for tests only: a wrong clock sends missed weeks
/// late or claims weeks early.
fn allow_fake_clock(
    flag: &str,
    value: Option<chrono::DateTime<chrono::Utc>>,
) -> anyhow::Result<()> {
    if value.is_some() && std::env::var("MAILROOM_ALLOW_FAKE_CLOCK").as_deref() != Ok("1") {
        anyhow::bail!("{flag} replaces the database clock and is for tests only (a wrong clock sends missed weeks late or claims weeks early); set MAILROOM_ALLOW_FAKE_CLOCK=1 to use it");
    }
    Ok(())
}

/// The password given (as long as the dashboard asks) or a generated one, and whether it was
/// generated (then it is printed once).
fn password_or_generated(given: Option<&Secret>, flag: &str) -> anyhow::Result<(String, bool)> {
    use app::api::invites::MIN_PASSWORD;
    match given.map(Secret::expose) {
        Some(p) if p.chars().count() >= MIN_PASSWORD => Ok((p.to_owned(), false)),
        Some(_) => Err(anyhow!("{flag}: use at least {MIN_PASSWORD} characters")),
        None => Ok((demo::new_password(), true)),
    }
}

/// A new organisation and its first owner, in one transaction (a refusal leaves neither).
async fn org_add(db: &Database, args: &OrgAddArgs) -> anyhow::Result<()> {
    use app::db::orgs::{SetupError, SetupField};
    use app::domain::{org, EmailAddress};
    let from =
        EmailAddress::parse(&args.from_address).map_err(|e| anyhow!("--from-address: {e}"))?;
    let owner =
        EmailAddress::parse(&args.owner_email).map_err(|e| anyhow!("--owner-email: {e}"))?;
    let slug = org::slug(&args.slug).map_err(|e| anyhow!("--slug: {e}"))?;
    let name = org::name(&args.name, "--name").map_err(|e| anyhow!("{e}"))?;
    let from_name = org::name(args.from_name.as_deref().unwrap_or(&name), "--from-name")
        .map_err(|e| anyhow!("{e}"))?;
    let (password, generated) =
        password_or_generated(args.owner_password.as_ref(), "--owner-password")?;
    let hash = app::auth::hash_password(&password)
        .map_err(|e| anyhow!("cannot hash the password: {e}"))?;
    let mut tx = db.pool.begin().await?;
    let new_org = app::db::orgs::NewOrg {
        name: &name,
        slug: &slug,
        timezone: args.timezone.trim(),
        from_name: &from_name,
        from_address: from.as_str(),
    };
    let new_owner = app::db::orgs::NewOwner {
        email: &owner,
        name: args.owner_name.trim(),
        password_hash: &hash,
    };
    app::db::orgs::create_with_owner(&mut tx, new_org, new_owner, "cli")
        .await
        .map_err(|e| match e {
            SetupError::Field(field, message) => {
                let flag = match field {
                    SetupField::Slug => "--slug",
                    SetupField::Timezone => "--timezone",
                    SetupField::OwnerEmail => "--owner-email",
                };
                anyhow!("{flag}: {message}")
            }
            SetupError::Db(e) => e.into(),
        })?;
    tx.commit().await?;
    if generated {
        println!("created {slug} ({name}) with owner {owner}; password (shown once): {password}");
    } else {
        println!("created {slug} ({name}) with owner {owner}");
    }
    Ok(())
}

async fn user_add(db: &Database, args: &UserAddArgs) -> anyhow::Result<()> {
    let email =
        app::domain::EmailAddress::parse(&args.email).map_err(|e| anyhow!("--email: {e}"))?;
    let role: app::domain::Role = args
        .role
        .parse()
        .map_err(|e: String| anyhow!("--role: {e}"))?;
    let org_id = app::db::orgs::id_by_slug(&db.pool, &args.org)
        .await?
        .ok_or_else(|| {
            anyhow!(
                "--org: there is no organisation with the short name “{}”",
                args.org
            )
        })?;
    let (password, generated) = password_or_generated(args.password.as_ref(), "--password")?;
    let hash = app::auth::hash_password(&password)
        .map_err(|e| anyhow!("cannot hash the password: {e}"))?;
    let mut tx = db.pool.begin().await?;
    let user = app::db::user::NewUser {
        org_id,
        email: &email,
        name: &args.name,
        role,
        password_hash: &hash,
    };
    let id = app::db::user::create(&mut tx, user)
        .await
        .map_err(|e| anyhow!("{e}"))?;
    app::db::audit::record(
        &mut tx,
        app::db::audit::Entry {
            org_id,
            actor_id: None,
            api_token_id: None,
            action: app::domain::AuditAction::UserAdd,
            object_type: "user",
            object_id: Some(id.to_string()),
            before: None,
            after: Some(
                serde_json::json!({ "email": email.as_str(), "role": role.as_str(), "via": "cli" }),
            ),
        },
    )
    .await?;
    tx.commit().await?;
    if generated {
        println!(
            "added {email} ({role}) to {}; password (shown once): {password}",
            args.org
        );
    } else {
        println!("added {email} ({role}) to {}", args.org);
    }
    Ok(())
}

async fn user_password(db: &Database, args: &UserPasswordArgs) -> anyhow::Result<()> {
    let email =
        app::domain::EmailAddress::parse(&args.email).map_err(|e| anyhow!("--email: {e}"))?;
    let password = demo::new_password();
    let hash = app::auth::hash_password(&password)
        .map_err(|e| anyhow!("cannot hash the password: {e}"))?;
    if !app::db::user::set_password(&db.pool, &email, &hash).await? {
        return Err(anyhow!("--email: there is no user {email}"));
    }
    println!("new password for {email} (shown once): {password}");
    Ok(())
}
