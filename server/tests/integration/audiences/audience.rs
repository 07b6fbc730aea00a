//! Subscribers, lists and the suppression list over HTTP, as the Audience pages call them:
//! keyset pages with search and filters; add/edit with clear refusals; remove only before any
//! campaign reached them, erase after (the address a hash everywhere, still suppressed);
//! lists created, renamed, deleted (not while a live campaign sends to them); suppressions added
//! and removed; every change audited.

use app::api::lists::{CreateList, DeleteList, Lists, RenameList};
use app::api::subscribers::{
    AddSubscriber, EraseSubscriber, RemoveSubscriber, SaveSubscriber, Subscriber, Subscribers,
};
use app::api::suppressions::{AddSuppressions, RemoveSuppression, Suppressions};
use app::domain::Role;
use serde_json::Value;

use crate::support::helpers::test_db;
use crate::support::org::TestOrg;
use crate::support::test_app::{json, spawn_app, TestApp};

/// Calls a server function as the browser does; its answer as JSON.
async fn call<F>(app: &TestApp, c: &reqwest::Client, f: F) -> Value
where
    F: leptos::server_fn::ServerFn + serde::Serialize,
{
    json(&app.call_fn(c, f).await.1)
}

#[tokio::test]
async fn subscribers_page_by_keyset_filter_and_are_added_and_edited_with_clear_refusals() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner, Role::Admin, Role::Viewer]).await;
    let (lists, _) = acme.audience(120).await;
    let app = spawn_app(pool.clone()).await;
    let admin = acme.admin(0).signed_in(&app).await;
    let viewer = acme.users[2].signed_in(&app).await;

    // Keyset pages: newest first, 50 a page, every subscriber once.
    let mut seen = Vec::new();
    let mut before = String::new();
    loop {
        let page = call(
            &app,
            &viewer,
            Subscribers {
                q: None,
                status: None,
                list: None,
                before: Some(before.to_string()),
            },
        )
        .await;
        for r in page["rows"].as_array().unwrap() {
            seen.push(r["id"].as_i64().unwrap());
        }
        match page["next"].as_i64() {
            Some(n) => before = n.to_string(),
            None => break,
        }
    }
    let total: i64 = sqlx::query_scalar("select count(*) from subscribers")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(seen.len() as i64, total);
    assert!(
        seen.windows(2).all(|w| w[0] > w[1]),
        "newest first, no repeats"
    );

    // Search is by part of the address, case-insensitive; the list filter keeps its members.
    let found = call(
        &app,
        &viewer,
        Subscribers {
            q: Some("P11@".into()),
            status: None,
            list: None,
            before: None,
        },
    )
    .await;
    let emails: Vec<&str> = found["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["email"].as_str().unwrap())
        .collect();
    assert_eq!(emails, ["p11@example.org"]);
    let in_list = call(
        &app,
        &viewer,
        Subscribers {
            q: None,
            status: None,
            list: Some(lists[0].to_string().to_string()),
            before: None,
        },
    )
    .await;
    assert!(!in_list["rows"].as_array().unwrap().is_empty());
    let bad = call(
        &app,
        &viewer,
        Subscribers {
            q: None,
            status: Some("gone".into()),
            list: None,
            before: None,
        },
    )
    .await;
    assert!(
        bad["Invalid"].as_str().unwrap().contains("\"gone\""),
        "{bad}"
    );

    // Adding: a viewer cannot; a bad address or a long name is refused naming it; a duplicate too.
    assert_eq!(
        call(
            &app,
            &viewer,
            AddSubscriber {
                email: "new@example.org".into(),
                name: String::new(),
                lists: vec![]
            }
        )
        .await,
        "Forbidden"
    );
    let r = call(
        &app,
        &admin,
        AddSubscriber {
            email: "not an address".into(),
            name: String::new(),
            lists: vec![],
        },
    )
    .await;
    assert_eq!(
        r["Invalid"],
        "“not an address” is not a valid e-mail address."
    );
    let long = "x".repeat(201);
    let r = call(
        &app,
        &admin,
        AddSubscriber {
            email: "new@example.org".into(),
            name: long.to_string(),
            lists: vec![],
        },
    )
    .await;
    assert!(
        r["Invalid"].as_str().unwrap().contains("name is too long"),
        "{r}"
    );
    let id = call(
        &app,
        &admin,
        AddSubscriber {
            email: "New@Example.org".into(),
            name: "<b>New</b>".into(),
            lists: vec![lists[0]],
        },
    )
    .await
    .as_i64()
    .unwrap();
    let r = call(
        &app,
        &admin,
        AddSubscriber {
            email: "New@Example.org".into(),
            name: String::new(),
            lists: vec![],
        },
    )
    .await;
    assert_eq!(r["Conflict"], "New@Example.org is a subscriber already.");
    let d = call(&app, &viewer, Subscriber { id }).await;
    assert_eq!(
        (d["name"].as_str(), d["status"].as_str()),
        (Some("<b>New</b>"), Some("confirmed"))
    );
    let member_of: Vec<i64> = d["lists"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l[1] == true)
        .map(|l| l[0]["id"].as_i64().unwrap())
        .collect();
    assert_eq!(member_of, [lists[0]]);

    // Editing sets name, status and exactly the lists checked.
    let r = call(
        &app,
        &admin,
        SaveSubscriber {
            id,
            name: "Newt".into(),
            status: "unconfirmed".into(),
            lists: vec![lists[1], lists[2]],
        },
    )
    .await;
    assert_eq!(r, "Saved.");
    let d = call(&app, &viewer, Subscriber { id }).await;
    let mut member_of: Vec<i64> = d["lists"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l[1] == true)
        .map(|l| l[0]["id"].as_i64().unwrap())
        .collect();
    member_of.sort();
    assert_eq!(
        (d["name"].as_str(), d["status"].as_str(), member_of),
        (Some("Newt"), Some("unconfirmed"), vec![lists[1], lists[2]])
    );
    let r = call(
        &app,
        &admin,
        SaveSubscriber {
            id,
            name: String::new(),
            status: "vip".into(),
            lists: vec![],
        },
    )
    .await;
    assert!(r["Invalid"].as_str().unwrap().contains("\"vip\""), "{r}");
    let audit: Vec<String> =
        sqlx::query_scalar("select action from audit_log where object_id = $1 order by id")
            .bind(id.to_string())
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(audit, ["subscriber.add", "subscriber.edit"]);

    // Nobody mailed them yet: they can be removed.
    let r = call(&app, &admin, RemoveSubscriber { id }).await;
    assert_eq!(r, "New@Example.org was removed.");
    assert_eq!(call(&app, &viewer, Subscriber { id }).await, "NotFound");
}

