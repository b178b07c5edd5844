//! The model names that the OpenAI-compatible routes answer to: `kbq` (every provider in
//! priority order), the aliases of `[chat.aliases]`, and each provider by its name, each with
//! the providers it stands for. Its own file because two resource groups read it
//! (`POST /v1/chat/completions` picks the chain, `GET /v1/models` lists the names) and the
//! server builds it from the config.

use std::collections::BTreeMap;

use crate::config::DEFAULT_MODEL;

/// The model names this server answers to, each with the providers it tries in order.
#[derive(Debug, Clone)]
pub struct Models {
    /// In listing order: `kbq`, the aliases, then the providers.
    names: Vec<(String, ModelKind)>,
    chains: BTreeMap<String, Option<Vec<String>>>,
}

/// What a model name stands for, for `GET /v1/models`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelKind {
    /// `kbq`: every provider in priority order.
    Default,
    Alias,
    Provider,
}

impl Models {
    pub fn new(providers: &[String], aliases: &BTreeMap<String, Vec<String>>) -> Self {
        let mut names = vec![(DEFAULT_MODEL.to_string(), ModelKind::Default)];
        let mut chains = BTreeMap::from([(DEFAULT_MODEL.to_string(), None)]);
        for (alias, chain) in aliases {
            names.push((alias.clone(), ModelKind::Alias));
            chains.insert(alias.clone(), Some(chain.clone()));
        }
        for p in providers {
            names.push((p.clone(), ModelKind::Provider));
            chains.insert(p.clone(), Some(vec![p.clone()]));
        }
        Models { names, chains }
    }

    pub fn names(&self) -> &[(String, ModelKind)] {
        &self.names
    }

    /// The providers behind `model` (`None`: all, in priority order), or `None` when the
    /// name is unknown.
    pub fn chain(&self, model: &str) -> Option<Option<&[String]>> {
        self.chains.get(model).map(Option::as_deref)
    }
}
