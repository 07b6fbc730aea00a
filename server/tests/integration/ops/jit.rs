use sqlx::PgPool;

use crate::support::helpers::empty_db;

/// A statement whose plan cost (about 10 million) passes the JIT threshold of PostgreSQL's
/// defaults (`jit_above_cost`, 100,000).
const COSTLY: &str = "explain (format json)
    select count(*) from generate_series(1, 1000) a, generate_series(1, 1000) b,
                         generate_series(1, 10) c where a + b > c";

async fn jit_in_plan(pool: &PgPool) -> Option<serde_json::Value> {
    let plan: serde_json::Value = sqlx::query_scalar(COSTLY).fetch_one(pool).await.unwrap();
    plan[0].get("JIT").cloned()
}

#[tokio::test]
async fn mailroom_connections_never_jit_compile_even_a_statement_past_the_thresholds() {
    let plain = empty_db().await;
    // On PostgreSQL's defaults the statement is compiled: what an inflated estimate costs
    // (checked where the server can compile at all, so the check below can fail).
    let available: bool = sqlx::query_scalar("select pg_jit_available()")
        .fetch_one(&plain)
        .await
        .unwrap();
    if available {
        let jit = jit_in_plan(&plain)
            .await
            .expect("a plain connection JIT-compiles the costly statement");
        assert!(jit["Functions"].as_i64().unwrap() > 0, "{jit}");
    }

    let options = (*plain.connect_options()).clone();
    let pool = mailroom::ops::database::connect(options).await.unwrap();
    let generic = mailroom::ops::database::generic_plans_pool(&pool, 2);
    for (name, pool) in [
        ("the main pool", &pool),
        ("the generic-plan pool", &generic),
    ] {
        // Connections held at once are distinct: each is checked, not only the first.
        let mut held = Vec::new();
        for _ in 0..2 {
            held.push(pool.acquire().await.unwrap());
        }
        for conn in &mut held {
            let plan: serde_json::Value = sqlx::query_scalar(COSTLY)
                .fetch_one(&mut **conn)
                .await
                .unwrap();
            assert_eq!(plan[0].get("JIT"), None, "{name} JIT-compiled it");
            let setting: String = sqlx::query_scalar("show jit")
                .fetch_one(&mut **conn)
                .await
                .unwrap();
            assert_eq!(setting, "off", "{name}");
        }
    }
}
