//! `kbq workspaces`: the admin API's workspace and key operations against a store directly,
//! for an operator without an HTTP admin key. Each prints its result as the admin API answers
//! it (JSON), and nothing else on standard output.

use std::process::ExitCode;
use std::sync::Arc;

use clap::Subcommand;
use kbq_store::{Counts, KnowledgeBase, QuotaOverrides, WorkspaceRecord};
use serde::Serialize;
use serde_json::Value;

use crate::config::Config;
use crate::routes::admin::{
    KeyList, KeyRevocation, KeyView, MintedKey, WorkspaceCounts, WorkspaceDeletion, WorkspaceList,
    WorkspaceView, scopes_of,
};
use crate::workspaces::{DEFAULT, NAME_RULE, Quota, valid_name};

#[derive(Debug, Subcommand)]
pub enum WorkspacesCommand {
    /// List the workspaces, `default` first, with their counts.
    List,
    /// Show one workspace with its counts, as `list` shows each.
    Show { name: String },
    /// Create an empty workspace.
    Create { name: String },
    /// Delete a workspace with all of its data and keys (`default` cannot be deleted).
    Delete { name: String },
    /// List a workspace's minted keys (never the keys themselves).
    Keys { name: String },
    /// Mint a key of a workspace and print it, once.
    Mint {
        name: String,
        /// Comma-separated: read, write, agent, admin.
        #[arg(long, default_value = "read")]
        scopes: String,
        /// A name for the key, for people and logs.
        #[arg(long = "key-name", default_value = "cli")]
        key_name: String,
    },
    /// Revoke a key of a workspace by its id.
    Revoke { name: String, id: String },
    /// Set what a workspace may hold, over the configured `[workspaces]` bounds, and the rate
    /// budgets its keys share, over `[limits]`'s `workspace_*`, as a whole: each given
    /// replaces the configured one (0: no bound, or no budget), each left out goes back to
    /// it.
    Quota {
        name: String,
        #[command(flatten)]
        quota: QuotaFlags,
    },
}

/// `kbq workspaces quota`'s flags: a workspace's own bounds and rate budgets.
#[derive(Debug, clap::Args)]
pub struct QuotaFlags {
    #[arg(long)]
    max_entities: Option<u64>,
    #[arg(long)]
    max_documents: Option<u64>,
    /// Bytes of the documents' content.
    #[arg(long)]
    max_document_bytes: Option<u64>,
    /// Graph requests a minute, every key of the workspace together (0 to 100000000; 0:
    /// no budget).
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=100_000_000))]
    graph_per_minute: Option<u64>,
    /// Graph requests at once (1 to 10000000).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    graph_burst: Option<u64>,
    /// Agent requests a minute, every key of the workspace together (0 to 100000000; 0:
    /// no budget).
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=100_000_000))]
    agent_per_minute: Option<u64>,
    /// Agent requests at once (1 to 10000000).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    agent_burst: Option<u64>,
}

impl From<QuotaFlags> for QuotaOverrides {
    fn from(f: QuotaFlags) -> Self {
        QuotaOverrides {
            max_entities: f.max_entities,
            max_documents: f.max_documents,
            max_document_bytes: f.max_document_bytes,
            graph_per_minute: f.graph_per_minute,
            graph_burst: f.graph_burst,
            agent_per_minute: f.agent_per_minute,
            agent_burst: f.agent_burst,
        }
    }
}

