//! Black-box tests of the whole server over real HTTP: each test starts kbq on 127.0.0.1:0
//! against a fresh embedded store.

mod abuse;
mod agent;
mod agent_stream;
mod auth;
mod clients;
mod completions;
mod cors;
mod doc_examples;
mod embedder;
mod errors;
mod graph;
mod import_cli;
mod ingest;
mod lanes;
mod limits;
mod load;
mod mcp;
mod metrics;
mod openai;
mod openapi;
mod priority;
mod probes;
mod python_compat;
mod rag;
mod remote;
mod scopes;
pub mod scripted;
mod scripted_server;
mod shutdown;
mod sources;
mod startup;
mod supervision;
mod support;
mod ui;
mod versions;
mod workspaces;
