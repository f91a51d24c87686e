//! Switchboard: a multi-platform chat gateway for an LLM agent.
//!
//! Layout: [`config`] (typed settings), [`store`] (sqlx, SQLite or
//! PostgreSQL), [`llm`] (providers), [`media`] (photos and files, the blob
//! store), [`tools`] (built-in tools, MCP servers'
//! tools, their registry and the tool result cache), [`agent`] (the loop, the
//! wallet, the agent cache), [`session`] (session service, commands,
//! per-session runner), [`api`] (the OpenAI-compatible HTTP API),
//! [`terminal`] (the terminal chat), [`gateway`] (wiring it all together),
//! [`platforms`] (starting and supervising the adapters, their states for
//! `/readyz`, one instance per platform connection), [`metrics`] (what `/metrics` serves), [`console`]
//! (the operators' web console), [`bench`](mod@bench) (the throughput
//! benchmark), [`check`] (`switchboard check`: reaching what the
//! configuration names).

pub mod agent;
pub mod api;
pub mod bench;
pub mod check;
pub mod cli;
pub mod config;
pub mod console;
pub mod domain;
pub mod gateway;
pub mod llm;
pub mod media;
pub mod metrics;
pub mod platforms;
pub mod server;
pub mod session;
pub mod signals;
pub mod store;
pub mod telemetry;
pub mod terminal;
pub mod tools;
pub mod usage;