#[tokio::test]
async fn a_reached_subscriber_cannot_be_removed_but_erased_everywhere_and_stays_suppressed() {
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let (lists, n) = acme.audience(10).await;
    let id = acme.campaign().to(&lists).approved().await.0;
    // The campaign starts and hands its sends off; nothing is delivered yet.
    let notifier = mailroom::workers::progress::Notifier::default();
    mailroom::workers::campaign::round(&pool, &crate::support::fixtures::cfg(), &notifier)
        .await
        .unwrap();
    let (subscriber, lower): (i64, String) = sqlx::query_as(
        "select subscriber_id, email_lower from sends where campaign_id = $1 order by id limit 1",
    )
    .bind(id)
    .fetch_one(&pool)
    .await
    .unwrap();
    let app = spawn_app(pool.clone()).await;
    let admin = acme.admin(0).signed_in(&app).await;

    let d = call(&app, &admin, Subscriber { id: subscriber }).await;
    assert_eq!(d["history"].as_array().unwrap().len(), 1, "{d}");
    assert_eq!(d["history"][0]["campaign_id"], id);
    let r = call(&app, &admin, RemoveSubscriber { id: subscriber }).await;
    assert!(
        r["Conflict"]
            .as_str()
            .unwrap()
            .contains("erase their personal data instead"),
        "{r}"
    );

    let r = call(&app, &admin, EraseSubscriber { id: subscriber }).await;
    assert!(
        r.as_str().unwrap().contains("personal data was erased"),
        "{r}"
    );
    let r = call(&app, &admin, EraseSubscriber { id: subscriber }).await;
    assert_eq!(r["Conflict"], "This subscriber was erased already.");
    // The address is nowhere in the subscriber, its sends or its deliveries.
    let left: i64 = sqlx::query_scalar(
        "select (select count(*) from subscribers where email_lower = $1 or name <> '' and id = $2)
              + (select count(*) from sends where email_lower = $1)
              + (select count(*) from deliveries where email_lower = $1 or recipient ilike $1)
              + (select count(*) from audit_log where after::text ilike '%' || $1 || '%')",
    )
    .bind(&lower)
    .bind(subscriber)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(left, 0);
    // It stays suppressed (the hash too, so what was queued for them is suppressed at claim).
    let suppressed: i64 = sqlx::query_scalar(
        "select count(*) from suppressions where email_lower in ($1, 'erased-' || encode(sha256(convert_to($1, 'UTF8')), 'hex'))",
    )
    .bind(&lower)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(suppressed, 2);
    let d = call(&app, &admin, Subscriber { id: subscriber }).await;
    assert!(
        d["erased"].is_string() && d["email"].as_str().unwrap().starts_with("erased-"),
        "{d}"
    );
    let r = call(
        &app,
        &admin,
        SaveSubscriber {
            id: subscriber,
            name: String::new(),
            status: "confirmed".into(),
            lists: vec![],
        },
    )
    .await;
    assert!(r["Conflict"].as_str().unwrap().contains("erased"), "{r}");
    // The campaign still accounts for everyone: the erased recipient ends suppressed, not sent.
    let sink = testkit::SmtpSink::start();
    let mut worker = mailroom::workers::delivery::Worker::new(
        pool.clone(),
        crate::support::fixtures::config(&sink),
        "t",
    );
    for _ in 0..50 {
        worker.drain().await.unwrap();
    }
    assert!(sink
        .messages()
        .iter()
        .all(|m| !m.to.iter().any(|t| t.to_lowercase().contains(&lower))));
    let suppressed_deliveries: i64 = sqlx::query_scalar(
        "select count(*) from deliveries where campaign_id = $1 and subscriber_id = $2 and status = 'suppressed'",
    )
    .bind(id)
    .bind(subscriber)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(suppressed_deliveries, 1);
    assert_eq!(sink.messages().len(), n - 1);
}

