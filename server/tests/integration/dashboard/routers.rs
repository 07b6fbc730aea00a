//! Routers built while pages render. Building one walks the app with leptos' resource loading
//! suppressed process-wide (leptos-rs/leptos#4773); a page whose data was first asked for in
//! that moment waited forever (a 408 at the request timeout). The route list is generated once
//! per process, so building more routers leaves pages alone.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use app::domain::Role;

use crate::support::helpers::test_db;
use crate::support::org::TestOrg;
use crate::support::test_app::{build_router, client, spawn_app_with};

#[tokio::test]
async fn pages_render_while_other_routers_are_being_built() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    // A short request timeout: a page that waits forever answers 408 in 3 s, not 30.
    let edge = mailroom::http::Edge {
        request_timeout: std::time::Duration::from_secs(3),
        ..mailroom::http::Edge::default()
    };
    let app = spawn_app_with(pool.clone(), crate::support::test_app::api_config(), edge).await;
    let c = acme.owner().signed_in(&app).await;
    // Routers built back to back on a thread of their own for as long as the pages load.
    let (stop, built) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicUsize::new(0)),
    );
    let builder = std::thread::spawn({
        let (stop, built, pool) = (stop.clone(), built.clone(), pool.clone());
        move || {
            while !stop.load(Ordering::Relaxed) {
                drop(build_router(pool.clone()));
                built.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    let mut answers = Vec::new();
    for round in 0..40 {
        for path in ["/", "/campaigns", "/deliveries", "/audience", "/digests"] {
            let r = c.get(format!("{}{path}", app.base)).send().await.unwrap();
            answers.push((round, path, r.status().as_u16()));
        }
    }
    stop.store(true, Ordering::Relaxed);
    builder.join().unwrap();
    assert!(built.load(Ordering::Relaxed) > 0);
    let failed: Vec<_> = answers.iter().filter(|(_, _, s)| *s != 200).collect();
    assert!(
        failed.is_empty(),
        "pages that did not answer 200: {failed:?}"
    );
    // The client is still good for a page after the builds stopped.
    let r = client(&app)
        .get(format!("{}/login", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}
