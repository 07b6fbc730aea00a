/// Settings › API tokens: create (shown once), list, revoke.
mod api_tokens;
/// Audience: the subscribers list, adding a subscriber, and the export.
mod audience;
/// Settings › Audit log, filtered and paged through the URL.
mod audit_log;
mod automations;
/// Campaigns: the list, one campaign live, its editor, workflow panel and preview, the bin.
mod campaign;
/// Deliveries: counts, the filtered list, an admin's retry, captured messages.
mod deliveries;
/// The forced resend's confirmation, rendered with a key the server issued.
mod digest_resend;
/// Digests: this week's digest, the schedule, admins' opt-ins and the history.
mod digests;
/// Feedback (the Settings › Relays page): webhook endpoints, the soft-bounce rule, the reports.
mod feedback;
/// One CSV import: its progress, then what it did and the rows it refused.
mod import;
/// The public set-password page reached from an invitation or reset mail.
mod invite;
/// The signed-in pages' frame (navigation, who is signed in) and which paths it covers.
pub mod layout;
/// Lists: create, rename, delete; import a CSV file into one, export it.
mod lists;
/// The sign-in page, pointing to first-run setup while no organisation exists.
mod login;
/// The page for unknown paths (a server render answers 404).
mod not_found;
/// The Overview: the organisation's figures at a glance.
mod overview;
/// Segments: the list and the builder with its live count.
mod segments;
/// Settings › sender authentication: envelope sender, DKIM key and its DNS record.
mod sender_auth;
/// Settings: sender identity, time zone, and the users.
mod settings;
/// The first-run page, behind the one-time setup token.
mod setup;
/// One subscriber: edit, the campaigns that reached them, remove or erase.
mod subscriber;
/// The suppression list: search, add, remove.
mod suppressions;
/// Transactional templates: the list, a new one, the editor with its preview.
mod templates;
/// Settings › Event webhooks.
mod webhooks;

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
        Ok(msg) => view! { <p role="status" data-test=test class="mb-4 rounded bg-green-50 px-3 py-2 text-sm text-green-800 dark:bg-green-950 dark:text-green-200">{msg}</p> }.into_any(),
        Err(e) => view! { <p role="alert" data-test=test class="mb-4 rounded bg-red-50 px-3 py-2 text-sm text-red-700 dark:bg-red-950 dark:text-red-300">{e.to_string()}</p> }.into_any(),
    })
}

/// A credential shown the one time it exists (a new API token, a webhook secret): what it is,
/// then the value itself, to copy.
#[component]
fn ShownOnce(
    /// What was made, ending with a full stop.
    what: String,
    value: String,
    /// The `data-test` of the panel and of the value.
    test: &'static str,
    value_test: &'static str,
) -> impl IntoView {
    view! {
        <div role="status" data-test=test class="mb-4 rounded bg-green-50 px-3 py-2 text-sm text-green-800 dark:bg-green-950 dark:text-green-200">
            <p>{format!("{what} Copy it now: it is shown only this once.")}</p>
            <p class="font-mono break-all" data-test=value_test>{value}</p>
        </div>
    }
}

/// A page's data that could not be read, in place of the page: the error as the user may see it.
fn load_error(e: crate::error::AppError) -> AnyView {
    view! { <p role="alert" class="text-red-700 dark:text-red-300">{e.to_string()}</p> }.into_any()
}

/// The text inside a `<textarea>`. tachys writes the children of raw-text elements unescaped
/// on the server, so a stored value holding `</textarea>` would end the element and the rest
/// would become live markup; the browser decodes entities inside a textarea, so the escaped
/// form shows the same text. In the browser the child is a text node and is never parsed.
fn textarea_text(s: &str) -> String {
    #[cfg(feature = "ssr")]
    {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    }
    #[cfg(not(feature = "ssr"))]
    {
        s.to_owned()
    }
}

