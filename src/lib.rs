//! kbq: a knowledge base query service and actor-based agent runtime. This crate is the HTTP
//! edge; the work happens in `kbq-actors`, over the knowledge base in `kbq-store`.
//!
//! # Layout
//! - [`config`]: layered configuration (defaults, TOML file, `KBQ_*` variables) and its rules.
//! - [`server`]: assembles the knowledge base, the actor runtime and the actix-web server.
//! - [`startup`]: readiness while the store connects and indexes behind the bound listener.
//! - [`routes`]: one module per resource group, each with its handlers and `configure`.
//! - [`openapi`]: the OpenAPI 3.1 document, generated from the handlers and their types.
//! - [`extract`]: the JSON body extractor whose errors name the field at fault, and the field
//!   checks that several routes share.
//! - [`models`]: the model names of the OpenAI-compatible routes and the providers behind each.
//! - [`error`]: the public error-code table and the one error body.
//! - [`limits`]: per-key rate limits (governor), a budget for graph and one for agent routes.
//! - [`auth`]: API keys (hashed, compared in constant time; configured or minted into the
//!   store) and the key middleware, which also resolves the request's workspace.
//! - [`workspaces`]: the workspace a request works in, and the workspaces a node has open.
//! - [`workspaces_cli`]: `kbq workspaces`, the admin API's operations against a store.
//! - [`versions`]: path versions, deprecation headers, sunset (410), and the clock.
//! - [`middleware`]: request ids, tracing spans, and error-body normalisation.
//! - [`offload`]: runs handlers' knowledge-base calls on the main runtime, off the HTTP threads.
//! - [`priority`]: thread priorities (kbq-actors' module): the main runtime's threads below the
//!   HTTP workers and lookup lane, the ingestion runtime's below those.
//! - [`huge_pages`]: transparent huge pages off for the process, for its allocator's sake.
//! - [`cors`]: the browser origins allowed to call kbq.
//! - [`peer`]: notices a client that has closed its connection, so a handler can stop early.
//! - [`metrics`]: the Prometheus series at `/metrics` and the middleware that records them.
//! - [`load`]: `kbq load`, the load generator that drives a running kbq.
//! - [`ingest_files`]: `kbq ingest`, files and folders through the ingestion pipeline.
//! - [`cli`]: how the one-shot commands end: their result line and exit status.
//! - [`demo`]: the bundled demo knowledge base.

pub mod auth;
pub mod cli;
pub mod config;
pub mod cors;
pub mod demo;
pub mod error;
pub mod eval;
pub mod export;
pub mod extract;
pub mod huge_pages;
pub mod ingest_files;
pub mod limits;
pub mod load;
pub mod mcp;
pub mod metrics;
pub mod middleware;
pub mod models;
pub mod offload;
pub mod openapi;
pub mod peer;
pub use kbq_actors::priority;
pub mod routes;
pub mod server;
pub mod startup;
pub mod telemetry;
pub mod versions;
pub mod workspaces;
pub mod workspaces_cli;
