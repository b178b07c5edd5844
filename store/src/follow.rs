//! Following writes made elsewhere. Several kbq nodes (and `kbq import --store ws://...`) may
//! share one SurrealDB server, and each node answers from its own in-memory graph, vector and
//! keyword indexes, so each must learn of the writes the others make.
//!
//! [`KnowledgeBase::follow_changes`] holds LIVE SELECTs on the entity, relationship and
//! document tables. A notification is taken only as a hint that a record changed: the follower
//! reads the changed records' current state in one query per table and applies it (present:
//! upsert, gone: remove). So a notification that comes late, twice, or before the one for the
//! entity its relationship needs cannot leave an index behind the database, and the follower
//! also skips over this node's own writes without harm (they are already applied).
//!
//! On a server the LIVE queries are held on a connection of their own
//! (`KnowledgeBase::subscribe_beside`), so that the server's ending a subscription whose
//! notifications queue up unread ends no statement. A LIVE query ends with its connection.
//! When that happens the follower subscribes again on a new connection once the server
//! answers, and then rebuilds both indexes from the database, because the writes made while
//! it was away sent nothing. Subscribing before rebuilding means no write falls between the
//! two.

use std::collections::BTreeSet;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::stream::SelectAll;
use futures::{FutureExt, StreamExt};
use parking_lot::RwLockWriteGuard;
use surrealdb::types::{Object, RecordIdKey, SurrealValue, Value};

use crate::db::{Connected, Database};
use crate::db::{RELATIONSHIP_FIELDS, obj, relationship_record_id};
use crate::error::{Result, StoreError};
use crate::kb::KnowledgeBase;
use crate::live::{FirstSubscription, Notifications, Table};
use crate::model::Relationship;
use crate::model::table::DOCUMENT;
use crate::write::LOCK_BATCH;

/// Most changed records applied in one round of reads.
const BATCH: usize = 1000;
/// Pause before subscribing again after a failed attempt.
const RETRY_PAUSE: Duration = Duration::from_millis(500);

/// Records named by notifications, waiting to be read and applied.
#[derive(Default)]
pub(crate) struct Changes {
    pub entities: BTreeSet<String>,
    pub relationships: BTreeSet<(String, String, String)>,
    pub documents: BTreeSet<String>,
}

impl Changes {
    fn len(&self) -> usize {
        self.entities.len() + self.relationships.len() + self.documents.len()
    }

    /// Records what one notification names; notifications of another shape are ignored.
    fn note(&mut self, table: Table, data: Value) {
        let Value::Object(row) = data else { return };
        let text = |field: &str| match row.get(field) {
            Some(Value::String(s)) => Some(s.clone()),
            _ => None,
        };
        match table {
            Table::Entity => {
                if let Some(name) = text("name") {
                    self.entities.insert(name);
                }
            }
            Table::Relates => {
                if let (Some(s), Some(t), Some(ty)) = (
                    text("source_name"),
                    text("target_name"),
                    text("relationship_type"),
                ) {
                    self.relationships.insert((s, t, ty));
                }
            }
            Table::Document => {
                if let Some(Value::RecordId(id)) = row.get("id")
                    && let RecordIdKey::String(key) = &id.key
                {
                    self.documents.insert(key.clone());
                }
            }
        }
    }
}

