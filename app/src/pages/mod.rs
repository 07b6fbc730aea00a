mod audit_log;
mod campaign;
mod campaign_bin;
mod campaign_editor;
mod campaign_preview;
mod campaign_workflow;
mod campaigns;
mod deliveries;
mod digest_resend;
mod digests;
mod invite;
mod layout;
mod login;
mod overview;
mod placeholder;
mod settings;

use leptos::prelude::*;
use leptos_meta::{provide_meta_context, MetaTags, Stylesheet, Title};
use leptos_router::components::{ParentRoute, Route, Router, Routes};
use leptos_router::{path, SsrMode};

/// ISO weekdays, 1 = Monday, as `digest_weekday` stores them.
const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// The result line of a server action: green for done, red for the error (never internals:
/// `AppError` carries only what the user may read).
fn action_outcome(
    r: Option<Result<String, crate::error::AppError>>,
    test: &'static str,
) -> impl IntoView {
    r.map(|r| match r {
        Ok(msg) => view! { <p role="status" data-test=test class="mb-4 rounded bg-green-50 px-3 py-2 text-sm text-green-800">{msg}</p> }.into_any(),
        Err(e) => view! { <p role="alert" data-test=test class="mb-4 rounded bg-red-50 px-3 py-2 text-sm text-red-700">{e.to_string()}</p> }.into_any(),
    })
}

/// The HTML document around the app (server side).
pub fn shell(options: LeptosOptions) -> impl IntoView {
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8"/>
                <meta name="viewport" content="width=device-width, initial-scale=1"/>
                <link rel="icon" type="image/svg+xml" href="/favicon.svg"/>
                <AutoReload options=options.clone()/>
                <HydrationScripts options/>
                <MetaTags/>
            </head>
            <body class="bg-slate-50 text-slate-900 antialiased">
                <App/>
            </body>
        </html>
    }
}

#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    // Effects run only in the browser: this attribute tells tests (and people) the page is live.
    let (hydrated, set_hydrated) = signal(false);
    Effect::new(move |_| set_hydrated.set(true));
    view! {
        <Stylesheet id="leptos" href="/pkg/mailroom.css"/>
        <Title text="Mailroom"/>
        <div id="app" data-hydrated=move || hydrated.get().to_string()>
            <Router>
                <Routes fallback=|| view! { <placeholder::NotFound/> }>
                    <Route path=path!("/login") view=login::LoginPage/>
                    <Route path=path!("/invite/:token") view=invite::InvitePage ssr=SsrMode::Async/>
                    <ParentRoute path=path!("") view=layout::Layout>
                        <Route path=path!("") view=overview::OverviewPage/>
                        <Route path=path!("campaigns") view=campaigns::CampaignsPage/>
                        <Route path=path!("campaigns/bin") view=campaign_bin::BinPage ssr=SsrMode::Async/>
                        <Route path=path!("campaigns/:id") view=campaign::CampaignPage ssr=SsrMode::Async/>
                        <Route path=path!("campaigns/:id/edit") view=campaign_editor::EditorPage ssr=SsrMode::Async/>
                        <Route path=path!("digests") view=digests::DigestsPage ssr=SsrMode::Async/>
                        <Route path=path!("digests/resend") view=digest_resend::ResendPage ssr=SsrMode::Async/>
                        <Route path=path!("audience") view=|| view! { <placeholder::Placeholder title="Audience" issue=6/> }/>
                        // Async: rendered whole on the server, so the filtered list reads without JavaScript.
                        <Route path=path!("deliveries") view=deliveries::DeliveriesPage ssr=SsrMode::Async/>
                        <Route path=path!("deliveries/message") view=deliveries::CapturedPage ssr=SsrMode::Async/>
                        <Route path=path!("settings") view=settings::SettingsPage ssr=SsrMode::Async/>
                        <Route path=path!("settings/audit") view=audit_log::AuditPage ssr=SsrMode::Async/>
                    </ParentRoute>
                </Routes>
            </Router>
        </div>
    }
}
