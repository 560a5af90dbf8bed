//! The web UI: the files of `ui/` (plain ES modules, CSS and the vendored
//! uPlot), embedded in the binary with `include_bytes!` and served at `/`
//! (`index.html`) and `/ui/<path>`.
//!
//! In: GET requests. Out: the embedded file with its content type, or 404.
//! The assets hold no data and need no token (like `/healthz`); everything
//! the UI shows comes from `/api/*` with the bearer token the page sends
//! (`ui/js/api.js`: `?token=` or `#token=` once, then `localStorage`). They
//! are served on the HTTP listener, so TLS is whatever `/api` has. A
//! content security policy keeps the page to its own origin.

use axum::extract::Path;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

/// (path under `ui/`, content type, bytes). A test checks every file of
/// `ui/` is listed.
const ASSETS: &[(&str, &str, &[u8])] = &[
    ("index.html", HTML, include_bytes!("../../../ui/index.html")),
    ("style.css", CSS, include_bytes!("../../../ui/style.css")),
    ("js/app.js", JS, include_bytes!("../../../ui/js/app.js")),
    ("js/api.js", JS, include_bytes!("../../../ui/js/api.js")),
    ("js/fmt.js", JS, include_bytes!("../../../ui/js/fmt.js")),
    ("js/jobs.js", JS, include_bytes!("../../../ui/js/jobs.js")),
    ("js/job.js", JS, include_bytes!("../../../ui/js/job.js")),
    ("js/tabs.js", JS, include_bytes!("../../../ui/js/tabs.js")),
    ("js/views.js", JS, include_bytes!("../../../ui/js/views.js")),
    (
        "js/profiler.js",
        JS,
        include_bytes!("../../../ui/js/profiler.js"),
    ),
    ("js/fleet.js", JS, include_bytes!("../../../ui/js/fleet.js")),
    (
        "js/heatmap.js",
        JS,
        include_bytes!("../../../ui/js/heatmap.js"),
    ),
    ("js/bars.js", JS, include_bytes!("../../../ui/js/bars.js")),
    (
        "js/charts.js",
        JS,
        include_bytes!("../../../ui/js/charts.js"),
    ),
    (
        "vendor/uplot/uPlot.iife.min.js",
        JS,
        include_bytes!("../../../ui/vendor/uplot/uPlot.iife.min.js"),
    ),
    (
        "vendor/uplot/uPlot.min.css",
        CSS,
        include_bytes!("../../../ui/vendor/uplot/uPlot.min.css"),
    ),
    (
        "vendor/uplot/LICENSE",
        TEXT,
        include_bytes!("../../../ui/vendor/uplot/LICENSE"),
    ),
];

const HTML: &str = "text/html; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const TEXT: &str = "text/plain; charset=utf-8";

/// Scripts, styles and data from this origin only; uPlot sets inline styles.
const CSP: &str = "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; \
                   object-src 'none'; base-uri 'none'; frame-ancestors 'none'";

fn serve(path: &str) -> Response {
    match ASSETS.iter().find(|a| a.0 == path) {
        Some((_, content_type, body)) => (
            [
                (header::CONTENT_TYPE, *content_type),
                // Assets change with the binary; revalidation is cheap on a LAN.
                (header::CACHE_CONTROL, "no-cache"),
                (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
                (header::CONTENT_SECURITY_POLICY, CSP),
            ],
            *body,
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, format!("no UI file {path:?}\n")).into_response(),
    }
}

pub(super) async fn index() -> Response {
    serve("index.html")
}

pub(super) async fn asset(Path(path): Path<String>) -> Response {
    serve(&path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(dir: &std::path::Path, root: &std::path::Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).expect("read ui/") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                files(&p, root, out);
            } else {
                let rel = p.strip_prefix(root).expect("under ui/");
                out.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }

    #[test]
    fn every_ui_file_is_embedded() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../ui");
        let mut on_disk = Vec::new();
        files(&root, &root, &mut on_disk);
        on_disk.sort();
        let mut listed: Vec<String> = ASSETS.iter().map(|a| a.0.to_owned()).collect();
        listed.sort();
        assert_eq!(on_disk, listed, "ui/ and ASSETS differ");
    }

    #[tokio::test]
    async fn assets_have_types_and_unknown_paths_are_404() {
        let r = index().await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()[header::CONTENT_TYPE], HTML);
        let r = serve("js/app.js");
        assert_eq!(r.headers()[header::CONTENT_TYPE], JS);
        assert!(r.headers().contains_key(header::CONTENT_SECURITY_POLICY));
        assert_eq!(serve("../Cargo.toml").status(), StatusCode::NOT_FOUND);
        assert_eq!(serve("js/nope.js").status(), StatusCode::NOT_FOUND);
    }
}