impl KnowledgeBase {
    /// Keeps this node's indexes current with writes made through other connections to the
    /// same database, until the knowledge base is dropped or the returned task is aborted.
    /// Only a shared server needs it: an embedded store has one writer, this process.
    ///
    /// The receiver turns true once the first subscription is made and the indexes rebuilt
    /// after it: a writer that starts before then may see its writes replaced by a rebuild
    /// that read the store before they landed, until their notifications put them back, so
    /// start-up waits for it before it writes the demo and declares itself ready.
    pub fn follow_changes(
        self: &Arc<Self>,
    ) -> (
        tokio::task::JoinHandle<()>,
        tokio::sync::watch::Receiver<bool>,
    ) {
        let weak = Arc::downgrade(self);
        let (synced, first_sync) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            loop {
                let Some(kb) = weak.upgrade() else { return };
                let started = kb.start_following().await;
                drop(kb);
                match started {
                    Ok(notifications) => {
                        synced.send_replace(true);
                        tracing::info!("following changes made through other connections");
                        match follow(&weak, notifications).await {
                            Ok(()) => return,
                            Err(e) => tracing::warn!(error = %e, "stopped following changes"),
                        }
                    }
                    Err(e) => tracing::debug!(error = %e, "not following changes yet"),
                }
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        });
        (task, first_sync)
    }

    /// Asks the first connection to subscribe before it builds the indexes (call it before
    /// [`connect`](Self::connect)), so that [`follow_changes`](Self::follow_changes) starts
    /// from that subscription instead of subscribing and building the indexes a second time.
    pub fn follow_changes_from_start(&self) {
        *self.first_subscription.lock() = FirstSubscription::Wanted;
    }

    /// Subscribes, then rebuilds both indexes from the store: in that order, so that no
    /// write falls between the rebuild and the first notification. The first connection's
    /// subscription, when it made one, is already followed by the indexes it built.
    async fn start_following(&self) -> Result<Notifications> {
        let first = std::mem::take(&mut *self.first_subscription.lock());
        if let FirstSubscription::Made(notifications) = first {
            return Ok(notifications);
        }
        let notifications = self.subscribe().await?;
        self.reload_indexes().await?;
        Ok(notifications)
    }

    /// Starts the three LIVE SELECTs.
    async fn subscribe(&self) -> Result<Notifications> {
        let c = self.connection().await?;
        self.subscribe_beside(&c).await
    }

    /// Starts the three LIVE SELECTs for this knowledge base, whose statements run on `c`. On
    /// a server they are held on a connection of their own: the server ends a connection
    /// whose notifications queue up unread (`SURREAL_WEBSOCKET_RESPONSE_CHANNEL_SIZE`, 100 by
    /// default), and every statement in flight on it with it. One write of many records sends
    /// that many notifications at once. On their own connection, a lagging subscription ends
    /// only itself, and the follower subscribes again and rebuilds. An embedded store has
    /// nothing to end: they are held on `c`.
    pub(crate) async fn subscribe_beside(&self, c: &Connected) -> Result<Notifications> {
        let config = self.config();
        if !config.is_server() {
            return subscribe_on(&c.db, ()).await;
        }
        let own = tokio::time::timeout(config.connect_timeout, self.reach(None))
            .await
            .map_err(|_| {
                StoreError::Unavailable(format!(
                    "no connection for the LIVE subscriptions to {} within {:?}",
                    config.url, config.connect_timeout
                ))
            })??;
        let own = Arc::new(own);
        subscribe_on(&own, own.clone()).await
    }

    /// Reads the current state of the changed records and applies it to the indexes.
    pub(crate) async fn apply_changes(&self, changes: Changes) -> Result<()> {
        if let Some(index) = self.graph_index() {
            let names: Vec<String> = changes.entities.into_iter().collect();
            if !names.is_empty() {
                let found = self.entities_by_name(&names).await?;
                let mut index = index.write();
                let present: BTreeSet<&str> = found.iter().map(|e| e.name.as_str()).collect();
                for name in names.iter().filter(|n| !present.contains(n.as_str())) {
                    index.remove_entity(name);
                }
                // In parts, as the write path puts them, so that a reader waits for one part
                // of a large change, not all of it.
                let mut found = found.into_iter().peekable();
                while found.peek().is_some() {
                    index.upsert_entities(found.by_ref().take(LOCK_BATCH));
                    RwLockWriteGuard::bump(&mut index);
                }
                self.bump_generation();
            }
            let rels: Vec<(String, String, String)> = changes.relationships.into_iter().collect();
            if !rels.is_empty() {
                let ids: Vec<_> = rels
                    .iter()
                    .map(|(s, t, ty)| relationship_record_id(s, t, ty))
                    .collect();
                let found: Vec<Relationship> = self
                    .run(
                        &format!("SELECT {RELATIONSHIP_FIELDS} FROM $ids"),
                        obj([("ids", ids.into_value())]),
                    )
                    .await?;
                let mut index = index.write();
                let present: BTreeSet<(&str, &str, &str)> = found
                    .iter()
                    .map(|r| {
                        (
                            r.source_name.as_str(),
                            r.target_name.as_str(),
                            r.relationship_type.as_str(),
                        )
                    })
                    .collect();
                for (s, t, ty) in &rels {
                    if !present.contains(&(s.as_str(), t.as_str(), ty.as_str())) {
                        index.remove_relationship(s, t, ty);
                    }
                }
                for r in found {
                    index.upsert_relationship(r);
                }
            }
        }
        let keys: Vec<String> = changes.documents.into_iter().collect();
        if !keys.is_empty() {
            let ids: Vec<_> = keys
                .iter()
                .map(|k| surrealdb::types::RecordId::new(DOCUMENT, k.as_str()))
                .collect();
            let found = self.document_entries(ids).await?;
            let present: BTreeSet<&str> = found.iter().map(|e| e.key.as_str()).collect();
            let gone: Vec<&String> = keys
                .iter()
                .filter(|k| !present.contains(k.as_str()))
                .collect();
            self.unindex_documents(&gone);
            self.index_documents(found);
        }
        Ok(())
    }
}

