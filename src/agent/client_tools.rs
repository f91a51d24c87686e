//! The API client's own function tools in a turn (the `tools` of a chat
//! completion request): offered to the model after the agent's own tools,
//! so that the agent's part of the prompt prefix comes first and stays the
//! same, and never run here. A response that calls one ends the turn once
//! the round's gateway tools have run: the calls are checkpointed `client`
//! and handed to the client (`finish_reason: "tool_calls"`), whose next
//! request brings their results, which the next turn of the conversation
//! records before it calls the model (`session::turn`).
//!
//! A client tool named like one of the agent's is left out (the HTTP API
//! refuses such a request before it gets here): the agent's runs.

use std::collections::HashSet;
use std::sync::Arc;

use crate::domain::ToolSpec;

/// The client's tools of one turn, and the tool list the model is offered.
#[derive(Debug, Clone, Default)]
pub struct ClientTools {
    /// The agent's tools then the client's; `None` when the client has
    /// none (the agent's own list is offered as it is).
    offered: Option<Arc<[ToolSpec]>>,
    names: HashSet<String>,
}

impl ClientTools {
    /// The client's `tools` beside the agent's `own`.
    pub fn new(own: &[ToolSpec], client: Vec<ToolSpec>) -> Self {
        let own_names: HashSet<&str> = own.iter().map(|tool| tool.name.as_str()).collect();
        let client: Vec<ToolSpec> = client
            .into_iter()
            .filter(|tool| !own_names.contains(tool.name.as_str()))
            .collect();
        if client.is_empty() {
            return Self::default();
        }
        let names = client.iter().map(|tool| tool.name.clone()).collect();
        let offered: Vec<ToolSpec> = own.iter().cloned().chain(client).collect();
        Self {
            offered: Some(Arc::from(offered)),
            names,
        }
    }

    /// The tools a model call of the turn is offered: the agent's `own`,
    /// then the client's.
    pub fn offered<'a>(&'a self, own: &'a [ToolSpec]) -> &'a [ToolSpec] {
        self.offered.as_deref().unwrap_or(own)
    }

    /// Whether `name` is one of the client's tools.
    pub fn has(&self, name: &str) -> bool {
        self.names.contains(name)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn spec(name: &str) -> ToolSpec {
        ToolSpec {
            name: name.to_owned(),
            description: format!("{name} tool"),
            parameters: json!({"type": "object"}),
        }
    }

    #[test]
    fn the_clients_tools_follow_the_agents_and_never_replace_one() {
        let own = [spec("calculator"), spec("http_get")];
        let none = ClientTools::default();
        assert_eq!(none.offered(&own), &own);
        assert!(!none.has("calculator"));

        let tools = ClientTools::new(&own, vec![spec("get_weather"), spec("calculator")]);
        let names: Vec<&str> = tools
            .offered(&own)
            .iter()
            .map(|tool| tool.name.as_str())
            .collect();
        assert_eq!(names, ["calculator", "http_get", "get_weather"]);
        assert!(tools.has("get_weather"));
        assert!(!tools.has("calculator"), "the agent's own tool runs");

        let shadowed = ClientTools::new(&own, vec![spec("calculator")]);
        assert_eq!(shadowed.offered(&own), &own);
    }
}
