//! The admin API under `/admin/v1` (an `admin` key of `default`, see
//! [`KeyIdentity::is_operator`]): workspaces created, listed, shown and deleted, and the keys
//! of a workspace minted, listed and revoked. docs/workspaces.md tells the model.

use std::sync::Arc;

use actix_web::{HttpMessage, HttpResponse, web};
use kbq_store::{QuotaOverrides, WorkspaceRecord};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::auth::{self, KeyIdentity, Keys, Scopes};
use crate::error::{ApiError, ErrorBody, ErrorCode};
use crate::extract::ValidJson;
use crate::offload::Offload;
use crate::workspaces::{self, DEFAULT, Quota, Workspaces};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/workspaces")
            .route(web::post().to(create))
            .route(web::get().to(list)),
    )
    .service(
        web::resource("/workspaces/{workspace}")
            .route(web::get().to(show))
            .route(web::delete().to(delete)),
    )
    .service(web::resource("/workspaces/{workspace}/quota").route(web::put().to(set_quota)))
    .service(
        web::resource("/workspaces/{workspace}/keys")
            .route(web::post().to(mint))
            .route(web::get().to(keys)),
    )
    .service(web::resource("/workspaces/{workspace}/keys/{key_id}").route(web::delete().to(revoke)))
    .service(web::resource("/export").route(web::get().to(export)));
}

/// Middleware of `/admin/v1`: `403 insufficient_scope` unless the key is an operator's (an
/// `admin` key of `default`). An `admin` key minted for another workspace holds every scope
/// there, but manages no workspace.
pub async fn require_operator(
    req: actix_web::dev::ServiceRequest,
    next: actix_web::middleware::Next<impl actix_web::body::MessageBody + 'static>,
) -> Result<
    actix_web::dev::ServiceResponse<actix_web::body::EitherBody<impl actix_web::body::MessageBody>>,
    actix_web::Error,
> {
    let operator = req
        .extensions()
        .get::<KeyIdentity>()
        .is_some_and(KeyIdentity::is_operator);
    if !operator {
        return Ok(req
            .error_response(ApiError::new(
                ErrorCode::InsufficientScope,
                "the admin API needs an `admin` key of the `default` workspace",
            ))
            .map_into_right_body());
    }
    Ok(next.call(req).await?.map_into_left_body())
}

/// The runtime the admin API's store work runs on.
pub struct AdminService {
    pub offload: Offload,
}

// ---- workspaces -------------------------------------------------------------------------

/// A workspace to create.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewWorkspace {
    /// 1-63 characters of `a-z`, `0-9` and `-`, starting with a letter.
    #[schema(pattern = "^[a-z][a-z0-9-]{0,62}$")]
    pub name: String,
    /// Bounds of its own over the configured `[workspaces]` ones; none set by default.
    #[serde(default)]
    pub quota: QuotaRequest,
}

/// What a workspace may hold, set for it alone over the configured `[workspaces]` bounds,
/// and the rate budgets its keys share, over `[limits]`'s `workspace_*`: each an integer in
/// its range (0: no bound, or no budget), or left out or `null` for the configured one.
#[derive(Debug, Clone, Copy, Default, Deserialize, ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct QuotaRequest {
    /// Entities, over `workspaces.max_entities`.
    #[serde(deserialize_with = "crate::extract::integer")]
    #[schema(minimum = 0)]
    pub max_entities: Option<i64>,
    /// Documents, over `workspaces.max_documents`.
    #[serde(deserialize_with = "crate::extract::integer")]
    #[schema(minimum = 0)]
    pub max_documents: Option<i64>,
    /// Bytes of the documents' content, over `workspaces.max_document_bytes`.
    #[serde(deserialize_with = "crate::extract::integer")]
    #[schema(minimum = 0)]
    pub max_document_bytes: Option<i64>,
    /// Graph requests a minute, over `limits.workspace_graph_per_minute`.
    #[serde(deserialize_with = "crate::extract::integer")]
    #[schema(minimum = 0, maximum = 100_000_000)]
    pub graph_per_minute: Option<i64>,
    /// Graph requests at once, over `limits.workspace_graph_burst`.
    #[serde(deserialize_with = "crate::extract::integer")]
    #[schema(minimum = 1, maximum = 10_000_000)]
    pub graph_burst: Option<i64>,
    /// Agent requests a minute, over `limits.workspace_agent_per_minute`.
    #[serde(deserialize_with = "crate::extract::integer")]
    #[schema(minimum = 0, maximum = 100_000_000)]
    pub agent_per_minute: Option<i64>,
    /// Agent requests at once, over `limits.workspace_agent_burst`.
    #[serde(deserialize_with = "crate::extract::integer")]
    #[schema(minimum = 1, maximum = 10_000_000)]
    pub agent_burst: Option<i64>,
}

