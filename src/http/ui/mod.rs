//! The operator console at `/ui/`: one page, its scripts and its style,
//! embedded in the binary (no CDN, no fonts fetched: it works on an
//! air-gapped cluster), using only the public HTTP routes from its own
//! origin — the holds' event stream, the budgets, the read-only explain and
//! the operators' release.
//!
//! Served on the gRPC port's HTTP door, or on its own address
//! (`--ui-listen`) with only the routes it uses ([`CONSOLE_ROUTES`]); off
//! with `--ui false`. Every answer carries a strict policy: scripts and
//! styles from this origin only (no inline script), no framing, no
//! sniffing, no referrer.

use std::convert::Infallible;

use axum::body::Body;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};

/// The console's assets: path under `/ui/`, media type, content.
const ASSETS: &[(&str, &str, &str)] = &[
    ("", "text/html; charset=utf-8", include_str!("assets/index.html")),
    (
        "index.html",
        "text/html; charset=utf-8",
        include_str!("assets/index.html"),
    ),
    (
        "console.css",
        "text/css; charset=utf-8",
        include_str!("assets/console.css"),
    ),
    (
        "console.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/console.js"),
    ),
    (
        "api.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/api.js"),
    ),
    (
        "holds.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/holds.js"),
    ),
    (
        "budgets.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/budgets.js"),
    ),
    (
        "explain.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/explain.js"),
    ),
    ("icon.svg", "image/svg+xml", include_str!("assets/icon.svg")),
];

/// The policy of every console answer: nothing but this origin's scripts,
/// styles, images and fetches; no plugins, no `<base>`, forms posted here
/// only, and no page may frame it (clickjacking a release button).
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; \
     frame-ancestors 'none'";

/// The HTTP routes the console uses: what its own listener (`--ui-listen`)
/// serves besides the pages. Nothing there places a hold or spends a
/// budget; releasing takes an operator.
pub const CONSOLE_ROUTES: &[&str] = &[
    "/v1/holds",
    "/v1/holds:watch",
    "/v1/holds/{id}",
    "/v1/budgets",
    "/v1/classify:explain",
    "/v1/catalogs",
    "/healthz",
    "/readyz",
];

/// Whether `path` is the console's (`/ui` or under `/ui/`).
pub fn is_ui_path(path: &str) -> bool {
    path == "/ui" || path.starts_with("/ui/")
}

/// Adds the console's paths to `router`: answered by [`answer`] when
/// `served`, else 404 saying where the console is (not a gRPC answer).
pub fn route(router: axum::Router, served: bool) -> axum::Router {
    let pages = tower::service_fn(move |req: Request<Body>| async move {
        Ok::<_, Infallible>(if served {
            answer(&req)
        } else {
            strict(
                StatusCode::NOT_FOUND,
                "text/plain; charset=utf-8",
                "the operator console is not served here: it is off (--ui false) or on its own address (--ui-listen)\n",
            )
        })
    });
    router
        .route_service("/ui", pages)
        .route_service("/ui/", pages)
        .route_service("/ui/{*asset}", pages)
}

/// The console's own listener (`--ui-listen`): its pages, and of the
/// door only [`CONSOLE_ROUTES`].
pub fn own_router(door: &super::HttpDoor) -> axum::Router {
    let api = door.only(CONSOLE_ROUTES);
    route(axum::Router::new(), true)
        .route_service("/v1/{*rest}", api.clone())
        .route_service("/healthz", api.clone())
        .route_service("/readyz", api)
}

/// The answer to a request for one of the console's paths: `/ui` moves to
/// `/ui/`; GET and HEAD only; 404 for an unknown asset.
pub fn answer(req: &Request<Body>) -> Response<Body> {
    let path = req.uri().path();
    if path == "/ui" {
        let mut r = strict(StatusCode::PERMANENT_REDIRECT, "text/plain; charset=utf-8", "");
        r.headers_mut()
            .insert(header::LOCATION, HeaderValue::from_static("/ui/"));
        return r;
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = strict(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            "the console's pages are read with GET\n",
        );
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    let name = path.strip_prefix("/ui/").unwrap_or_default();
    let mut r = match ASSETS.iter().find(|(n, _, _)| *n == name) {
        Some((_, media, body)) => strict(StatusCode::OK, media, body),
        None => strict(StatusCode::NOT_FOUND, "text/plain; charset=utf-8", "no such page\n"),
    };
    if req.method() == Method::HEAD {
        *r.body_mut() = Body::empty();
    }
    r
}

/// A response with the console's headers.
fn strict(status: StatusCode, media: &'static str, body: &'static str) -> Response<Body> {
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(media));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    // For browsers older than `frame-ancestors`.
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    // The assets change with the binary: always revalidated, never stale.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("cross-origin-opener-policy", HeaderValue::from_static("same-origin"));
    h.insert("cross-origin-resource-policy", HeaderValue::from_static("same-origin"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(method: Method, path: &str) -> Response<Body> {
        answer(&Request::builder().method(method).uri(path).body(Body::empty()).unwrap())
    }

    #[test]
    fn every_asset_is_served_with_its_type_and_the_strict_headers() {
        for (name, media, _) in ASSETS {
            let r = get(Method::GET, &format!("/ui/{name}"));
            assert_eq!(r.status(), StatusCode::OK, "{name}");
            assert_eq!(r.headers()[header::CONTENT_TYPE], *media, "{name}");
            assert_eq!(r.headers()[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
            let csp = r.headers()[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
            assert!(csp.starts_with("default-src 'self';") && csp.contains("frame-ancestors 'none'"));
            assert!(!csp.contains("unsafe"), "{csp}");
        }
    }

    #[test]
    fn the_page_loads_only_its_own_files() {
        let page = ASSETS[0].2;
        assert!(!page.contains("<script>"), "no inline script");
        assert!(!page.contains(" style="), "no inline style");
        assert!(
            !page.contains("http://") && !page.contains("https://"),
            "nothing from elsewhere"
        );
        for (_, media, body) in ASSETS {
            if media.starts_with("text/javascript") {
                for imported in body.lines().filter_map(|l| l.split("from \"./").nth(1)) {
                    let file = imported.split('"').next().unwrap();
                    assert!(
                        ASSETS.iter().any(|(n, _, _)| *n == file),
                        "{file} is imported and served"
                    );
                }
                assert!(
                    !body.contains("eval(") && !body.contains("innerHTML"),
                    "no markup from data"
                );
            }
        }
    }

    #[test]
    fn redirect_methods_and_unknown_assets() {
        let r = get(Method::GET, "/ui");
        assert_eq!(r.status(), StatusCode::PERMANENT_REDIRECT);
        assert_eq!(r.headers()[header::LOCATION], "/ui/");
        let r = get(Method::POST, "/ui/");
        assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(r.headers()[header::ALLOW], "GET, HEAD");
        assert_eq!(get(Method::GET, "/ui/../v1/holds").status(), StatusCode::NOT_FOUND);
        assert_eq!(get(Method::HEAD, "/ui/console.js").status(), StatusCode::OK);
        assert!(is_ui_path("/ui") && is_ui_path("/ui/x.js") && !is_ui_path("/uix"));
    }

    #[test]
    fn console_routes_are_routes_of_the_door() {
        for route in CONSOLE_ROUTES {
            assert!(super::super::routes::ROUTES.iter().any(|(_, r)| r == route), "{route}");
        }
    }
}
