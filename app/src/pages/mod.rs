mod campaigns;
mod deliveries;
mod digest_resend;
mod digests;
mod layout;
mod login;
mod overview;
mod placeholder;

use leptos::prelude::*;
use leptos_meta::{provide_meta_context, MetaTags, Stylesheet, Title};
use leptos_router::components::{ParentRoute, Route, Router, Routes};
use leptos_router::{path, SsrMode};

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
                    <ParentRoute path=path!("") view=layout::Layout>
                        <Route path=path!("") view=overview::OverviewPage/>
                        <Route path=path!("campaigns") view=campaigns::CampaignsPage/>
                        <Route path=path!("digests") view=digests::DigestsPage ssr=SsrMode::Async/>
                        <Route path=path!("digests/resend") view=digest_resend::ResendPage ssr=SsrMode::Async/>
                        <Route path=path!("audience") view=|| view! { <placeholder::Placeholder title="Audience" issue=6/> }/>
                        // Async: rendered whole on the server, so the filtered list reads without JavaScript.
                        <Route path=path!("deliveries") view=deliveries::DeliveriesPage ssr=SsrMode::Async/>
                        <Route path=path!("deliveries/message") view=deliveries::CapturedPage ssr=SsrMode::Async/>
                        <Route path=path!("settings") view=|| view! { <placeholder::Placeholder title="Settings" issue=7/> }/>
                    </ParentRoute>
                </Routes>
            </Router>
        </div>
    }
}