impl QuotaRequest {
    /// The bounds, or a 400 naming the field (under `prefix`) that is out of its range.
    fn checked(self, prefix: &str) -> Result<QuotaOverrides, ApiError> {
        let within =
            |field: &str, value: Option<i64>, (low, high): (i64, i64), zero: &str| match value {
                Some(v) if v < low || v > high => Err(ApiError::invalid(
                    format!("{prefix}{field}"),
                    format!("{prefix}{field} must be {low} to {high}{zero}, got {v}"),
                )),
                v => Ok(v.map(|v| v as u64)),
            };
        let bound = |field: &str, value| within(field, value, (0, i64::MAX), " (0: no bound)");
        let rate = |field: &str, value| within(field, value, (0, 100_000_000), " (0: no budget)");
        let burst = |field: &str, value| within(field, value, (1, 10_000_000), "");
        Ok(QuotaOverrides {
            max_entities: bound("max_entities", self.max_entities)?,
            max_documents: bound("max_documents", self.max_documents)?,
            max_document_bytes: bound("max_document_bytes", self.max_document_bytes)?,
            graph_per_minute: rate("graph_per_minute", self.graph_per_minute)?,
            graph_burst: burst("graph_burst", self.graph_burst)?,
            agent_per_minute: rate("agent_per_minute", self.agent_per_minute)?,
            agent_burst: burst("agent_burst", self.agent_burst)?,
        })
    }
}

/// What a workspace holds.
#[derive(Debug, Clone, Copy, Default, Serialize, ToSchema)]
pub struct WorkspaceCounts {
    pub entities: u64,
    pub relationships: u64,
    pub documents: u64,
    /// Agent memories, of every key of the workspace.
    pub memories: u64,
}

/// A workspace: its name, what it holds, and its indexes on the node that answered.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WorkspaceView {
    pub name: String,
    /// The workspace's SurrealDB database, never reused: `ws_` and a UUID, or the configured
    /// `store.database` for `default`. `/metrics` labels a workspace's series with it
    /// (`database`), never with its name.
    pub database: String,
    /// When it was created (RFC 3339); `null` for `default`, which always exists.
    #[schema(required = true)]
    pub created_at: Option<String>,
    pub counts: WorkspaceCounts,
    /// Whether the node that answered has the workspace open (its indexes built).
    pub loaded: bool,
    /// Heap bytes of the workspace's in-memory indexes on the node that answered; 0 when
    /// it is not open there.
    pub index_bytes: u64,
    /// What it may hold: its own bounds (`own_quota`) over the configured ones. `default`
    /// has none.
    pub quota: Quota,
    /// The bounds set for it alone (`null`: the configured one; 0: none).
    pub own_quota: QuotaOverrides,
}

/// The workspaces, `default` first, then by name.
#[derive(Debug, Serialize, ToSchema)]
pub struct WorkspaceList {
    pub workspaces: Vec<WorkspaceView>,
}

/// What deleting a workspace did.
#[derive(Debug, Serialize, ToSchema)]
pub struct WorkspaceDeletion {
    pub name: String,
    pub deleted: bool,
}

/// Creates a workspace: an empty knowledge base of its own, with no keys yet.
#[utoipa::path(
    post,
    path = "/admin/v1/workspaces",
    tag = "admin",
    request_body = NewWorkspace,
    responses(
        (status = 201, description = "The workspace, empty", body = WorkspaceView),
        (status = 409, description = ErrorCode::Conflict.answers("a workspace of this name exists (`default` always does)"), body = ErrorBody),
        (status = 503, description = ErrorCode::ServiceUnavailable.answers("the store cannot answer"), body = ErrorBody),
    ),
    security(("bearer" = ["admin"]), ("api_key" = ["admin"])),
)]
async fn create(
    admin: web::Data<AdminService>,
    all: web::Data<Workspaces>,
    ValidJson(req): ValidJson<NewWorkspace>,
) -> Result<HttpResponse, ApiError> {
    check_name("name", &req.name)?;
    let quota = req.quota.checked("quota.")?;
    if req.name == DEFAULT {
        return Err(exists(&req.name));
    }
    let registry = all.registry().clone();
    let name = req.name.clone();
    let made = admin
        .offload
        .run(async move { registry.create_workspace_with(&name, quota).await })
        .await??
        .ok_or_else(|| exists(&req.name))?;
    Ok(HttpResponse::Created().json(WorkspaceView {
        quota: all.quota_of(&made.name, &made.quota),
        own_quota: made.quota,
        name: made.name,
        database: made.database,
        created_at: Some(made.created_at),
        counts: WorkspaceCounts::default(),
        loaded: false,
        index_bytes: 0,
    }))
}

