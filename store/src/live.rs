//! The LIVE SELECT subscriptions a node holds to learn of other nodes' writes: the tables
//! followed and the first connection's subscription. The follower
//! ([`follow`](crate::follow)) reads them; [`KnowledgeBase`](crate::KnowledgeBase) keeps the
//! first subscription it made on connecting until the follower takes it.

use futures::stream::{BoxStream, SelectAll};
use surrealdb::types::Value;

use crate::db::RELATIONSHIP_NAME_FIELDS;
use crate::model::table::{DOCUMENT, ENTITY, RELATES};

/// The tables followed, one LIVE SELECT each.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Table {
    Entity,
    Relates,
    Document,
}

impl Table {
    pub(crate) const ALL: [Table; 3] = [Table::Entity, Table::Relates, Table::Document];

    /// The LIVE SELECT on this table; it projects only what names a record.
    pub(crate) fn subscription(self) -> String {
        match self {
            Table::Entity => format!("LIVE SELECT name FROM {ENTITY}"),
            Table::Relates => format!("LIVE SELECT {RELATIONSHIP_NAME_FIELDS} FROM {RELATES}"),
            Table::Document => format!("LIVE SELECT id FROM {DOCUMENT}"),
        }
    }
}

/// The first connection's subscription, for [`KnowledgeBase::follow_changes_from_start`](crate::KnowledgeBase::follow_changes_from_start).
#[derive(Default)]
pub(crate) enum FirstSubscription {
    /// The first connection does not subscribe: the follower subscribes and rebuilds.
    #[default]
    NotWanted,
    /// The next connection subscribes before it builds the indexes.
    Wanted,
    /// It did: the follower starts from this subscription.
    Made(Notifications),
}

pub(crate) type Notifications = SelectAll<BoxStream<'static, (Table, surrealdb::Result<Value>)>>;
