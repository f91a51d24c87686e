//! The `delegate` tool: hands a self-contained task to a sub-agent with a
//! fresh context. The sub-agent spends from the same task wallet (see
//! `agent::wallet`), so delegation never raises the task's budget.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Tool, ToolContext, ToolError, arguments_schema};

/// The tool's name.
pub const DELEGATE: &str = "delegate";

/// Starts a sub-agent for a task.
pub struct Delegate;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// The complete task, with every fact the sub-agent needs.
    task: String,
    /// Names of your tools the sub-agent may use; omit for all.
    #[serde(default)]
    tools: Vec<String>,
}

#[async_trait]
impl Tool for Delegate {
    fn name(&self) -> &'static str {
        DELEGATE
    }

    fn description(&self) -> &'static str {
        "Hands a self-contained task to a sub-agent that works on it with a fresh context and \
         returns its final answer as `result`. Use it for independent pieces of work (research \
         one question, check one thing) so your own context stays small; several delegate calls \
         in one turn run in parallel. Describe the task completely: the sub-agent sees nothing \
         of this conversation. It shares your step budget."
    }

    fn parameters(&self) -> Value {
        arguments_schema::<Args>()
    }

    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
        let args: Args = serde_json::from_value(args)
            .map_err(|err| ToolError::InvalidArguments(err.to_string()))?;
        if args.task.trim().is_empty() {
            return Err(ToolError::InvalidArguments(
                "`task` must not be empty".to_owned(),
            ));
        }
        let subagents = ctx
            .subagents
            .as_ref()
            .ok_or_else(|| ToolError::Failed("delegation is not available here".to_owned()))?;
        let result = subagents
            .run(args.task, args.tools)
            .await
            .map_err(|err| ToolError::Failed(err.to_string()))?;
        Ok(json!({ "result": result }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The schema is in every cached prompt: its bytes must not drift.
    #[test]
    fn the_argument_schema_keeps_its_bytes() {
        let schema = serde_json::to_string(&Delegate.parameters()).unwrap();
        assert_eq!(
            schema,
            r#"{"additionalProperties":false,"properties":{"task":{"description":"The complete task, with every fact the sub-agent needs.","type":"string"},"tools":{"description":"Names of your tools the sub-agent may use; omit for all.","items":{"type":"string"},"type":"array"}},"required":["task"],"type":"object"}"#
        );
    }
}
