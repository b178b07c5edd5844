//! API keys: `Authorization: Bearer KEY` or `X-API-Key: KEY` on every API route. kbq keeps
//! only SHA-256 hashes and compares them in constant time.
//!
//! Every key belongs to one workspace (`crate::workspaces`). Configured keys belong to
//! `default`; keys minted at run time (`POST /admin/v1/workspaces/{name}/keys`) live in the
//! store, by hash, and are read from it when first presented, then kept for
//! [`MINTED_KEY_WINDOW`]. The key middleware resolves the request's workspace once and puts
//! it into the request's extensions with the key.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::{HttpMessage, web};
use dashmap::DashMap;
use kbq_store::KnowledgeBase;
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::{ApiError, ErrorCode};
use crate::offload::Offload;
use crate::workspaces::{self, Workspace, Workspaces};

/// A configured API key (`[[auth.keys]]`): a name (for logs), the SHA-256 of the key, in hex,
/// and what it may do (every scope when omitted). The configuration holds a list of these and
/// checks them at load; [`Keys::new`] turns them into the keys kbq accepts.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct KeyEntry {
    pub name: String,
    pub sha256: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scopes: Option<Vec<String>>,
}

/// The key a request was made with, in the request's extensions: its configured name (for
/// logs), a stable id derived from its hash, which owns the key's memory, its scopes, and the
/// workspace it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyIdentity {
    pub name: Arc<str>,
    pub id: Arc<str>,
    pub scopes: Scopes,
    pub workspace: Arc<str>,
    /// For a key minted in a registered workspace, that workspace's database: the key opens
    /// the workspace of that name only while it is the same one (not one deleted and created
    /// again under the name).
    pub database: Option<Arc<str>>,
}

impl KeyIdentity {
    /// An operator's key: an `admin` key of `default`. It may act in any workspace
    /// (`X-KBQ-Workspace`) and use the admin API. An `admin` key minted for another workspace
    /// holds every scope in that workspace only.
    pub fn is_operator(&self) -> bool {
        self.scopes.allows(Scope::Admin) && &*self.workspace == workspaces::DEFAULT
    }

    /// Whether the key may open the workspace `name` held in `database`: any but its own
    /// (where the header and the operator's rights decide), and its own while it is still
    /// the one the key was minted in.
    pub fn opens(&self, name: &str, database: &str) -> bool {
        match &self.database {
            Some(minted_in) if name == &*self.workspace => **minted_in == *database,
            _ => true,
        }
    }
}

/// One thing a key may be allowed to do (docs/api.md, "Authentication").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Graph queries, RAG search, models and embeddings.
    Read,
    /// Ingestion.
    Write,
    /// Agent chat.
    Agent,
    /// Everything.
    Admin,
}

impl Scope {
    pub fn parse(s: &str) -> Option<Scope> {
        match s {
            "read" => Some(Scope::Read),
            "write" => Some(Scope::Write),
            "agent" => Some(Scope::Agent),
            "admin" => Some(Scope::Admin),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Write => "write",
            Scope::Agent => "agent",
            Scope::Admin => "admin",
        }
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// The scopes of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scopes(u8);

impl Scopes {
    pub const ALL: Scopes = Scopes(0b1111);

    /// From config names (validated already; unknown names are ignored).
    pub fn from_names(names: Option<&[String]>) -> Scopes {
        match names {
            None => Scopes::ALL,
            Some(names) => Scopes(
                names
                    .iter()
                    .filter_map(|n| Scope::parse(n))
                    .fold(0, |bits, s| bits | s.bit()),
            ),
        }
    }

    /// True when the key holds `scope` or `admin`.
    pub fn allows(self, scope: Scope) -> bool {
        self.0 & (scope.bit() | Scope::Admin.bit()) != 0
    }

    /// The scopes' names, in the order of [`Scope`].
    pub fn names(self) -> Vec<&'static str> {
        [Scope::Read, Scope::Write, Scope::Agent, Scope::Admin]
            .into_iter()
            .filter(|s| self.0 & s.bit() != 0)
            .map(Scope::as_str)
            .collect()
    }
}

struct Key {
    name: Arc<str>,
    hash: [u8; 32],
    /// The hash's first half in hex, the key's id in logs and limits: made once here rather
    /// than for every request.
    id: Arc<str>,
    scopes: Scopes,
}

impl Key {
    fn new(name: Arc<str>, hash: [u8; 32], scopes: Scopes) -> Key {
        Key {
            name,
            id: key_id(&hash).into(),
            hash,
            scopes,
        }
    }

