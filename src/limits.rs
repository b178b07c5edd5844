//! Per-key rate limits with governor: separate budgets for the graph routes and the agent
//! routes, from config. A request over budget gets 429 `RATE_LIMIT_EXCEEDED` with
//! `Retry-After` (whole seconds, rounded up); every limited response carries `RateLimit-Limit`,
//! `RateLimit-Remaining` and `RateLimit-Policy`. Limits apply after authentication, so the
//! limiter holds at most one cell per configured key: its memory is bounded by the key list.

use std::num::NonZeroU32;
use std::sync::Arc;

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::middleware::Next;
use actix_web::{HttpMessage, web};
use governor::clock::{Clock, DefaultClock};
use governor::middleware::StateInformationMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};

use crate::auth::KeyIdentity;
use crate::error::{ApiError, ErrorCode};

type Keyed = RateLimiter<
    Arc<str>,
    DefaultKeyedStateStore<Arc<str>>,
    DefaultClock,
    StateInformationMiddleware,
>;

/// One budget: `per_minute` sustained, `burst` at once.
pub struct Budget {
    limiter: Keyed,
    burst: u32,
    policy: HeaderValue,
}

impl Budget {
    /// `None` when `per_minute` is 0 (unlimited).
    pub fn new(per_minute: u32, burst: u32) -> Option<Budget> {
        let rate = NonZeroU32::new(per_minute)?;
        let burst = NonZeroU32::new(burst.max(1)).unwrap_or(NonZeroU32::MIN);
        let quota = Quota::per_minute(rate).allow_burst(burst);
        let policy = HeaderValue::from_str(&format!("{};w=60;burst={}", rate, burst)).ok()?;
        Some(Budget {
            limiter: RateLimiter::keyed(quota).with_middleware::<StateInformationMiddleware>(),
            burst: burst.get(),
            policy,
        })
    }
}

/// The budgets, as app data: each key's, and each workspace's (every key of it together).
pub struct RateLimits {
    pub graph: Option<Budget>,
    pub agent: Option<Budget>,
    pub workspace_graph: Option<Budget>,
    pub workspace_agent: Option<Budget>,
}

/// Which budget a scope spends.
#[derive(Debug, Clone, Copy)]
pub enum Route {
    Graph,
    Agent,
}

impl Route {
    fn name(self) -> &'static str {
        match self {
            Route::Graph => "graph",
            Route::Agent => "agent",
        }
    }
}

/// Middleware factory for a scope spending `route`'s budget: the key's, then its
/// workspace's. The headers describe the key's budget; a request refused by its workspace's
/// budget says so in the message, and its `RateLimit-*` headers are the workspace's.
pub async fn limit(
    route: Route,
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, actix_web::Error> {
    let limits = req.app_data::<web::Data<RateLimits>>().cloned();
    let (budget, shared) = match (limits.as_deref(), route) {
        (Some(l), Route::Graph) => (l.graph.as_ref(), l.workspace_graph.as_ref()),
        (Some(l), Route::Agent) => (l.agent.as_ref(), l.workspace_agent.as_ref()),
        (None, _) => (None, None),
    };
    // The key's id and the workspace's name are copied only when there is a budget to spend.
    let key = budget.and_then(|_| req.extensions().get::<KeyIdentity>().map(|k| k.id.clone()));
    let workspace = shared.and_then(|_| {
        req.extensions()
            .get::<crate::workspaces::Workspace>()
            .map(|w| w.name.clone())
    });
    let mut remaining = None;
    if let (Some(budget), Some(key)) = (budget, &key) {
        match budget.limiter.check_key(key) {
            Ok(state) => remaining = Some((budget, state.remaining_burst_capacity())),
            Err(not_until) => {
                return Ok(refused(req, route, budget, not_until, "this key").map_into_right_body());
            }
        }
    }
    if let (Some(shared), Some(workspace)) = (shared, &workspace)
        && let Err(not_until) = shared.limiter.check_key(workspace)
    {
        return Ok(refused(req, route, shared, not_until, "this workspace").map_into_right_body());
    }
    let mut res = next.call(req).await?;
    if let Some((budget, left)) = remaining {
        let h = res.headers_mut();
        h.insert(
            HeaderName::from_static("ratelimit-limit"),
            HeaderValue::from(budget.burst),
        );
        h.insert(
            HeaderName::from_static("ratelimit-remaining"),
            HeaderValue::from(left),
        );
        h.insert(
            HeaderName::from_static("ratelimit-policy"),
            budget.policy.clone(),
        );
    }
    Ok(res.map_into_left_body())
}

/// The 429 of a request `budget` refused until `not_until`; `whose` says whose budget it was
/// (`this key`, `this workspace`).
fn refused(
    req: ServiceRequest,
    route: Route,
    budget: &Budget,
    not_until: governor::NotUntil<governor::clock::QuantaInstant>,
    whose: &str,
) -> ServiceResponse {
    if let Some(m) = req.app_data::<actix_web::web::Data<crate::metrics::Metrics>>() {
        m.observe_rate_limited(route.name());
    }
    let wait = not_until.wait_time_from(DefaultClock::default().now());
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    let secs = secs.max(1);
    let error = ApiError {
        retry_after: Some(secs),
        ..ApiError::new(
            ErrorCode::RateLimitExceeded,
            format!("too many requests for {whose}; retry in {secs} s"),
        )
    };
    let mut res = req.error_response(error);
    let h = res.headers_mut();
    h.insert(
        HeaderName::from_static("ratelimit-limit"),
        HeaderValue::from(budget.burst),
    );
    h.insert(
        HeaderName::from_static("ratelimit-remaining"),
        HeaderValue::from(0u32),
    );
    h.insert(
        HeaderName::from_static("ratelimit-reset"),
        HeaderValue::from(secs),
    );
    h.insert(
        HeaderName::from_static("ratelimit-policy"),
        budget.policy.clone(),
    );
    res
}