/// 1234567 → "1,234,567": numbers as people read them.
fn thousands(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn numbers_are_grouped_by_thousands() {
        let t = super::thousands;
        assert_eq!(
            [t(0), t(999), t(1000), t(1234567), t(-12345)],
            ["0", "999", "1,000", "1,234,567", "-12,345"]
        );
    }

    /// A body that closes the textarea stays inside it in the server's HTML.
    #[cfg(feature = "ssr")]
    #[test]
    fn a_textarea_holding_its_own_end_tag_stays_one_textarea() {
        use leptos::prelude::*;
        let body = "</textarea></form><form action=\"/api/set_user_role\"><button>x</button> &amp;";
        let html = view! { <textarea>{super::textarea_text(body)}</textarea> }.to_html();
        assert_eq!(html.matches("</textarea>").count(), 1, "{html}");
        assert!(!html.contains("<form"), "{html}");
        assert!(html.contains("&lt;/textarea&gt;&lt;/form&gt;"), "{html}");
        assert!(
            html.contains("&amp;amp;"),
            "entities are kept as typed: {html}"
        );
    }
}

/// `path` with the query parameters that have a value (a GET form's URL, a page link).
fn href_with(path: &str, params: &[(&str, &str)]) -> String {
    let parts: Vec<String> = params
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{k}={}", leptos_router::location::Url::escape(v)))
        .collect();
    if parts.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{}", parts.join("&"))
    }
}

/// Reads one field of the query string.
type QueryField<'a> = &'a dyn Fn(&str) -> String;

