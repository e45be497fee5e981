//! `/ui`: a web view of the debug pages, for people.
//!
//! Four files embedded in the binary (`ui/index.html`, `ui/app.css`, `ui/app.js` and the icon
//! `ui/favicon.svg`: plain
//! HTML, CSS and JavaScript, no framework, nothing fetched from elsewhere) that draw the
//! mesh from the debug pages' JSON: `/debug/registryz`, `/debug/endpointz`, `/debug/syncz`,
//! `/debug/configz` and `/debug/push_status`, polled every 2 seconds. The view adds no data
//! page of its own: the pushes' timing is `push_status`'s `after_publication`.
//!
//! The files hold no mesh data, but they answer only those the debug pages could answer:
//! loopback peers, and other peers when `--debug-token-file` is set (they then need the token
//! for the data, which the script sends as `Authorization: Bearer`; see `ui/app.js` for where
//! it keeps it). Without a token file another host gets the debug pages' 403. Every answer
//! carries a Content-Security-Policy that lets the page load its own script and style and
//! fetch from its own origin only, and nothing else (no inline script, no frames, no forms
//! sent anywhere).

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::trust::{self, DebugToken};

/// The policy every `/ui` answer carries: the page's own files and the debug pages' JSON,
/// nothing inline, nothing from another origin.
pub(crate) const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

const INDEX: &str = include_str!("ui/index.html");
const CSS: &str = include_str!("ui/app.css");
const JS: &str = include_str!("ui/app.js");
const ICON: &str = include_str!("ui/favicon.svg");

/// The `/ui` routes, answering those [`trust::may_ask`] lets ask.
pub(crate) fn router<S: Clone + Send + Sync + 'static>(token: Option<DebugToken>) -> Router<S> {
    Router::new()
        .route("/ui", get(|| file("text/html; charset=utf-8", INDEX)))
        .route("/ui/", get(|| file("text/html; charset=utf-8", INDEX)))
        .route("/ui/app.css", get(|| file("text/css; charset=utf-8", CSS)))
        .route(
            "/ui/app.js",
            get(|| file("text/javascript; charset=utf-8", JS)),
        )
        .route("/ui/favicon.svg", get(|| file("image/svg+xml", ICON)))
        .route_layer(middleware::from_fn_with_state(token, may_ask))
}

async fn file(content_type: &'static str, body: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_TYPE, content_type),
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// Lets a peer load the page when it could read the debug pages with a token: loopback, or
/// any peer once a token file is configured.
async fn may_ask(
    State(token): State<Option<DebugToken>>,
    request: Request,
    next: Next,
) -> Response {
    match trust::may_ask(token.as_ref(), trust::peer(&request)) {
        Ok(()) => next.run(request).await,
        Err(body) => (StatusCode::FORBIDDEN, body).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_files_load_only_from_their_own_paths() {
        assert!(INDEX.contains(r#"<script src="/ui/app.js""#), "{INDEX}");
        assert!(INDEX.contains(r#"href="/ui/app.css""#), "{INDEX}");
        // SVG's namespace is a name, not an address the page loads.
        let js = JS.replace("\"http://www.w3.org/2000/svg\"", "SVG");
        let icon = ICON.replace("\"http://www.w3.org/2000/svg\"", "SVG");
        let files = [
            ("index.html", INDEX),
            ("app.css", CSS),
            ("app.js", &*js),
            ("favicon.svg", &*icon),
        ];
        for (name, text) in files {
            for foreign in [
                "http://", "https://", "//cdn", "<style", "style=\"", "onclick",
            ] {
                assert!(!text.contains(foreign), "{name} has {foreign}");
            }
        }
        assert_eq!(
            INDEX.matches("<script").count(),
            1,
            "one script, from a file"
        );
        // Data is put in the page as text, never as markup.
        assert!(!JS.contains("innerHTML"), "app.js writes innerHTML");
    }
}
