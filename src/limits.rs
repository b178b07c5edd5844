//! Per-key rate limits with governor: separate budgets for the graph routes and the agent
//! routes, from config. A request over budget gets 429 `RATE_LIMIT_EXCEEDED` with
//! `Retry-After` (whole seconds, rounded up); every limited response carries `RateLimit-Limit`,
//! `RateLimit-Remaining` and `RateLimit-Policy`. Limits apply after authentication, so the
//! limiter holds at most one cell per key that has made a request.
//!
//! Nodes on one SurrealDB server share the budgets: each counts the nodes alive (their
//! leases in the store, renewed every 2 s) and enforces its share of every budget, rounded
//! up ([`RateLimits::share_among`]; docs/operations.md, "Rate limits across nodes").

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

    /// This node's share of a budget of `per_minute` and `burst` when `nodes` share it: each
    /// divided by the nodes, rounded up (at least 1 when it is not 0); `None` when
    /// `per_minute` is 0.
    fn shared(per_minute: u64, burst: u64, nodes: u64) -> Option<Budget> {
        let part = |n: u64| {
            n.div_ceil(nodes.max(1))
                .max(u64::from(n > 0))
                .min(u64::from(u32::MAX)) as u32
        };
        Budget::new(part(per_minute), part(burst).max(1))
    }
}

/// A node's budgets of each key.
pub struct Budgets {
    pub graph: Option<Budget>,
    pub agent: Option<Budget>,
}

impl Budgets {
    /// This node's share of `config`'s budgets of each key when `nodes` share them.
    pub fn share(config: &crate::config::LimitsSection, nodes: u64) -> Budgets {
        let budget = |rate: u32, burst: u32| Budget::shared(rate.into(), burst.into(), nodes);
        Budgets {
            graph: budget(config.graph_per_minute, config.graph_burst),
            agent: budget(config.agent_per_minute, config.agent_burst),
        }
    }
}

/// A workspace's budget of one route as it applies: (requests a minute, at once).
type Applied = (u64, u64);