/// Starts the three LIVE SELECTs on `db`'s session; each stream holds `held` as long as it
/// lives. A session's live queries end with its handle (a clone is another session), so a
/// connection of the subscriptions' own is held by its streams, and the follower's dropping
/// them closes it.
async fn subscribe_on<H: Send + Clone + 'static>(db: &Database, held: H) -> Result<Notifications> {
    let mut all = SelectAll::new();
    for table in Table::ALL {
        let sql = table.subscription();
        let mut resp = crate::db::retry_conflicts(|| db.query(&sql, Object::new()))
            .await
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        let stream = resp
            .stream::<Value>(0)
            .map_err(|e| StoreError::Query(e.to_string()))?;
        let held = held.clone();
        all.push(
            stream
                .map(move |n| {
                    let _ = &held;
                    (table, n.map(|n| n.data))
                })
                .boxed(),
        );
    }
    Ok(all)
}

/// Applies notifications until the subscription breaks (an error) or the knowledge base is
/// dropped (`Ok`). Notifications that are ready together are applied together.
async fn follow(kb: &Weak<KnowledgeBase>, mut notifications: Notifications) -> Result<()> {
    let broken = || StoreError::Unavailable("the LIVE subscription ended".into());
    loop {
        let Some(first) = notifications.next().await else {
            return Err(broken());
        };
        let mut changes = Changes::default();
        let mut next = Some(first);
        while let Some((table, item)) = next {
            let data = item.map_err(|e| StoreError::Unavailable(e.to_string()))?;
            changes.note(table, data);
            if changes.len() >= BATCH {
                break;
            }
            next = match notifications.next().now_or_never() {
                Some(Some(n)) => Some(n),
                Some(None) => return Err(broken()),
                None => None,
            };
        }
        let Some(kb) = kb.upgrade() else {
            return Ok(());
        };
        kb.apply_changes(changes).await?;
    }
}

#[cfg(test)]
mod tests {
    use surrealdb::types::{RecordId, SurrealValue, Value};

    use super::{Changes, Table};
    use crate::db::obj;

    #[test]
    fn a_notification_names_its_record_and_other_shapes_are_ignored() {
        let mut changes = Changes::default();
        let text = |s: &str| s.to_string().into_value();
        changes.note(Table::Entity, Value::Object(obj([("name", text("Ada"))])));
        changes.note(
            Table::Relates,
            Value::Object(obj([
                ("source_name", text("Ada")),
                ("target_name", text("Babbage")),
                ("relationship_type", text("knows")),
            ])),
        );
        changes.note(
            Table::Document,
            Value::Object(obj([(
                "id",
                RecordId::new("document", "d0123").into_value(),
            )])),
        );
        // A repeated notification names the same record once.
        changes.note(Table::Entity, Value::Object(obj([("name", text("Ada"))])));
        // Shapes that name nothing are skipped, not applied.
        changes.note(Table::Entity, Value::None);
        changes.note(
            Table::Relates,
            Value::Object(obj([("source_name", text("Ada"))])),
        );
        changes.note(Table::Document, Value::Object(obj([("id", text("d9"))])));
        assert_eq!(changes.entities.iter().collect::<Vec<_>>(), ["Ada"]);
        assert_eq!(
            changes.relationships.iter().cloned().collect::<Vec<_>>(),
            [("Ada".into(), "Babbage".into(), "knows".into())]
        );
        assert_eq!(changes.documents.iter().collect::<Vec<_>>(), ["d0123"]);
        assert_eq!(changes.len(), 3);
    }
}