/// The page's query string read into `T` (a missing field reads as empty), re-read only when
/// the URL changes.
fn query_of<T>(read: fn(QueryField<'_>) -> T) -> Memo<T>
where
    T: PartialEq + Send + Sync + 'static,
{
    let params = leptos_router::hooks::use_query_map();
    Memo::new(move |_| {
        let p = params.read();
        read(&|k| p.get(k).unwrap_or_default())
    })
}

/// A query field as a filter: empty means not given.
fn given(s: String) -> Option<String> {
    Some(s).filter(|s| !s.is_empty())
}

/// A table on a card: its column headings, and its rows (`<tr>`s) as children.
#[component]
fn DataTable(
    #[prop(optional)] id: Option<&'static str>,
    #[prop(optional)] test: Option<&'static str>,
    headings: &'static [&'static str],
    children: Children,
) -> impl IntoView {
    view! {
        <table id=id data-test=test class="w-full rounded bg-white text-sm shadow dark:bg-slate-900">
            <thead class="text-left text-slate-500 dark:text-slate-400">
                <tr>{headings.iter().map(|h| view! { <th class="p-3">{*h}</th> }).collect_view()}</tr>
            </thead>
            <tbody>{children()}</tbody>
        </table>
    }
}

/// A destructive action behind a confirmation: a `<details>` panel (it opens without
/// JavaScript) holding the action's form.
#[component]
fn Confirm(
    /// The button that opens the panel.
    label: &'static str,
    /// What the panel asks.
    question: String,
    test: &'static str,
    children: Children,
) -> impl IntoView {
    let aria = question.clone();
    view! {
        <details class="relative inline-block" data-test=test>
            <summary class="cursor-pointer list-none rounded border border-slate-300 px-2 py-1 text-sm hover:bg-slate-100 dark:border-slate-600 dark:hover:bg-slate-800">
                {label}
            </summary>
            <div role="dialog" aria-label=aria
                class="absolute right-0 z-10 mt-2 w-80 whitespace-normal rounded-lg border border-slate-200 bg-white p-4 text-sm shadow-lg dark:border-slate-700 dark:bg-slate-900">
                <p class="mb-3">{question}</p>
                {children()}
            </div>
        </details>
    }
}

/// The button inside a [`Confirm`] panel that carries the destructive action out, with the
/// one field that names what it acts on (`name`=`value`).
#[component]
fn DangerSubmit(
    label: &'static str,
    test: &'static str,
    name: &'static str,
    #[prop(into)] value: String,
) -> impl IntoView {
    view! {
        <input type="hidden" name=name value=value/>
        <button type="submit" data-test=test class="rounded bg-red-600 px-3 py-1.5 font-medium text-white hover:bg-red-700">{label}</button>
    }
}

/// The HTML document around the app (server side).
pub fn shell(options: LeptosOptions) -> impl IntoView {
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8"/>
                <meta name="viewport" content="width=device-width, initial-scale=1"/>
                // Dark mode follows the system: form controls and scrollbars too.
                <meta name="color-scheme" content="light dark"/>
                <link rel="icon" type="image/svg+xml" href="/favicon.svg"/>
                <AutoReload options=options.clone()/>
                <HydrationScripts options/>
                <MetaTags/>
            </head>
            <body class="bg-slate-50 text-slate-900 antialiased dark:bg-slate-950 dark:text-slate-100">
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
                <Routes fallback=|| view! { <not_found::NotFound/> }>
                    <Route path=path!("/login") view=login::LoginPage/>
                    <Route path=path!("/invite/:token") view=invite::InvitePage ssr=SsrMode::Async/>
                    <Route path=path!("/setup") view=setup::SetupPage ssr=SsrMode::Async/>
                    // Every signed-in page renders whole before its head is sent (`Async`). The
                    // server sends a browser without a session to /login before rendering; the
                    // layout's redirect covers a session that ends during the render, and must
                    // reach the status line.
                    <ParentRoute path=path!("") view=layout::Layout>
                        <Route path=path!("") view=overview::OverviewPage ssr=SsrMode::Async/>
                        <Route path=path!("campaigns") view=campaign::list::CampaignsPage ssr=SsrMode::Async/>
                        <Route path=path!("campaigns/bin") view=campaign::bin::BinPage ssr=SsrMode::Async/>
                        <Route path=path!("campaigns/:id") view=campaign::CampaignPage ssr=SsrMode::Async/>
                        <Route path=path!("campaigns/:id/edit") view=campaign::editor::EditorPage ssr=SsrMode::Async/>
                        <Route path=path!("automations") view=automations::AutomationsPage ssr=SsrMode::Async/>
                        <Route path=path!("automations/:id") view=automations::AutomationPage ssr=SsrMode::Async/>
                        <Route path=path!("digests") view=digests::DigestsPage ssr=SsrMode::Async/>
                        <Route path=path!("digests/resend") view=digest_resend::ResendPage ssr=SsrMode::Async/>
                        <Route path=path!("audience") view=audience::SubscribersPage ssr=SsrMode::Async/>
                        <Route path=path!("audience/subscribers/:id") view=subscriber::SubscriberPage ssr=SsrMode::Async/>
                        <Route path=path!("audience/lists") view=lists::ListsPage ssr=SsrMode::Async/>
                        <Route path=path!("audience/imports/:id") view=import::ImportPage ssr=SsrMode::Async/>
                        <Route path=path!("audience/suppressions") view=suppressions::SuppressionsPage ssr=SsrMode::Async/>
                        <Route path=path!("audience/segments") view=segments::SegmentsPage ssr=SsrMode::Async/>
                        <Route path=path!("audience/segments/:id") view=segments::SegmentBuilderPage ssr=SsrMode::Async/>
                        // Async: rendered whole on the server, so the filtered list reads without JavaScript.
                        <Route path=path!("deliveries") view=deliveries::DeliveriesPage ssr=SsrMode::Async/>
                        <Route path=path!("deliveries/message") view=deliveries::CapturedPage ssr=SsrMode::Async/>
                        <Route path=path!("templates") view=templates::TemplatesPage ssr=SsrMode::Async/>
                        <Route path=path!("templates/:id") view=templates::TemplatePage ssr=SsrMode::Async/>
                        <Route path=path!("settings") view=settings::SettingsPage ssr=SsrMode::Async/>
                        <Route path=path!("settings/audit") view=audit_log::AuditPage ssr=SsrMode::Async/>
                        <Route path=path!("settings/relays") view=feedback::FeedbackPage ssr=SsrMode::Async/>
                        <Route path=path!("settings/api") view=api_tokens::ApiTokensPage ssr=SsrMode::Async/>
                        <Route path=path!("settings/webhooks") view=webhooks::WebhooksPage ssr=SsrMode::Async/>
                    </ParentRoute>
                </Routes>
            </Router>
        </div>
    }
}