/// Lists the workspaces with what each holds.
///
/// A workspace the answering node has not opened is counted in the store, and stays closed.
#[utoipa::path(
    get,
    path = "/admin/v1/workspaces",
    tag = "admin",
    responses(
        (status = 200, description = "Every workspace, `default` first", body = WorkspaceList),
        (status = 503, description = ErrorCode::ServiceUnavailable.answers("the store cannot answer"), body = ErrorBody),
    ),
    security(("bearer" = ["admin"]), ("api_key" = ["admin"])),
)]
async fn list(
    admin: web::Data<AdminService>,
    all: web::Data<Workspaces>,
) -> Result<HttpResponse, ApiError> {
    let all = all.into_inner();
    let registry = all.registry().clone();
    let records = admin
        .offload
        .run(async move { registry.workspaces().await })
        .await??;
    let mut workspaces = vec![view(&admin, &all, DEFAULT, None).await?];
    for record in records {
        workspaces.push(view(&admin, &all, &record.name.clone(), Some(record)).await?);
    }
    Ok(HttpResponse::Ok().json(WorkspaceList { workspaces }))
}

/// One workspace, as the list shows it.
#[utoipa::path(
    get,
    path = "/admin/v1/workspaces/{workspace}",
    tag = "admin",
    params(("workspace" = String, Path, description = "The workspace's name")),
    responses(
        (status = 200, description = "The workspace", body = WorkspaceView),
        (status = 404, description = ErrorCode::WorkspaceNotFound.answers("no workspace has this name"), body = ErrorBody),
        (status = 503, description = ErrorCode::ServiceUnavailable.answers("the store cannot answer"), body = ErrorBody),
    ),
    security(("bearer" = ["admin"]), ("api_key" = ["admin"])),
)]
async fn show(
    admin: web::Data<AdminService>,
    all: web::Data<Workspaces>,
    name: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let name = name.into_inner();
    let all = all.into_inner();
    let record = record(&admin, &all, &name).await?;
    Ok(HttpResponse::Ok().json(view(&admin, &all, &name, record).await?))
}

/// Sets what a workspace may hold, over the configured `[workspaces]` bounds, as a whole:
/// each bound given replaces the configured one (0: no bound), each left out or `null` goes
/// back to it. Applied at once on the node that answers and within a second on the others;
/// what the workspace holds already stays, and only writes past the bounds are refused.
#[utoipa::path(
    put,
    path = "/admin/v1/workspaces/{workspace}/quota",
    tag = "admin",
    params(("workspace" = String, Path, description = "The workspace's name")),
    request_body = QuotaRequest,
    responses(
        (status = 200, description = "The workspace, with its quota", body = WorkspaceView),
        (status = 404, description = ErrorCode::WorkspaceNotFound.answers("no workspace has this name"), body = ErrorBody),
        (status = 409, description = ErrorCode::Conflict.answers("`default` has no quota"), body = ErrorBody),
        (status = 503, description = ErrorCode::ServiceUnavailable.answers("the store cannot answer"), body = ErrorBody),
    ),
    security(("bearer" = ["admin"]), ("api_key" = ["admin"])),
)]
async fn set_quota(
    admin: web::Data<AdminService>,
    all: web::Data<Workspaces>,
    name: web::Path<String>,
    ValidJson(quota): ValidJson<QuotaRequest>,
) -> Result<HttpResponse, ApiError> {
    let name = name.into_inner();
    let quota = quota.checked("")?;
    if name == DEFAULT {
        return Err(ApiError::new(
            ErrorCode::Conflict,
            "the workspace `default` has no quota: it holds what kbq without workspaces holds",
        ));
    }
    check_name("workspace", &name)?;
    let all = all.into_inner();
    let (registry, asked) = (all.registry().clone(), name.clone());
    let record = admin
        .offload
        .run(async move { registry.set_workspace_quota(&asked, quota).await })
        .await??
        .ok_or_else(|| workspaces::not_found(&name))?;
    all.set_quota(&name, record.quota);
    tracing::info!(workspace = %name, quota = ?record.quota, "workspace quota set");
    Ok(HttpResponse::Ok().json(view(&admin, &all, &name, Some(record)).await?))
}

