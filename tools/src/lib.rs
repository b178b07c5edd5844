//! kbq's built-in agent tools: what each does, its JSON schema, argument validation, and the
//! call itself over the knowledge base. No actor or HTTP code lives here.
//!
//! # Layout
//! - [`tool`]: the [`Tool`] trait, the [`Workspace`] a request works in, [`ToolContext`],
//!   [`ToolResult`] (a result as JSON text),
//!   [`ToolError`] and argument validation.
//! - [`search`]: SemanticSearchTool and HybridSearchTool.
//! - [`graph`]: the KnowledgeGraphTool.
//! - [`memory`]: MemorySearchTool, MemoryStoreTool, MemoryStatsTool.
//! - [`outputs`]: the JSON Schema of each tool's result.
//! - [`extract`]: the entity extractor (Aho-Corasick over entity names).
//! - [`fusion`]: reciprocal rank fusion.
//! - [`rag`]: semantic, keyword and hybrid document search for the RAG endpoints.

pub mod extract;
pub mod fusion;
pub mod graph;
pub mod memory;
pub mod outputs;
pub mod rag;
pub mod search;
pub mod tool;

use std::sync::Arc;

pub use extract::EntityExtractor;
pub use tool::{Tool, ToolContext, ToolError, ToolResult, Workspace, openai_definition};

/// The six built-in tools, by name.
#[derive(Clone)]
pub struct Toolbox {
    tools: Vec<Arc<dyn Tool>>,
}

impl Default for Toolbox {
    fn default() -> Self {
        Toolbox {
            tools: vec![
                Arc::new(search::SemanticSearchTool),
                Arc::new(graph::KnowledgeGraphTool),
                Arc::new(search::HybridSearchTool),
                Arc::new(memory::MemorySearchTool),
                Arc::new(memory::MemoryStoreTool),
                Arc::new(memory::MemoryStatsTool),
            ],
        }
    }
}

impl Toolbox {
    pub fn tools(&self) -> &[Arc<dyn Tool>] {
        &self.tools
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.iter().find(|t| t.name() == name)
    }

    /// The OpenAI `tools` array offering every tool.
    pub fn openai_definitions(&self) -> Vec<serde_json::Value> {
        self.tools
            .iter()
            .map(|t| openai_definition(t.as_ref()))
            .collect()
    }
}
