//! Switchboard: a multi-platform chat gateway for an LLM agent.

pub mod llm;
pub mod tools;
