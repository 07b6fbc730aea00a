//! No text in a segment reaches the statement: attribute names, values, event names and
//! property names full of quotes, `$1`, `;`, comments, JSON path syntax and backslashes compile
//! to the same statement text as plain ones of the same shape, run without error, and match
//! exactly the subscribers whose data holds those very strings.

use app::db::segment;
use app::domain::segment::{Group, GroupOp, Node, PropertyTest, ValueTest};
use app::domain::{OrgId, Role};
use serde_json::json;

use crate::support::helpers::{org_with_users, test_db};

const HOSTILE: [&str; 10] = [
    "a'b",
    "'; drop table subscribers; --",
    "$1",
    "$2::text",
    "x) or (true",
    "/* c */",
    "{a,b}",
    "a->>'b'",
    "#>> '{a}'",
    "\\' or 1=1 --",
];

/// One tree of every condition that carries text, with `name` and `value` in each place.
fn tree(name: &str, value: &str) -> Group {
    let text = |v: &str| ValueTest::TextEquals { value: v.into() };
    Group {
        op: GroupOp::Any,
        children: vec![
            Node::Attribute {
                name: name.into(),
                test: text(value),
            },
            Node::Attribute {
                name: name.into(),
                test: ValueTest::TextIn {
                    values: vec![value.into(), "plain".into()],
                },
            },
            Node::Group(Group {
                op: GroupOp::All,
                children: vec![
                    Node::Attribute {
                        name: name.into(),
                        test: ValueTest::TextContains {
                            value: value.into(),
                        },
                    },
                    Node::Attribute {
                        name: name.into(),
                        test: ValueTest::TextStartsWith {
                            value: value.into(),
                        },
                    },
                ],
            }),
            Node::Event {
                name: "signed_in".into(),
                did: true,
                at_least: 1,
                within_days: None,
                property: Some(PropertyTest {
                    name: name.into(),
                    test: text(value),
                }),
                since_enrolment: false,
            },
        ],
    }
}

#[tokio::test]
async fn hostile_names_and_values_never_change_the_statement_and_match_only_themselves() {
    let pool = test_db().await;
    let (org, _) = org_with_users(&pool, "acme", &[Role::Owner]).await;
    let org = OrgId(org);
    let mut conn = pool.acquire().await.unwrap();
    let clock = segment::clock(&mut conn, org, None).await.unwrap();
    let plain = segment::count_query(org, &tree("plan", "pro"), &clock)
        .sql()
        .to_owned();
    // One subscriber per hostile string, holding it as an attribute's name and value.
    let mut ids = Vec::new();
    for (i, h) in HOSTILE.iter().enumerate() {
        let id: i64 = sqlx::query_scalar(
            "insert into subscribers (org_id, email, email_lower, attributes)
             values ($1, $2, $2, $3) returning id",
        )
        .bind(org)
        .bind(format!("p{i}@ex.org"))
        .bind(json!({ *h: *h, "plan": "pro" }))
        .fetch_one(&mut *conn)
        .await
        .unwrap();
        ids.push(id);
    }
    let tables_before: i64 =
        sqlx::query_scalar("select count(*) from pg_tables where schemaname = 'public'")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
    for (i, h) in HOSTILE.iter().enumerate() {
        for (name, value) in [(*h, "pro"), ("plan", *h), (*h, *h)] {
            let t = tree(name, value);
            assert!(t.check().is_ok(), "{name:?} {value:?}: {:?}", t.check());
            let q = segment::count_query(org, &t, &clock);
            assert_eq!(q.sql(), plain, "{name:?} / {value:?} changed the statement");
            assert!(!q.sql().contains(*h) || h.len() < 3, "{h:?} is in the text");
            let found = segment::ids(&mut conn, org, &t, &clock).await.unwrap();
            let expected: Vec<i64> = match (name == *h, value == *h) {
                // The hostile key holds its own string: only that subscriber.
                (true, true) => vec![ids[i]],
                // The hostile key holds its own string, not "pro": no one.
                (true, false) => vec![],
                // "plan" is "pro" for everyone, never the hostile value.
                _ => vec![],
            };
            assert_eq!(found, expected, "{name:?} / {value:?}");
        }
    }
    let tables_after: i64 =
        sqlx::query_scalar("select count(*) from pg_tables where schemaname = 'public'")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
    assert_eq!(tables_before, tables_after);
    // And the plain tree still matches everyone by "plan".
    let all = segment::ids(&mut conn, org, &tree("plan", "pro"), &clock)
        .await
        .unwrap();
    assert_eq!(all, ids);
}

#[tokio::test]
async fn a_nul_or_a_name_too_long_is_refused_by_the_check_naming_the_node() {
    for (name, value, path) in [
        ("a\u{0}", "x", "children[0].name"),
        ("plan", "x\u{0}", "children[0].test.value"),
        (&*"n".repeat(65), "x", "children[0].name"),
    ] {
        let e = tree(name, value).check().unwrap_err();
        assert_eq!(e.path, path, "{e}");
        assert!(!e.to_string().contains('\u{0}'));
    }
}