/// Deletes a workspace and everything in it: its knowledge base, its sources and jobs, and
/// its keys, which stop working at once on this node (and within a second on the others).
/// `default` cannot be deleted.
#[utoipa::path(
    delete,
    path = "/admin/v1/workspaces/{workspace}",
    tag = "admin",
    params(("workspace" = String, Path, description = "The workspace's name")),
    responses(
        (status = 200, description = "The workspace is gone", body = WorkspaceDeletion),
        (status = 404, description = ErrorCode::WorkspaceNotFound.answers("no workspace has this name"), body = ErrorBody),
        (status = 409, description = ErrorCode::Conflict.answers("`default` cannot be deleted"), body = ErrorBody),
        (status = 503, description = ErrorCode::ServiceUnavailable.answers("the store cannot answer; a retry completes the delete"), body = ErrorBody),
    ),
    security(("bearer" = ["admin"]), ("api_key" = ["admin"])),
)]
async fn delete(
    admin: web::Data<AdminService>,
    all: web::Data<Workspaces>,
    keys: web::Data<Keys>,
    name: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let name = name.into_inner();
    if name == DEFAULT {
        return Err(ApiError::new(
            ErrorCode::Conflict,
            "the workspace `default` always exists and cannot be deleted",
        ));
    }
    check_name("workspace", &name)?;
    let registry = all.registry().clone();
    let asked = name.clone();
    let deleted = admin
        .offload
        .run(async move { registry.delete_workspace(&asked).await })
        .await?;
    // Closed whatever the store answered: a workspace another node deleted meanwhile is
    // gone here too, and one whose delete failed is read again from the registry at its
    // next use.
    all.close(&name);
    keys.forget_minted();
    if deleted?.is_none() {
        return Err(workspaces::not_found(&name));
    }
    tracing::info!(workspace = %name, "workspace deleted");
    Ok(HttpResponse::Ok().json(WorkspaceDeletion {
        name,
        deleted: true,
    }))
}

/// The registry's record of `name` (`None` for `default`), or `404 workspace_not_found`.
async fn record(
    admin: &AdminService,
    all: &Arc<Workspaces>,
    name: &str,
) -> Result<Option<WorkspaceRecord>, ApiError> {
    if name == DEFAULT {
        return Ok(None);
    }
    check_name("workspace", name)?;
    let (registry, asked) = (all.registry().clone(), name.to_string());
    let record = admin
        .offload
        .run(async move { registry.workspace(&asked).await })
        .await??
        .ok_or_else(|| workspaces::not_found(name))?;
    Ok(Some(record))
}

/// The view of the workspace `name` (of the registry's `record`; `None` for `default`):
/// counted by its open knowledge base when this node has it open, else in the store,
/// without opening it.
async fn view(
    admin: &AdminService,
    all: &Arc<Workspaces>,
    name: &str,
    record: Option<WorkspaceRecord>,
) -> Result<WorkspaceView, ApiError> {
    let open = match name {
        DEFAULT => Some(all.default_workspace().clone()),
        _ => all.opened(name),
    };
    let registry = all.registry().clone();
    let own_quota = record.as_ref().map(|r| r.quota).unwrap_or_default();
    let (created_at, database) = match record {
        Some(r) => (Some(r.created_at), Some(r.database)),
        None => (None, None),
    };
    let database_name = match (&database, &open) {
        (Some(database), _) => database.clone(),
        (None, Some(workspace)) => workspace.kb.database().to_string(),
        (None, None) => return Err(workspaces::not_found(name)),
    };
    let (counts, memories, index_bytes) = match (&open, database) {
        (Some(workspace), _) => {
            let kb = workspace.kb.clone();
            let (counts, memories) = admin
                .offload
                .run(async move { futures::try_join!(kb.counts(), kb.memory_count()) })
                .await??;
            (counts, memories, workspace.kb.index_stats().heap_bytes())
        }
        (None, Some(database)) => {
            let (counts, memories) = admin
                .offload
                .run(async move { registry.database_counts(&database).await })
                .await??;
            (counts, memories, 0)
        }
        (None, None) => return Err(workspaces::not_found(name)),
    };
    Ok(WorkspaceView {
        name: name.to_string(),
        database: database_name,
        created_at,
        counts: WorkspaceCounts {
            entities: counts.entities,
            relationships: counts.relationships,
            documents: counts.documents,
            memories,
        },
        loaded: open.is_some(),
        index_bytes,
        quota: all.quota_of(name, &own_quota),
        own_quota,
    })
}