/// Runs `command` against the configured store: 0 when it did what it was asked, 1 when the
/// store refused or failed, 2 for an argument that breaks a rule.
pub async fn run(config: Config, command: WorkspacesCommand) -> ExitCode {
    match run_inner(&config, command).await {
        Ok(out) => {
            println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Err((code, message)) => {
            eprintln!("kbq: workspaces: {message}");
            ExitCode::from(code)
        }
    }
}

type Failure = (u8, String);

fn usage(message: String) -> Failure {
    (2, message)
}

fn failed(e: impl std::fmt::Display) -> Failure {
    (1, e.to_string())
}

/// The failure of a command about a workspace the registry does not have.
fn missing(name: &str) -> Failure {
    failed(format!("there is no workspace `{name}`"))
}

fn checked(name: &str) -> Result<(), Failure> {
    if valid_name(name) {
        Ok(())
    } else {
        Err(usage(format!("`{name}` is no workspace name: {NAME_RULE}")))
    }
}

async fn run_inner(config: &Config, command: WorkspacesCommand) -> Result<Value, Failure> {
    // The registry and the counts are read, not the vectors: a store whose embedder is not
    // the configured one is managed all the same (as for `kbq reindex`).
    let kb = KnowledgeBase::open_for_reembed(config.store_config(), config.embedder()).await;
    kb.ping().await.map_err(failed)?;
    let configured = config.keeping().quota;
    match command {
        WorkspacesCommand::List => {
            let mut workspaces = vec![default_view(&kb, configured).await?];
            for w in kb.workspaces().await.map_err(failed)? {
                workspaces.push(workspace_view(&kb, w, configured).await?);
            }
            json(WorkspaceList { workspaces })
        }
        WorkspacesCommand::Show { name } => {
            if name == DEFAULT {
                return json(default_view(&kb, configured).await?);
            }
            checked(&name)?;
            let w = (kb.workspace(&name).await.map_err(failed)?).ok_or_else(|| missing(&name))?;
            json(workspace_view(&kb, w, configured).await?)
        }
        WorkspacesCommand::Quota { name, quota } => {
            if name == DEFAULT {
                return Err(failed("the workspace `default` has no quota"));
            }
            checked(&name)?;
            let own = QuotaOverrides::from(quota);
            let w = (kb.set_workspace_quota(&name, own).await.map_err(failed)?)
                .ok_or_else(|| missing(&name))?;
            json(workspace_view(&kb, w, configured).await?)
        }
        WorkspacesCommand::Create { name } => {
            checked(&name)?;
            if name == DEFAULT {
                return Err(failed("the workspace `default` always exists"));
            }
            let made = kb.create_workspace(&name).await.map_err(failed)?;
            let made = made.ok_or_else(|| failed(format!("a workspace named `{name}` exists")))?;
            json(view(made, Counts::default(), 0, configured))
        }
        WorkspacesCommand::Delete { name } => {
            if name == DEFAULT {
                return Err(failed("the workspace `default` cannot be deleted"));
            }
            checked(&name)?;
            let gone = kb.delete_workspace(&name).await.map_err(failed)?;
            gone.ok_or_else(|| missing(&name))?;
            json(WorkspaceDeletion {
                name,
                deleted: true,
            })
        }
        WorkspacesCommand::Keys { name } => {
            exists(&kb, &name).await?;
            let keys = (kb.keys_of(&name).await.map_err(failed)?)
                .into_iter()
                .map(KeyView::from)
                .collect();
            json(KeyList { keys })
        }
        WorkspacesCommand::Mint {
            name,
            scopes,
            key_name,
        } => {
            exists(&kb, &name).await?;
            let mut list: Vec<String> = scopes
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect();
            if list.is_empty() || list.iter().any(|s| crate::auth::Scope::parse(s).is_none()) {
                return Err(usage(format!(
                    "--scopes `{scopes}`: name one or more of read, write, agent, admin"
                )));
            }
            list.sort();
            list.dedup();
            kbq_store::model::check_name("--key-name", &key_name)
                .map_err(|e| usage(e.to_string()))?;
            let (key, stored) = crate::auth::mint(key_name, list, name);
            kb.put_key(&stored).await.map_err(failed)?;
            json(MintedKey {
                scopes: scopes_of(&stored.scopes),
                id: stored.id,
                key,
                name: stored.name,
                workspace: stored.workspace,
            })
        }
        WorkspacesCommand::Revoke { name, id } => {
            exists(&kb, &name).await?;
            if !kb.revoke_key(&name, &id).await.map_err(failed)? {
                return Err(failed(format!("the workspace `{name}` has no key `{id}`")));
            }
            json(KeyRevocation { id, revoked: true })
        }
    }
}

/// The knowledge base of the workspace `name` in the configured store, connected and with
/// its indexes built, for a command that writes to it (`kbq import`, `kbq ingest`). The
/// message of an error says what to do.
pub async fn open_workspace(config: &Config, name: &str) -> Result<Arc<KnowledgeBase>, String> {
    open(config, name, false).await
}

/// As [`open_workspace`], for `kbq reindex`: documents another embedder wrote are accepted
/// ([`KnowledgeBase::open_for_reembed`]).
pub async fn open_for_reembed(config: &Config, name: &str) -> Result<Arc<KnowledgeBase>, String> {
    open(config, name, true).await
}

async fn open(config: &Config, name: &str, reembed: bool) -> Result<Arc<KnowledgeBase>, String> {
    let cannot_open = |e: &dyn std::fmt::Display| {
        format!(
            "cannot open the store {}: {e} (is a kbq server using this store? an embedded store has one user at a time: stop the server first)",
            config.store.url
        )
    };
    if name != DEFAULT && !valid_name(name) {
        return Err(format!(
            "--workspace `{name}` is no workspace name: {NAME_RULE}"
        ));
    }
    // For another workspace, `default` is opened for its registry only: as for a reembed,
    // its vectors are not loaded, and its embedder may differ.
    let kb = if name == DEFAULT && !reembed {
        KnowledgeBase::open(config.store_config(), config.embedder()).await
    } else {
        KnowledgeBase::open_for_reembed(config.store_config(), config.embedder()).await
    };
    kb.ping().await.map_err(|e| cannot_open(&e))?;
    if name == DEFAULT {
        return Ok(kb);
    }
    let record = kb
        .workspace(name)
        .await
        .map_err(|e| cannot_open(&e))?
        .ok_or_else(|| {
            format!(
                "there is no workspace `{name}` (create it with `kbq workspaces create {name}`)"
            )
        })?;
    let workspace = if reembed {
        kb.workspace_kb_for_reembed(&record.database)
    } else {
        kb.workspace_kb(&record.database)
    };
    workspace
        .connect(&kbq_store::progress::Silent)
        .await
        .map_err(|e| cannot_open(&e))?;
    Ok(workspace)
}

/// `Ok` when the workspace `name` exists (`default` always does).
async fn exists(kb: &KnowledgeBase, name: &str) -> Result<(), Failure> {
    if name == DEFAULT {
        return Ok(());
    }
    checked(name)?;
    match kb.workspace(name).await.map_err(failed)? {
        Some(_) => Ok(()),
        None => Err(missing(name)),
    }
}

/// An answer as the admin API's JSON.
fn json(answer: impl Serialize) -> Result<Value, Failure> {
    serde_json::to_value(answer).map_err(failed)
}

/// `default` as the admin API shows it.
async fn default_view(kb: &KnowledgeBase, configured: Quota) -> Result<WorkspaceView, Failure> {
    let counts = kb.counts().await.map_err(failed)?;
    let memories = kb.memory_count().await.map_err(failed)?;
    Ok(WorkspaceView {
        name: DEFAULT.to_string(),
        database: kb.database().to_string(),
        created_at: None,
        counts: workspace_counts(counts, memories),
        loaded: false,
        index_bytes: 0,
        quota: configured.budgets_only(),
        own_quota: QuotaOverrides::default(),
    })
}

/// The workspace `w` of the registry `kb` as the admin API shows it: counted in the store, as
/// the admin API counts a workspace it has not opened, without opening it (defining its
/// schema, building its indexes).
async fn workspace_view(
    kb: &KnowledgeBase,
    w: WorkspaceRecord,
    configured: Quota,
) -> Result<WorkspaceView, Failure> {
    let (counts, memories) = kb.database_counts(&w.database).await.map_err(failed)?;
    Ok(view(w, counts, memories, configured))
}

/// A registered workspace as the admin API shows one that no node here has open.
fn view(w: WorkspaceRecord, counts: Counts, memories: u64, configured: Quota) -> WorkspaceView {
    WorkspaceView {
        quota: configured.over(&w.quota),
        own_quota: w.quota,
        name: w.name,
        database: w.database,
        created_at: Some(w.created_at),
        counts: workspace_counts(counts, memories),
        loaded: false,
        index_bytes: 0,
    }
}

fn workspace_counts(counts: Counts, memories: u64) -> WorkspaceCounts {
    WorkspaceCounts {
        entities: counts.entities,
        relationships: counts.relationships,
        documents: counts.documents,
        memories,
    }
}

/// The knowledge base that reads workspace `name`'s database, and that database's name when
/// it is not its own (`None` for `default`): for `kbq export`, which reads a workspace without
/// opening a knowledge base over it.
pub async fn open_database(
    config: &Config,
    name: &str,
) -> Result<(Arc<KnowledgeBase>, Option<String>), String> {
    let kb = open(config, DEFAULT, true).await?;
    if name == DEFAULT {
        return Ok((kb, None));
    }
    if !valid_name(name) {
        return Err(format!(
            "--workspace `{name}` is no workspace name: {NAME_RULE}"
        ));
    }
    let record = kb
        .workspace(name)
        .await
        .map_err(|e| format!("cannot read the workspaces of {}: {e}", config.store.url))?
        .ok_or_else(|| format!("there is no workspace `{name}`"))?;
    Ok((kb, Some(record.database)))
}
