//! Sub-agents for the `delegate` tool: a fresh context, a subset of the
//! parent's tools, and a purse reserved from the parent's, so the whole task
//! still spends from one wallet.

use std::sync::Arc;

use async_trait::async_trait;

use super::Agent;
use super::prompt::sub_agent_prompt;
use super::run::{LoopEnv, run_loop};
use super::wallet::Purse;
use crate::domain::ChatMessage;
use crate::tools::delegate::DELEGATE;
use crate::tools::{SubAgentError, SubAgents};

/// Starts sub-agents on behalf of one tool call.
pub struct SubAgentRunner {
    parent: Arc<Agent>,
    env: Arc<LoopEnv>,
    purse: Arc<Purse>,
    request_id: String,
}

impl SubAgentRunner {
    pub fn new(
        parent: Arc<Agent>,
        env: Arc<LoopEnv>,
        purse: Arc<Purse>,
        request_id: String,
    ) -> Self {
        Self {
            parent,
            env,
            purse,
            request_id,
        }
    }
}

#[async_trait]
impl SubAgents for SubAgentRunner {
    async fn run(&self, task: String, tools: Vec<String>) -> Result<String, SubAgentError> {
        let depth = self.env.depth + 1;
        if depth > self.env.max_depth {
            return Err(SubAgentError::TooDeep {
                max_depth: self.env.max_depth,
            });
        }
        let mut toolset = if tools.is_empty() {
            self.parent.toolset.clone()
        } else {
            let unknown: Vec<&String> = tools
                .iter()
                .filter(|name| self.parent.toolset.get(name).is_none())
                .collect();
            if !unknown.is_empty() {
                return Err(SubAgentError::UnknownTools {
                    unknown: unknown
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    available: self.parent.toolset.names().join(", "),
                });
            }
            self.parent.toolset.subset(&tools)
        };
        if depth >= self.env.max_depth {
            toolset = toolset.without(DELEGATE);
        }
        let purse = self
            .purse
            .child(self.env.parent_reserve)
            .ok_or(SubAgentError::NoBudget)?;
        let child = Arc::new(Agent {
            provider: Arc::clone(&self.parent.provider),
            provider_kind: self.parent.provider_kind,
            model: self.parent.model.clone(),
            signature: self.parent.signature.clone(),
            toolset,
        });
        let env = Arc::new(LoopEnv {
            scope: self.env.scope.child(&self.request_id),
            system_prompt: sub_agent_prompt(child.toolset.specs()),
            depth,
            context: None,
            // The client's settings are for the turn's answer, not the
            // sub-agent's.
            call_options: Arc::default(),
            client_tools: Arc::default(),
            // The sub-agent's text is not the turn's reply; its tool calls
            // show as the parent's `delegate` call.
            live: None,
            // Only the main agent asks a person; a sub-agent's `ask` tools
            // are refused.
            asker: None,
            person: None,
            ..(*self.env).clone()
        });
        let history = vec![ChatMessage::user(task)];
        // The sub-task is committed with the sub-agent's first model call.
        let mut first_writes = crate::store::Batch::new();
        first_writes
            .append_message(&env.entry(history[0].clone()))
            .map_err(|err| {
                tracing::error!(error = %err, "sub-agent task not stored");
                SubAgentError::NotStarted
            })?;
        let outcome = run_loop(
            child,
            Arc::clone(&env),
            Arc::new(purse),
            history,
            None,
            first_writes,
        )
        .await
        .map_err(|err| SubAgentError::Failed(err.to_string()))?;
        // Its last call's outcome and its answer, in one write.
        let mut writes = outcome.writes;
        writes
            .append_message(&outcome.final_message)
            .map_err(|err| SubAgentError::AnswerRejected(err.to_string()))?;
        env.store.write(writes).await.map_err(|err| {
            tracing::error!(error = %err, "sub-agent answer not stored");
            SubAgentError::AnswerNotStored
        })?;
        Ok(outcome.text)
    }
}
