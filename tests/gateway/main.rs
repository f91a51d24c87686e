//! Integration tests: the real gateway over HTTP against a fake model server
//! and fake platform APIs (from `switchboard-test-support`) on 127.0.0.1, on
//! SQLite (or PostgreSQL with `TEST_DATABASE_URL`).

mod access;
mod adapter_identity;
mod agent_loop;
mod api;
mod api_media;
mod api_sessions;
mod budget;
mod budget_warnings;
mod burst;
mod cluster;
mod compaction;
mod config_check;
mod console;
mod crash;
mod drafts;
mod failure_texts;
mod feishu;
mod helpers;
mod identity;
mod layers;
mod limits;
mod mcp;
mod media;
mod media_content;
mod media_store;
mod memory;
mod metrics;
mod openai_client;
mod outbox;
mod platform_lease;
mod platforms;
mod prefix;
mod prompt;
mod recovery;
mod runner;
mod serve;
mod stateless;
mod steps;
mod streaming;
mod supervision;
mod tasks;
mod telegram;
mod terminal;
mod transcripts;