fn exists(name: &str) -> ApiError {
    ApiError::new(
        ErrorCode::Conflict,
        format!("a workspace named `{name}` exists already"),
    )
}

/// `field` follows the workspace name rule, or a 400 naming it.
fn check_name(field: &str, name: &str) -> Result<(), ApiError> {
    if workspaces::valid_name(name) {
        Ok(())
    } else {
        Err(ApiError::invalid(
            field,
            format!("{field} must be {}", workspaces::NAME_RULE),
        ))
    }
}

// ---- keys -------------------------------------------------------------------------------

/// What a key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum KeyScope {
    Read,
    Write,
    Agent,
    Admin,
}

impl KeyScope {
    fn as_str(self) -> &'static str {
        match self {
            KeyScope::Read => "read",
            KeyScope::Write => "write",
            KeyScope::Agent => "agent",
            KeyScope::Admin => "admin",
        }
    }
}

/// A key to mint.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewKey {
    /// What the key may do: at least one scope, each once.
    #[schema(min_items = 1)]
    pub scopes: Vec<KeyScope>,
    /// A name for people and logs, by the rule of entity names (not blank, no control
    /// characters).
    pub name: String,
}

impl crate::extract::Rules for NewKey {
    const NAMES: &'static [&'static str] = &["name"];
}

/// A key just minted: the only time its secret is shown.
#[derive(Debug, Serialize, ToSchema)]
pub struct MintedKey {
    /// The key's id: how it is listed and revoked, and the owner of its memories.
    pub id: String,
    /// The key itself. kbq keeps only its SHA-256 hash: this is the one time it is shown.
    pub key: String,
    pub name: String,
    pub scopes: Vec<KeyScope>,
    pub workspace: String,
}

/// A key as listed: never its secret.
#[derive(Debug, Serialize, ToSchema)]
pub struct KeyView {
    pub id: String,
    pub name: String,
    pub scopes: Vec<KeyScope>,
    pub workspace: String,
    /// RFC 3339.
    pub created_at: String,
}

impl From<kbq_store::StoredKey> for KeyView {
    fn from(k: kbq_store::StoredKey) -> Self {
        KeyView {
            scopes: scopes_of(&k.scopes),
            id: k.id,
            name: k.name,
            workspace: k.workspace,
            created_at: k.created_at,
        }
    }
}

/// The keys of a workspace minted at run time, oldest first. Configured keys
/// (`[[auth.keys]]`, `KBQ_API_KEYS`) are not listed.
#[derive(Debug, Serialize, ToSchema)]
pub struct KeyList {
    pub keys: Vec<KeyView>,
}

/// What revoking a key did.
#[derive(Debug, Serialize, ToSchema)]
pub struct KeyRevocation {
    pub id: String,
    pub revoked: bool,
}

