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

/// The two budgets, as app data.
pub struct RateLimits {
    pub graph: Option<Budget>,
    pub agent: Option<Budget>,
}

/// Which budget a scope spends.
#[derive(Debug, Clone, Copy)]
pub enum Route {
    Graph,
    Agent,
}

/// Middleware factory for a scope spending `route`'s budget.
pub async fn limit(
    route: Route,
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, actix_web::Error> {
    let limits = req.app_data::<web::Data<RateLimits>>().cloned();
    let budget = limits.as_ref().and_then(|l| match route {
        Route::Graph => l.graph.as_ref(),
        Route::Agent => l.agent.as_ref(),
    });
    // The key's id is copied only when there is a budget to spend.
    let key = budget.and_then(|_| req.extensions().get::<KeyIdentity>().map(|k| k.id.clone()));
    let (Some(budget), Some(key)) = (budget, key) else {
        return Ok(next.call(req).await?.map_into_left_body());
    };
    let limit = HeaderValue::from(budget.burst);
    match budget.limiter.check_key(&key) {
        Ok(state) => {
            let mut res = next.call(req).await?;
            let h = res.headers_mut();
            h.insert(HeaderName::from_static("ratelimit-limit"), limit);
            h.insert(
                HeaderName::from_static("ratelimit-remaining"),
                HeaderValue::from(state.remaining_burst_capacity()),
            );
            h.insert(
                HeaderName::from_static("ratelimit-policy"),
                budget.policy.clone(),
            );
            Ok(res.map_into_left_body())
        }
        Err(not_until) => {
            if let Some(m) = req.app_data::<actix_web::web::Data<crate::metrics::Metrics>>() {
                m.observe_rate_limited(match route {
                    Route::Graph => "graph",
                    Route::Agent => "agent",
                });
            }
            let wait = not_until.wait_time_from(DefaultClock::default().now());
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            let secs = secs.max(1);
            let error = ApiError {
                retry_after: Some(secs),
                ..ApiError::new(
                    ErrorCode::RateLimitExceeded,
                    format!("too many requests for this key; retry in {secs} s"),
                )
            };
            let mut res = req.error_response(error);
            let h = res.headers_mut();
            h.insert(HeaderName::from_static("ratelimit-limit"), limit);
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
            Ok(res.map_into_right_body())
        }
    }
}