/// Whose budget: a workspace's name and a route's.
type WorkspaceRoute = (Arc<str>, &'static str);

/// The budgets, as app data: this node's share of the configured ones.
pub struct RateLimits {
    config: crate::config::LimitsSection,
    /// The nodes the budgets are shared among now.
    nodes: std::sync::atomic::AtomicU64,
    current: parking_lot::RwLock<Arc<Budgets>>,
    /// Each workspace's budget of each route, by workspace name, made at its first request
    /// from the budget its quota applies (its own, or `limits.workspace_*`), and made again
    /// from full when that changes or the nodes sharing it do.
    workspaces: dashmap::DashMap<WorkspaceRoute, (Applied, Arc<Budget>)>,
}

impl RateLimits {
    /// `config`'s budgets, this node's alone until [`share_among`](Self::share_among) says
    /// otherwise.
    pub fn new(config: &crate::config::LimitsSection) -> Self {
        RateLimits {
            config: config.clone(),
            nodes: 1.into(),
            current: parking_lot::RwLock::new(Arc::new(Budgets::share(config, 1))),
            workspaces: dashmap::DashMap::new(),
        }
    }

    /// This node's share of workspace `name`'s budget of `route`, `applied` as its quota
    /// says now.
    fn workspace_budget(
        &self,
        name: &Arc<str>,
        route: Route,
        applied: Applied,
    ) -> Option<Arc<Budget>> {
        let key = (name.clone(), route.name());
        if let Some(entry) = self.workspaces.get(&key)
            && entry.0 == applied
        {
            return Some(entry.1.clone());
        }
        let budget = Arc::new(Budget::shared(applied.0, applied.1, self.nodes())?);
        self.workspaces.insert(key, (applied, budget.clone()));
        Some(budget)
    }

    /// The budgets requests spend now.
    pub fn budgets(&self) -> Arc<Budgets> {
        self.current.read().clone()
    }

    /// How many nodes the budgets are shared among.
    pub fn nodes(&self) -> u64 {
        self.nodes.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Enforces this node's share of the budgets when `nodes` nodes serve them. When the
    /// number changes, the limiters start again from full, at the new share.
    pub fn share_among(&self, nodes: u64) {
        let nodes = nodes.max(1);
        if self.nodes.swap(nodes, std::sync::atomic::Ordering::Relaxed) != nodes {
            tracing::info!(nodes, "rate budgets shared among the nodes alive");
            *self.current.write() = Arc::new(Budgets::share(&self.config, nodes));
            self.workspaces.clear();
        }
    }
}

/// Which budget a scope spends.
#[derive(Debug, Clone, Copy)]
pub enum Route {
    Graph,
    Agent,
}

impl Route {
    pub(crate) fn name(self) -> &'static str {
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
    let rate_limits = req.app_data::<web::Data<RateLimits>>().cloned();
    let limits = rate_limits.as_ref().map(|l| l.budgets());
    let budget = match (limits.as_deref(), route) {
        (Some(l), Route::Graph) => l.graph.as_ref(),
        (Some(l), Route::Agent) => l.agent.as_ref(),
        (None, _) => None,
    };
    // The key's id and the workspace's name are copied only when there is a budget to spend.
    let key = budget.and_then(|_| req.extensions().get::<KeyIdentity>().map(|k| k.id.clone()));
    let shared = rate_limits.as_ref().and_then(|l| {
        let extensions = req.extensions();
        let w = extensions.get::<crate::workspaces::Workspace>()?;
        let applied = w.quota.budget(route)?;
        Some((w.name.clone(), l.workspace_budget(&w.name, route, applied)?))
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
    if let Some((workspace, shared)) = &shared
        && let Err(not_until) = shared.limiter.check_key(workspace)
    {
        return Ok(refused(req, route, shared, not_until, "this workspace").map_into_right_body());
    }
    let mut res = next.call(req).await?;
    if let Some((budget, left)) = remaining {
        budget.describe(res.headers_mut(), left);
    }
    Ok(res.map_into_left_body())
}

impl Budget {
    /// Writes the `RateLimit-Limit`, `-Remaining` and `-Policy` headers of this budget, with
    /// `left` requests left.
    fn describe(&self, h: &mut actix_web::http::header::HeaderMap, left: u32) {
        h.insert(
            HeaderName::from_static("ratelimit-limit"),
            HeaderValue::from(self.burst),
        );
        h.insert(
            HeaderName::from_static("ratelimit-remaining"),
            HeaderValue::from(left),
        );
        h.insert(
            HeaderName::from_static("ratelimit-policy"),
            self.policy.clone(),
        );
    }
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
    budget.describe(h, 0);
    h.insert(
        HeaderName::from_static("ratelimit-reset"),
        HeaderValue::from(secs),
    );
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node's share of a budget is the budget divided by the nodes, rounded up, and never
    /// 0 for a budget that is on; a budget that is off stays off.
    #[test]
    fn each_node_enforces_its_share_rounded_up() {
        let config = crate::config::LimitsSection {
            graph_per_minute: 1200,
            graph_burst: 100,
            agent_per_minute: 1,
            agent_burst: 1,
            ..Default::default()
        };
        let shared = Budgets::share(&config, 3);
        let graph = shared.graph.as_ref().unwrap();
        assert_eq!(graph.burst, 34);
        assert_eq!(graph.policy, "400;w=60;burst=34");
        let agent = shared.agent.as_ref().unwrap();
        assert_eq!(
            (agent.burst, agent.policy.to_str().unwrap()),
            (1, "1;w=60;burst=1")
        );
        let limits = RateLimits::new(&config);
        assert_eq!(limits.nodes(), 1);
        assert_eq!(limits.budgets().graph.as_ref().unwrap().burst, 100);
        limits.share_among(4);
        assert_eq!(limits.nodes(), 4);
        assert_eq!(limits.budgets().graph.as_ref().unwrap().burst, 25);
        limits.share_among(0);
        assert_eq!(limits.nodes(), 1, "at least this node");
    }
}
