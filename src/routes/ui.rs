//! The page at `/ui/` (docs/ui.md): explore the graph, chat with the agent, add sources, see
//! the status. Its files are compiled into kbq from `ui/` (the libraries it uses are vendored
//! in `ui/vendor/` by `scripts/ui-vendor`, with their licences), so the page needs no network
//! but kbq. It is served without a key, as `/docs/` is: the page asks for one, and calls the
//! public API with it.

use std::sync::OnceLock;

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};

/// Where the page lives. Its files link each other relatively, so it needs the slash.
pub const PATH: &str = "/ui/";

/// What a browser may do on the page: its own scripts, styles and API only; no inline script
/// or style element, no frame around it, no plug-in. `blob:` is for the workers a graph
/// library may start; `data:` for the images the drawing makes.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; font-src 'self'; connect-src 'self'; worker-src 'self' blob:; manifest-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// Each file of the page: its path under `/ui/`, its content type, its bytes.
const FILES: &[(&str, &str, &[u8])] = &[
    (
        "",
        "text/html; charset=utf-8",
        include_bytes!("../../ui/index.html"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../ui/app.js"),
    ),
    (
        "style.css",
        "text/css; charset=utf-8",
        include_bytes!("../../ui/style.css"),
    ),
    (
        "favicon.svg",
        "image/svg+xml",
        include_bytes!("../../ui/favicon.svg"),
    ),
    (
        "vendor/sigma.min.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../ui/vendor/sigma.min.js"),
    ),
    (
        "vendor/graphology.umd.min.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../ui/vendor/graphology.umd.min.js"),
    ),
    (
        "vendor/graphology-library.min.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../ui/vendor/graphology-library.min.js"),
    ),
    (
        "vendor/LICENSES.txt",
        "text/plain; charset=utf-8",
        include_bytes!("../../ui/vendor/LICENSES.txt"),
    ),
];

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(web::resource("/ui").route(web::get().to(to_page)))
        .service(
            web::resource("/ui/{file:.*}")
                .route(web::get().to(file))
                .route(web::head().to(file)),
        );
}

/// `/ui` without the slash would break the page's relative links.
async fn to_page() -> HttpResponse {
    with_page_headers(
        HttpResponse::PermanentRedirect()
            .insert_header((header::LOCATION, PATH))
            .finish(),
    )
}

/// `res` with the headers every answer under `/ui` carries, a file's or not (docs/ui.md,
/// "Headers").
fn with_page_headers(mut res: HttpResponse) -> HttpResponse {
    use header::{HeaderName, HeaderValue};
    let headers = res.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
        (
            HeaderName::from_static("cross-origin-opener-policy"),
            "same-origin",
        ),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    res
}

/// Each file's entity tag: its content's hash, so that a browser asks again cheaply and an
/// upgraded kbq's files are fetched anew.
fn etags() -> &'static [String] {
    static TAGS: OnceLock<Vec<String>> = OnceLock::new();
    TAGS.get_or_init(|| {
        FILES
            .iter()
            .map(|(_, _, bytes)| {
                use sha2::Digest;
                let digest = sha2::Sha256::digest(bytes);
                format!("\"{}\"", hex::encode(&digest[..12]))
            })
            .collect()
    })
}

async fn file(req: HttpRequest, path: web::Path<String>) -> HttpResponse {
    let wanted = path.into_inner();
    let Some(i) = FILES.iter().position(|(name, _, _)| *name == wanted) else {
        return with_page_headers(actix_web::ResponseError::error_response(
            &crate::error::ApiError::new(
                crate::error::ErrorCode::NotFound,
                format!("the page has no file `{wanted}`"),
            ),
        ));
    };
    let (_, content_type, bytes) = FILES[i];
    let etag = &etags()[i];
    let unchanged = req
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag));
    let mut res = if unchanged {
        HttpResponse::NotModified()
    } else {
        HttpResponse::Ok()
    };
    res.insert_header((header::CONTENT_TYPE, content_type))
        .insert_header((header::ETAG, etag.as_str()))
        // Asked again each time, answered 304 while unchanged.
        .insert_header((header::CACHE_CONTROL, "no-cache"));
    with_page_headers(if unchanged {
        res.finish()
    } else {
        res.body(bytes)
    })
}
