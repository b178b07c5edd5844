//! API versions by path prefix (`/v1/...`, `/data/v1/...`), from config. A deprecated version's
//! responses carry `X-API-Deprecated: true`, `Deprecation` (RFC 9745), `Sunset` (RFC 8594) and
//! `Link` headers; from its sunset date every request under it gets 410 `version_sunset`.

use std::collections::BTreeMap;
use std::sync::Arc;

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::middleware::Next;
use actix_web::web;
use chrono::{DateTime, Utc};

use crate::config::{VersionSection, is_version_name, parse_date};
use crate::error::{ApiError, ErrorCode};

/// Where time comes from, so tests can move it.
pub trait Clock: Send + Sync {
    fn now(&self) -> DateTime<Utc>;
}

pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that stands still until set.
pub struct ManualClock(parking_lot::Mutex<DateTime<Utc>>);

impl ManualClock {
    pub fn new(at: DateTime<Utc>) -> Arc<Self> {
        Arc::new(ManualClock(parking_lot::Mutex::new(at)))
    }
    pub fn set(&self, at: DateTime<Utc>) {
        *self.0.lock() = at;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock()
    }
}

struct Version {
    deprecated_at: Option<DateTime<Utc>>,
    sunset_at: Option<DateTime<Utc>>,
    migration_guide: Option<String>,
    successor: Option<String>,
}

impl Version {
    /// `Link` for a request to `path` under version `name`: the migration guide
    /// (rel="deprecation") and the same path under the successor (rel="successor-version").
    fn link(&self, name: &str, path: &str) -> Option<HeaderValue> {
        let mut links = Vec::new();
        if let Some(guide) = &self.migration_guide {
            links.push(format!(
                "<{guide}>; rel=\"deprecation\"; type=\"text/html\""
            ));
        }
        if let Some(next) = &self.successor {
            let (prefix, rest) = path.split_once(&format!("/{name}")).unwrap_or(("", ""));
            links.push(format!(
                "<{prefix}/{next}{rest}>; rel=\"successor-version\""
            ));
        }
        if links.is_empty() {
            return None;
        }
        HeaderValue::from_str(&links.join(", ")).ok()
    }
}

/// The version table and the clock.
pub struct Versions {
    versions: BTreeMap<String, Version>,
    clock: Arc<dyn Clock>,
}

fn midnight(date: &str) -> Option<DateTime<Utc>> {
    Some(parse_date(date)?.and_hms_opt(0, 0, 0)?.and_utc())
}

impl Versions {
    /// Builds the table from validated config.
    pub fn new(config: &BTreeMap<String, VersionSection>, clock: Arc<dyn Clock>) -> Versions {
        let versions = config
            .iter()
            .map(|(name, v)| {
                let version = Version {
                    deprecated_at: v.deprecated_at.as_deref().and_then(midnight),
                    sunset_at: v.sunset_at.as_deref().and_then(midnight),
                    migration_guide: v.migration_guide.clone(),
                    successor: v.successor.clone(),
                };
                (name.clone(), version)
            })
            .collect();
        Versions { versions, clock }
    }
}

/// The version named by a path's prefix (`/v1/...`, `/data/v1/...`), if the path has one.
pub fn version_of(path: &str) -> Option<&str> {
    let rest = path.strip_prefix("/data").unwrap_or(path);
    let seg = rest.strip_prefix('/')?.split('/').next()?;
    is_version_name(seg).then_some(seg)
}

/// Middleware: 410 after sunset; deprecation headers once deprecated.
pub async fn apply_version_policy(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, actix_web::Error> {
    let Some(versions) = req.app_data::<web::Data<Versions>>().cloned() else {
        return Ok(next.call(req).await?.map_into_left_body());
    };
    let Some((name, version)) =
        version_of(req.path()).and_then(|n| versions.versions.get(n).map(|v| (n.to_string(), v)))
    else {
        return Ok(next.call(req).await?.map_into_left_body());
    };
    let now = versions.clock.now();
    if let Some(sunset) = version.sunset_at.filter(|s| now >= *s) {
        let message = format!(
            "API version {name} was sunset on {}; see the migration guide",
            sunset.format("%Y-%m-%d")
        );
        let link = version.link(&name, req.path());
        let mut res = req.error_response(ApiError::new(ErrorCode::VersionSunset, message));
        if let Some(link) = link {
            res.headers_mut()
                .insert(actix_web::http::header::LINK, link);
        }
        return Ok(res.map_into_right_body());
    }
    let deprecated = version.deprecated_at.filter(|d| now >= *d);
    let sunset = version.sunset_at;
    let link = version.link(&name, req.path());
    let mut res = next.call(req).await?;
    if let Some(deprecated) = deprecated {
        let h = res.headers_mut();
        h.insert(
            HeaderName::from_static("x-api-deprecated"),
            HeaderValue::from_static("true"),
        );
        if let Ok(v) = HeaderValue::from_str(&format!("@{}", deprecated.timestamp())) {
            h.insert(HeaderName::from_static("deprecation"), v);
        }
        if let Some(s) = sunset
            && let Ok(v) = HeaderValue::from_str(&s.format("%a, %d %b %Y %H:%M:%S GMT").to_string())
        {
            h.insert(HeaderName::from_static("sunset"), v);
        }
        if let Some(link) = link {
            h.insert(actix_web::http::header::LINK, link);
        }
    }
    Ok(res.map_into_left_body())
}