/// Mints a key of the workspace, and answers it once.
#[utoipa::path(
    post,
    path = "/admin/v1/workspaces/{workspace}/keys",
    tag = "admin",
    params(("workspace" = String, Path, description = "The workspace's name")),
    request_body = NewKey,
    responses(
        (status = 201, description = "The key, shown this once", body = MintedKey),
        (status = 404, description = ErrorCode::WorkspaceNotFound.answers("no workspace has this name"), body = ErrorBody),
        (status = 503, description = ErrorCode::ServiceUnavailable.answers("the store cannot answer"), body = ErrorBody),
    ),
    security(("bearer" = ["admin"]), ("api_key" = ["admin"])),
)]
async fn mint(
    admin: web::Data<AdminService>,
    all: web::Data<Workspaces>,
    name: web::Path<String>,
    ValidJson(req): ValidJson<NewKey>,
) -> Result<HttpResponse, ApiError> {
    let workspace = name.into_inner();
    check_name("workspace", &workspace)?;
    if req.scopes.is_empty() {
        return Err(ApiError::invalid(
            "scopes",
            "scopes must name at least one of read, write, agent, admin",
        ));
    }
    let mut scopes = req.scopes.clone();
    scopes.sort_by_key(|s| *s as u8);
    scopes.dedup();
    if scopes.len() != req.scopes.len() {
        return Err(ApiError::invalid(
            "scopes",
            "scopes must name each scope once",
        ));
    }
    crate::extract::name("name", &req.name)?;
    let (key, stored) = auth::mint(
        req.name.clone(),
        scopes.iter().map(|s| s.as_str().to_string()).collect(),
        workspace.clone(),
    );
    let registry = all.registry().clone();
    let written = stored.clone();
    admin
        .offload
        .run(async move { registry.put_key(&written).await })
        .await?
        .map_err(|e| match e {
            kbq_store::StoreError::Invalid { field, .. } if field == "workspace" => {
                workspaces::not_found(&workspace)
            }
            e => ApiError::from(e),
        })?;
    tracing::info!(workspace = %stored.workspace, key = %stored.id, "key minted");
    Ok(HttpResponse::Created().json(MintedKey {
        id: stored.id,
        key,
        name: stored.name,
        scopes,
        workspace: stored.workspace,
    }))
}

/// Lists the keys minted for the workspace: ids, names and scopes, never the keys.
#[utoipa::path(
    get,
    path = "/admin/v1/workspaces/{workspace}/keys",
    tag = "admin",
    params(("workspace" = String, Path, description = "The workspace's name")),
    responses(
        (status = 200, description = "The workspace's minted keys", body = KeyList),
        (status = 404, description = ErrorCode::WorkspaceNotFound.answers("no workspace has this name"), body = ErrorBody),
        (status = 503, description = ErrorCode::ServiceUnavailable.answers("the store cannot answer"), body = ErrorBody),
    ),
    security(("bearer" = ["admin"]), ("api_key" = ["admin"])),
)]
async fn keys(
    admin: web::Data<AdminService>,
    all: web::Data<Workspaces>,
    name: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let workspace = name.into_inner();
    let all = all.into_inner();
    record(&admin, &all, &workspace).await?;
    let registry = all.registry().clone();
    let stored = admin
        .offload
        .run(async move { registry.keys_of(&workspace).await })
        .await??;
    let keys = stored.into_iter().map(KeyView::from).collect();
    Ok(HttpResponse::Ok().json(KeyList { keys }))
}

/// Revokes a key of the workspace: it stops working at once on this node, and within a
/// second on the others.
#[utoipa::path(
    delete,
    path = "/admin/v1/workspaces/{workspace}/keys/{key_id}",
    tag = "admin",
    params(
        ("workspace" = String, Path, description = "The workspace's name"),
        ("key_id" = String, Path, description = "The key's id: 32 hex digits"),
    ),
    responses(
        (status = 200, description = "The key is revoked", body = KeyRevocation),
        (status = 404, description = format!("{}; or {}", ErrorCode::NotFound.answers("the workspace has no key of this id"), ErrorCode::WorkspaceNotFound.answers("no workspace has this name")), body = ErrorBody),
        (status = 503, description = ErrorCode::ServiceUnavailable.answers("the store cannot answer"), body = ErrorBody),
    ),
    security(("bearer" = ["admin"]), ("api_key" = ["admin"])),
)]
async fn revoke(
    admin: web::Data<AdminService>,
    all: web::Data<Workspaces>,
    keys: web::Data<Keys>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (workspace, id) = path.into_inner();
    let all = all.into_inner();
    check_name("workspace", &workspace)?;
    if !is_key_id(&id) {
        return Err(ApiError::invalid(
            "key_id",
            "key_id must be 32 lowercase hex digits",
        ));
    }
    record(&admin, &all, &workspace).await?;
    let registry = all.registry().clone();
    let asked = id.clone();
    let revoked = admin
        .offload
        .run(async move { registry.revoke_key(&workspace, &asked).await })
        .await??;
    keys.forget_minted();
    if !revoked {
        return Err(ApiError::new(
            ErrorCode::NotFound,
            "the workspace has no key of this id",
        ));
    }
    Ok(HttpResponse::Ok().json(KeyRevocation { id, revoked }))
}