#[tokio::test]
async fn lists_are_created_renamed_and_deleted_but_not_under_a_live_campaign() {
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let org = acme.id.0;
    let app = spawn_app(pool.clone()).await;
    let admin = acme.admin(0).signed_in(&app).await;
    assert_eq!(
        call(
            &app,
            &admin,
            CreateList {
                name: "  News  ".into()
            }
        )
        .await,
        "List \"News\" created."
    );
    let r = call(
        &app,
        &admin,
        CreateList {
            name: "News".into(),
        },
    )
    .await;
    assert_eq!(r["Conflict"], "There is a list named \"News\" already.");
    let r = call(&app, &admin, CreateList { name: " ".into() }).await;
    assert!(r["Invalid"].as_str().unwrap().contains("empty"), "{r}");
    call(
        &app,
        &admin,
        CreateList {
            name: "Events".into(),
        },
    )
    .await;
    let all = call(&app, &admin, Lists {}).await;
    let id_of = |name: &str| {
        all["lists"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"] == name)
            .unwrap()["id"]
            .as_i64()
            .unwrap()
    };
    let (news, events) = (id_of("News"), id_of("Events"));
    let r = call(
        &app,
        &admin,
        RenameList {
            id: news,
            name: "Events".into(),
        },
    )
    .await;
    assert!(r["Conflict"].is_string(), "{r}");
    assert_eq!(
        call(
            &app,
            &admin,
            RenameList {
                id: news,
                name: "Newsletter".into()
            }
        )
        .await,
        "Renamed to \"Newsletter\"."
    );

    // A draft sending to Events keeps it; once the draft is gone, it can be deleted.
    let mut tx = pool.begin().await.unwrap();
    let draft = crate::support::helpers::draft(&mut tx, org, acme.admin(0).id.0, "Launch").await;
    sqlx::query("insert into campaign_lists (org_id, campaign_id, list_id) values ($1, $2, $3)")
        .bind(org)
        .bind(draft)
        .bind(events)
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let r = call(&app, &admin, DeleteList { id: events }).await;
    assert!(r["Conflict"].as_str().unwrap().contains("(Launch)"), "{r}");
    sqlx::query("update campaigns set status = 'cancelled' where id = $1")
        .bind(draft)
        .execute(&pool)
        .await
        .unwrap();
    let r = call(&app, &admin, DeleteList { id: events }).await;
    assert_eq!(
        r,
        "List \"Events\" deleted; its 0 members are still subscribers."
    );
    let actions: Vec<String> =
        sqlx::query_scalar("select action from audit_log where object_type = 'list' order by id")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        actions,
        ["list.create", "list.create", "list.rename", "list.delete"]
    );
}

