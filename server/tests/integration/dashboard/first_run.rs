//! The first run of a real install, as an operator meets it: `mailroom serve` on an empty
//! database prints a one-time setup token; the first-run page creates the first organisation
//! and its owner with it (signed in at once), exactly once however many submissions race, and
//! refuses a wrong token, bad input and any later attempt.

use nix::sys::signal::Signal;

use crate::support::helpers::data_dir;
use crate::support::procs::{free_listen_address, start_serve};

#[test]
fn the_first_run_page_creates_one_organisation_with_the_token_from_the_log() {
    let dir = data_dir();
    let listen = free_listen_address();
    let base = format!("http://{listen}");
    let mut serve = start_serve("serve", dir.path(), &listen, &["--no-workers"]);
    serve.wait_log("one-time setup token", 120);
    let log = serve.log_text();
    let token = log
        .lines()
        .find_map(|l| l.split("one-time setup token ").nth(1))
        .unwrap()
        .trim()
        .to_owned();
    assert_eq!(token.len(), 43, "{log}");

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = || {
            reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap()
        };
        let c = client();
        let needed = c
            .post(format!("{base}/api/setup_needed"))
            .send()
            .await
            .unwrap();
        assert_eq!(needed.text().await.unwrap(), "true");
        let login = c
            .get(format!("{base}/login"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            login.contains("id=\"first-run\""),
            "the sign-in page offers the setup"
        );
        let form = |token: &str, slug: &str, owner: &str| {
            vec![
                ("token", token.to_owned()),
                ("name", "Acme Inc".to_owned()),
                ("slug", slug.to_owned()),
                ("timezone", "Europe/Berlin".to_owned()),
                ("owner_name", "Olga Owner".to_owned()),
                ("owner_email", owner.to_owned()),
                ("password", "a-long-password".to_owned()),
            ]
        };
        let submit = |fields: Vec<(&'static str, String)>| {
            let c = client();
            let url = format!("{base}/api/first_run_setup");
            async move {
                let r = c
                    .post(url)
                    .header("accept", "application/json")
                    .form(&fields)
                    .send()
                    .await
                    .unwrap();
                let cookie = r.headers().get("set-cookie").is_some();
                (r.status().as_u16(), cookie, r.text().await.unwrap())
            }
        };
        // Refused, naming what was wrong; nothing is created.
        for (fields, says) in [
            (
                form("wrong-token", "acme", "olga@acme.example"),
                "Setup token",
            ),
            (
                form(&token, "Not A Slug", "olga@acme.example"),
                "Short name",
            ),
            (
                form(&token, "acme", "not-an-address"),
                "Your e-mail address",
            ),
            (
                {
                    let mut f = form(&token, "acme", "olga@acme.example");
                    f[3].1 = "Mars/Olympus".into();
                    assert_eq!(f[3].0, "timezone");
                    f
                },
                "Time zone",
            ),
        ] {
            let (status, cookie, body) = submit(fields).await;
            assert_eq!(status, 422, "{body}");
            assert!(body.contains(says) && !cookie, "{says}: {body}");
        }
        // Five racing submissions with the right token: exactly one creates the organisation.
        let racing = (0..5).map(|i| {
            submit(form(
                &token,
                &format!("acme{i}"),
                &format!("o{i}@acme.example"),
            ))
        });
        let results = futures::future::join_all(racing).await;
        let won: Vec<_> = results.iter().filter(|r| r.1).collect();
        assert_eq!(won.len(), 1, "{results:?}");
        for (status, cookie, body) in &results {
            if !cookie {
                assert!([409, 422].contains(status), "{status}: {body}");
            }
        }
        let needed = c
            .post(format!("{base}/api/setup_needed"))
            .send()
            .await
            .unwrap();
        assert_eq!(needed.text().await.unwrap(), "false");
        // Any later attempt, even with the token, is refused.
        let (status, cookie, body) = submit(form(&token, "again", "x@acme.example")).await;
        assert_eq!((status, cookie), (409, false), "{body}");
        let page = c
            .get(format!("{base}/setup"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(page.contains("id=\"setup-done\"") && !page.contains("setup-form"));
    });
    serve.signal(Signal::SIGTERM);
    assert!(serve.wait_exit(60).success(), "{}", serve.log_text());
    // A restart on a database with an organisation prints no token.
    let mut again = start_serve("serve-again", dir.path(), &listen, &["--no-workers"]);
    // The first-run check comes before this line.
    again.wait_log("Mailroom is ready at", 120);
    assert!(
        !again.log_text().contains("setup token"),
        "{}",
        again.log_text()
    );
    again.signal(Signal::SIGTERM);
    assert!(again.wait_exit(60).success());
}