/// A key's id: its hash's first half, as 32 lowercase hex digits.
pub const KEY_ID_PATTERN: &str = "^[0-9a-f]{32}$";

fn is_key_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Stored scope names as the API's scopes (names it does not know are left out).
pub(crate) fn scopes_of(names: &[String]) -> Vec<KeyScope> {
    let scopes = Scopes::from_names(Some(names));
    [
        KeyScope::Read,
        KeyScope::Write,
        KeyScope::Agent,
        KeyScope::Admin,
    ]
    .into_iter()
    .filter(|s| scopes.names().contains(&s.as_str()))
    .collect()
}

// ---- export -----------------------------------------------------------------------------

/// What to export.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ExportQuery {
    /// The workspace to export (its name); `default` when not given.
    pub workspace: Option<String>,
}

/// Exports a workspace's whole knowledge base as NDJSON in the import format
/// (docs/import-format.md): entities, relationships and documents, then agent memory,
/// sources, the supports of what they gave and the model answers kept per chunk, and a last
/// `end` line with the counts. Every line is read from one transaction of the store, so the
/// export is one state of the workspace while writes go on; the node keeps serving. The
/// answer is streamed: a body without its `end` line was cut short. `kbq import` of it into
/// an empty store gives the same answers.
#[utoipa::path(
    get,
    path = "/admin/v1/export",
    tag = "admin",
    params(ExportQuery),
    responses(
        (status = 200, description = "`application/x-ndjson`: one record per line, the last of kind `end`", content_type = "application/x-ndjson", body = String),
        (status = 400, description = ErrorCode::InvalidRequest.answers("`workspace` is no workspace name, or the query has another parameter"), body = ErrorBody),
        (status = 404, description = ErrorCode::WorkspaceNotFound.answers("no workspace has this name"), body = ErrorBody),
        (status = 503, description = ErrorCode::ServiceUnavailable.answers("the store cannot answer"), body = ErrorBody),
    ),
    security(("bearer" = ["admin"]), ("api_key" = ["admin"])),
)]
async fn export(
    admin: web::Data<AdminService>,
    all: web::Data<Workspaces>,
    req: actix_web::HttpRequest,
) -> Result<HttpResponse, ApiError> {
    use kbq_store::export::ExportEvent;
    let query = web::Query::<ExportQuery>::from_query(req.query_string())
        .map_err(|e| ApiError::invalid("query", format!("the query is not understood: {e}")))?
        .into_inner();
    let name = query.workspace.unwrap_or_else(|| DEFAULT.to_string());
    let all = all.into_inner();
    let database = record(&admin, &all, &name).await?.map(|r| r.database);
    let registry = all.registry().clone();
    let (tx, mut rx) = tokio::sync::mpsc::channel::<ExportEvent>(8);
    let export = admin
        .offload
        .0
        .spawn(async move { registry.export(database.as_deref(), tx).await });
    // The first event says the transaction began and was counted; a store that cannot
    // answer is a 503 rather than a 200 with no body.
    let totals = match rx.recv().await {
        Some(ExportEvent::Totals(totals)) => totals,
        _ => {
            let why = match export.await {
                Ok(Err(e)) => ApiError::from(e),
                _ => ApiError::new(ErrorCode::Internal, "the export stopped before it began"),
            };
            return Err(why);
        }
    };
    tracing::info!(workspace = %name, records = totals.total(), "export started");
    let body = futures::stream::unfold((rx, Some(export)), |(mut rx, export)| async move {
        match rx.recv().await {
            Some(ExportEvent::Lines { bytes, .. }) => {
                Some((Ok(web::Bytes::from(bytes)), (rx, export)))
            }
            Some(ExportEvent::Totals(_)) => Some((Ok(web::Bytes::new()), (rx, export))),
            None => {
                // The export ended: a failure part way ends the body with an error, so that
                // the client sees it cut short rather than whole.
                let failure = match export?.await {
                    Ok(Ok(_)) => return None,
                    Ok(Err(e)) => e.to_string(),
                    Err(e) => e.to_string(),
                };
                tracing::warn!(error = %failure, "export stopped part way");
                Some((
                    Err(actix_web::error::ErrorServiceUnavailable(failure)),
                    (rx, None),
                ))
            }
        }
    });
    Ok(HttpResponse::Ok()
        .content_type("application/x-ndjson")
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(body))
}