    fn identity(&self) -> KeyIdentity {
        KeyIdentity {
            name: self.name.clone(),
            id: self.id.clone(),
            scopes: self.scopes,
            workspace: workspaces::DEFAULT.into(),
            database: None,
        }
    }
}

/// How long a minted key read from the store is trusted before it is read again: a key
/// revoked through another node stops working here within this window (at once on the node
/// that revoked it). A key the store does not know is remembered as unknown for as long.
pub const MINTED_KEY_WINDOW: Duration = Duration::from_secs(1);

/// The most unknown keys remembered at once: presenting random keys costs a store read
/// each, but no memory beyond this.
const UNKNOWN_KEYS_KEPT: usize = 10_000;

/// The keys kbq accepts: the configured ones, and those minted at run time, which live in
/// the store.
pub struct Keys {
    keys: Vec<Key>,
    /// The store of minted keys (the registry's knowledge base), and the runtime its reads run
    /// on; `None`: configured keys only.
    store: Option<(Arc<KnowledgeBase>, Offload)>,
    /// Minted keys read from the store, by hash: the key (or `None`, unknown) and when.
    minted: DashMap<[u8; 32], (Option<KeyIdentity>, Instant)>,
}

/// A key kbq made on first start because none was configured.
pub struct GeneratedKey {
    pub key: String,
    pub path: std::path::PathBuf,
    /// True when it was made now (and so should be printed once), false when read back.
    pub new: bool,
}

/// Plaintext development keys (`KBQ_API_KEYS`), comma-separated.
pub fn plaintext_keys() -> Vec<String> {
    std::env::var("KBQ_API_KEYS")
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

pub fn hash(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

/// A key's id, in logs and limits, the owner of its memory and how a minted key is listed
/// and revoked: its hash's first half in hex.
pub fn key_id(hash: &[u8; 32]) -> String {
    hex::encode(&hash[..16])
}

/// A new key of `workspace` named `name` with `scopes`: its secret, shown once, and what the
/// store keeps of it (the time is the store's).
pub fn mint(
    name: String,
    scopes: Vec<String>,
    workspace: String,
) -> (String, kbq_store::StoredKey) {
    let key = new_key();
    let hash = hash(&key);
    let stored = kbq_store::StoredKey {
        id: key_id(&hash),
        name,
        scopes,
        workspace,
        sha256: hex::encode(hash),
        created_at: String::new(),
        database: None,
    };
    (key, stored)
}

/// A fresh random key: `kbq_` and 64 hex digits (256 bits).
pub fn new_key() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!("kbq_{}", hex::encode(bytes))
}

const GENERATED_KEY_FILE: &str = "api-key";

impl Keys {
    /// Keys from config hashes and from plaintext development keys (`KBQ_API_KEYS`).
    pub fn new(entries: &[KeyEntry], plaintext: &[String]) -> Keys {
        let mut keys: Vec<Key> = entries
            .iter()
            .map(|e| {
                let mut hash = [0u8; 32];
                // Config validation has checked the hex already.
                hex::decode_to_slice(&e.sha256, &mut hash).unwrap_or_default();
                Key::new(
                    e.name.as_str().into(),
                    hash,
                    Scopes::from_names(e.scopes.as_deref()),
                )
            })
            .collect();
        for (i, k) in plaintext.iter().enumerate() {
            keys.push(Key::new(format!("env-{i}").into(), hash(k), Scopes::ALL));
        }
        Keys {
            keys,
            store: None,
            minted: DashMap::new(),
        }
    }

    /// Also accepts the keys minted into `store` (the registry's knowledge base), read on
    /// `offload`'s runtime.
    pub fn with_minted(mut self, store: Arc<KnowledgeBase>, offload: Offload) -> Keys {
        self.store = Some((store, offload));
        self
    }

    /// The key `presented`: a configured one, else a minted one (read from the store when not
    /// read within [`MINTED_KEY_WINDOW`]). `None` when neither knows it.
    pub async fn resolve(&self, presented: &str) -> Result<Option<KeyIdentity>, ApiError> {
        if let Some(found) = self.verify(presented) {
            return Ok(Some(found));
        }
        let Some((store, offload)) = &self.store else {
            return Ok(None);
        };
        let h = hash(presented);
        if let Some(kept) = self.minted.get(&h)
            && kept.1.elapsed() < MINTED_KEY_WINDOW
        {
            return Ok(kept.0.clone());
        }
        let (store, hex) = (store.clone(), hex::encode(h));
        let stored = offload
            .run(async move { store.key_by_hash(&hex).await })
            .await??;
        let found = stored.map(|k| {
            let scopes = Scopes::from_names(Some(&k.scopes));
            KeyIdentity {
                name: k.name.into(),
                id: k.id.into(),
                scopes,
                workspace: k.workspace.into(),
                database: k.database.map(Into::into),
            }
        });
        if found.is_some() || self.minted.len() < UNKNOWN_KEYS_KEPT {
            self.minted.insert(h, (found.clone(), Instant::now()));
        }
        if self.minted.len() >= UNKNOWN_KEYS_KEPT {
            self.minted
                .retain(|_, (k, at)| k.is_some() || at.elapsed() < MINTED_KEY_WINDOW);
        }
        Ok(found)
    }

    /// Forgets the minted keys read so far, so that the next use of each reads the store: after
    /// this node revoked a key or deleted a workspace.
    pub fn forget_minted(&self) {
        self.minted.clear();
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// When no key is configured, reads the key kept in `data_dir`, or makes and keeps one,
    /// so that a first run is usable and never open.
    pub fn ensure_one(&mut self, data_dir: &Path) -> std::io::Result<Option<GeneratedKey>> {
        if !self.keys.is_empty() {
            return Ok(None);
        }
        let path = data_dir.join(GENERATED_KEY_FILE);
        let (key, new) = match std::fs::read_to_string(&path) {
            Ok(k) if !k.trim().is_empty() => (k.trim().to_string(), false),
            _ => {
                std::fs::create_dir_all(data_dir)?;
                let key = new_key();
                write_private(&path, &key)?;
                (key, true)
            }
        };
        self.keys
            .push(Key::new("generated".into(), hash(&key), Scopes::ALL));
        Ok(Some(GeneratedKey { key, path, new }))
    }

    /// The name of the matching key. Every configured hash is compared, in constant time.
    pub fn verify(&self, presented: &str) -> Option<KeyIdentity> {
        let h = hash(presented);
        let mut found = None;
        for k in &self.keys {
            if bool::from(k.hash.ct_eq(&h)) {
                found = Some(k.identity());
            }
        }
        found
    }
}

fn write_private(path: &Path, key: &str) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)?;
        f.write_all(key.as_bytes())?;
        f.write_all(b"\n")
    }
    #[cfg(not(unix))]
    {
        std::fs::write(path, format!("{key}\n"))
    }
}

