//! What the integration tests of the gateway and of every adapter share:
//! fake platform APIs bound to 127.0.0.1:0 ([`telegram`], [`feishu`],
//! [`discord`]), a fake model server speaking both providers' wire formats
//! ([`model`]), a fake S3-compatible object store ([`s3`]),
//! waiting for a condition instead of sleeping ([`wait`]), delivering
//! through a `PlatformSender` the way the core's runner does ([`send`]), and
//! the contract seen from the core's side: messages as an adapter submits
//! them ([`inbound`]), an adapter's start-up as the core does it
//! ([`lifecycle`]), a small MCP server ([`mcp`]) and a platform that records what it is sent
//! ([`sender`]), scratch PostgreSQL databases dropped after the test
//! ([`postgres`]), a fake OpenAI-compatible transcription server
//! ([`transcription`]) and small real media files made on the spot
//! ([`media`]).
//!
//! It depends on the contract crate only, never on the core, so the
//! adapters' tests can use it.

pub mod discord;
pub mod feishu;
pub mod inbound;
pub mod lifecycle;
pub mod mcp;
pub mod media;
pub mod model;
pub mod postgres;
pub mod s3;
pub mod send;
pub mod sender;
pub mod slack;
pub mod telegram;
pub mod transcription;
pub mod wait;
pub mod whatsapp;

pub use wait::{eventually, eventually_some};
