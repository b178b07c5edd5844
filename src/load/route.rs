//! [`Route`]: the requests `kbq load` can send, by the names `--mix` and
//! `--route-concurrency` use. An enum rather than strings so that picking a route per request
//! is a table index, and a route the driver cannot build is a compile error.

use serde::Serialize;

/// One kind of request to the server under load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Route {
    /// `POST /data/v1/query/graph`, depth 2, limit 50.
    Traverse,
    /// `POST /data/v1/query/graph/search`, limit 10, a piece of an entity's name.
    Search,
    /// `GET /data/v1/query/graph/entity/{name}`.
    Entity,
    /// `POST /data/v1/query/graph/documents`, max_depth 1, limit 10.
    Documents,
    /// `POST /v1/rag/hybrid`, limit 5.
    Rag,
    /// `POST /v1/agent/chat` (whichever providers the server has).
    Chat,
    /// `GET /v1/agent/health`.
    Health,
    /// `GET /livez`, without a key.
    Livez,
}

impl Route {
    /// Every route, in the order `kbq load --help` lists them.
    pub const ALL: [Route; 8] = [
        Route::Traverse,
        Route::Search,
        Route::Entity,
        Route::Documents,
        Route::Rag,
        Route::Chat,
        Route::Health,
        Route::Livez,
    ];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Route::Traverse => "traverse",
            Route::Search => "search",
            Route::Entity => "entity",
            Route::Documents => "documents",
            Route::Rag => "rag",
            Route::Chat => "chat",
            Route::Health => "health",
            Route::Livez => "livez",
        }
    }

    /// The route called `name`, or an error that lists the routes.
    pub fn parse(name: &str) -> Result<Route, String> {
        Route::ALL
            .into_iter()
            .find(|r| r.name() == name)
            .ok_or_else(|| {
                let names: Vec<&str> = Route::ALL.iter().map(|r| r.name()).collect();
                format!("unknown route `{name}`; routes are {}", names.join(", "))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::Route;

    #[test]
    fn every_route_parses_from_its_name_and_serializes_as_it() {
        for r in Route::ALL {
            assert_eq!(Route::parse(r.name()), Ok(r));
            assert_eq!(serde_json::to_value(r).unwrap(), r.name());
        }
        assert!(
            Route::parse("Traverse")
                .unwrap_err()
                .contains("unknown route")
        );
    }
}