/// The key a request carries, from either header.
fn presented_key(req: &ServiceRequest) -> Option<&str> {
    let headers = req.headers();
    if let Some(v) = headers
        .get(actix_web::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        let (scheme, rest) = v.trim().split_once(' ')?;
        return scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim());
    }
    headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

/// Middleware: 401 `INVALID_API_KEY` unless the request carries a known key; then the
/// request's workspace (see `workspace_of`), or the error that says why there is none.
pub async fn require_key(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, actix_web::Error> {
    authenticate(req, next, true).await
}

/// Middleware of the admin API: [`require_key`] without a workspace. The admin API names the
/// workspace it manages in its path, and reads no knowledge of the key's.
pub async fn require_key_alone(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, actix_web::Error> {
    authenticate(req, next, false).await
}

async fn authenticate(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
    with_workspace: bool,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, actix_web::Error> {
    let keys = req.app_data::<web::Data<Keys>>().cloned();
    let identity = match (keys, presented_key(&req)) {
        (Some(keys), Some(k)) if !k.is_empty() => match keys.resolve(k).await {
            Ok(found) => found,
            Err(e) => return Ok(req.error_response(e).map_into_right_body()),
        },
        _ => None,
    };
    let Some(identity) = identity else {
        let message = if presented_key(&req).is_some() {
            "the API key is not valid"
        } else {
            "an API key is required: send Authorization: Bearer KEY or X-API-Key: KEY"
        };
        return Ok(req
            .error_response(ApiError::new(ErrorCode::InvalidApiKey, message))
            .map_into_right_body());
    };
    tracing::Span::current().record("key", &*identity.name);
    let workspace = match with_workspace {
        false => None,
        true => match workspace_of(&req, &identity).await {
            Ok(w) => w,
            Err(e) => return Ok(req.error_response(e).map_into_right_body()),
        },
    };
    req.extensions_mut().insert(identity);
    if let Some(workspace) = workspace {
        tracing::Span::current().record("workspace", &*workspace.name);
        req.extensions_mut().insert(workspace);
    }
    Ok(next.call(req).await?.map_into_left_body())
}

/// The workspace a request works in: its key's, or the one an operator's key names in
/// `X-KBQ-Workspace`. `400` for a header that is no workspace name, `403` for another key
/// naming a workspace not its own, `404 workspace_not_found` for one that does not exist.
/// `None` when the app has no workspaces (a test's app of a single route).
async fn workspace_of(
    req: &ServiceRequest,
    identity: &KeyIdentity,
) -> Result<Option<Workspace>, ApiError> {
    let Some(workspaces) = req.app_data::<web::Data<Workspaces>>().cloned() else {
        return Ok(None);
    };
    let workspaces = workspaces.into_inner();
    let named = match req.headers().get(workspaces::HEADER) {
        None => None,
        Some(v) => {
            let name = v.to_str().map(str::trim).unwrap_or_default();
            if !workspaces::valid_name(name) {
                return Err(ApiError::invalid(
                    "X-KBQ-Workspace",
                    format!("must name a workspace: {}", workspaces::NAME_RULE),
                ));
            }
            Some(name)
        }
    };
    let name = match named {
        Some(name) if name != &*identity.workspace => {
            if !identity.is_operator() {
                return Err(ApiError::new(
                    ErrorCode::WorkspaceForbidden,
                    "this API key may act only in its own workspace: only an admin key of `default` may name another in X-KBQ-Workspace",
                ));
            }
            name
        }
        _ => &*identity.workspace,
    };
    let workspace = workspaces.get(name).await?;
    if !identity.opens(name, &workspace.knowledge.kb.config().database) {
        // Its workspace was deleted (and one created under its name) before this node's
        // memory of the key and of the workspace caught up.
        return Err(ApiError::new(
            ErrorCode::InvalidApiKey,
            "this API key's workspace was deleted",
        ));
    }
    Ok(Some(workspace))
}

/// Middleware (after [`require_key`]): 403 `insufficient_scope` unless the key holds `scope`.
pub async fn require_scope(
    scope: Scope,
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, actix_web::Error> {
    let allowed = req
        .extensions()
        .get::<KeyIdentity>()
        .is_some_and(|k| k.scopes.allows(scope));
    if !allowed {
        return Ok(req
            .error_response(ApiError::new(
                ErrorCode::InsufficientScope,
                format!("this API key lacks the `{}` scope", scope.as_str()),
            ))
            .map_into_right_body());
    }
    Ok(next.call(req).await?.map_into_left_body())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minted key opens its own workspace only while that is the one it was minted in (a
    /// workspace deleted and created again under its name has another database); a
    /// configured key, with no database, opens its workspace whatever it is.
    #[test]
    fn a_minted_key_opens_only_the_workspace_it_was_minted_in() {
        let minted = KeyIdentity {
            name: "reader".into(),
            id: "id".into(),
            scopes: Scopes::from_names(Some(&["read".to_string()])),
            workspace: "acme".into(),
            database: Some("ws_first".into()),
        };
        assert!(minted.opens("acme", "ws_first"));
        assert!(!minted.opens("acme", "ws_second"));
        // Another workspace is the header's and the scopes' business, not this check's.
        assert!(minted.opens("other", "ws_other"));
        let configured = KeyIdentity {
            database: None,
            workspace: workspaces::DEFAULT.into(),
            ..minted
        };
        assert!(configured.opens(workspaces::DEFAULT, "kbq"));
    }

    /// A key is known by its configured name and by an id, its hash's first half in hex,
    /// whichever way it was configured; another key is not known.
    #[test]
    fn a_verified_key_carries_its_name_and_its_hashs_id() {
        let configured = "kbq_configured";
        let keys = Keys::new(
            &[KeyEntry {
                name: "reader".into(),
                sha256: hex::encode(hash(configured)),
                scopes: Some(vec!["graph".into()]),
            }],
            &["plain".to_string()],
        );
        for (presented, name) in [(configured, "reader"), ("plain", "env-0")] {
            let who = keys.verify(presented).expect("a configured key");
            assert_eq!(&*who.name, name);
            assert_eq!(&*who.id, hex::encode(&hash(presented)[..16]));
            assert_eq!(who.id.len(), 32);
        }
        assert!(keys.verify("kbq_other").is_none());
        assert!(keys.verify("").is_none());
    }
}