#[tokio::test]
async fn suppressions_are_added_searched_and_removed_by_admins_only() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner, Role::Admin, Role::Viewer]).await;
    let app = spawn_app(pool.clone()).await;
    let admin = acme.admin(0).signed_in(&app).await;
    let viewer = acme.users[2].signed_in(&app).await;
    assert_eq!(
        call(
            &app,
            &viewer,
            AddSuppressions {
                addresses: "a@example.org".into()
            }
        )
        .await,
        "Forbidden"
    );
    let r = call(
        &app,
        &admin,
        AddSuppressions {
            addresses: "a@example.org, b@example.org\nnope".into(),
        },
    )
    .await;
    assert_eq!(r["Invalid"], "“nope” is not a valid e-mail address.");
    let r = call(
        &app,
        &admin,
        AddSuppressions {
            addresses: "A@example.org, b@example.org".into(),
        },
    )
    .await;
    assert_eq!(r, "2 suppressed.");
    let r = call(
        &app,
        &admin,
        AddSuppressions {
            addresses: "a@example.org\nc@example.org".into(),
        },
    )
    .await;
    assert_eq!(r, "1 suppressed; 1 already were.");
    let page = call(
        &app,
        &viewer,
        Suppressions {
            q: Some("A@".into()),
            after: None,
        },
    )
    .await;
    let rows = page["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0]["email"].as_str(), rows[0]["reason"].as_str()),
        (Some("a@example.org"), Some("manual"))
    );
    assert!(rows[0]["source"]
        .as_str()
        .unwrap()
        .contains(&acme.admin(0).email));
    assert_eq!(
        call(
            &app,
            &viewer,
            RemoveSuppression {
                email: "a@example.org".into()
            }
        )
        .await,
        "Forbidden"
    );
    assert_eq!(
        call(
            &app,
            &admin,
            RemoveSuppression {
                email: "a@example.org".into()
            }
        )
        .await,
        "a@example.org may be mailed again."
    );
    assert_eq!(
        call(
            &app,
            &admin,
            RemoveSuppression {
                email: "a@example.org".into()
            }
        )
        .await,
        "NotFound"
    );
    let left = call(
        &app,
        &viewer,
        Suppressions {
            q: None,
            after: None,
        },
    )
    .await;
    assert_eq!(left["rows"].as_array().unwrap().len(), 2);
}
