//! The contract between Switchboard's core and its platform adapters.
//!
//! Adapters know platforms, not agents: they turn a platform event into one
//! [`InboundMessage`], hand it to an [`InboundSink`] (implemented by the core),
//! and deliver [`OutboundMessage`]s through the [`PlatformSender`] they implement.
//! This crate also holds what every adapter shares: newtype identifiers,
//! splitting text to a platform's length limit without breaking code fences
//! ([`split`]), Markdown conversion hooks ([`markdown`]), and the one backoff
//! policy of every retry loop ([`backoff`]), the drafts a reply shows
//! while it is written ([`draft`]), media downloads ([`media`]), buttons
//! and their presses ([`interaction`]), and how the core starts, runs and
//! stops every adapter the same way ([`lifecycle`]).
//!
//! The core depends on this crate and on the adapters; nothing here depends on
//! the core.

pub mod backoff;
pub mod draft;
pub mod ids;
pub mod interaction;
pub mod lifecycle;
pub mod markdown;
pub mod media;
pub mod message;
pub mod platform;
pub mod split;

pub use draft::Draft;
pub use ids::{AccountId, ChatId, EventId, IdError, PlatformName, ThreadId, UserId};
pub use interaction::{
    ActionId, ActionReply, Button, ButtonStyle, InboundAction, InvalidActionId, MAX_ACTION_ID_LEN,
};
pub use lifecycle::{Adapter, Connection, ConnectionError, Drain, Hookup, StartError, Started};
pub use markdown::{MarkupRenderer, PlainText, TelegramHtml, escape_html};
pub use media::{FetchError, FetchMedia, MediaFetcher, collect_capped};
pub use message::{
    Attachment, AttachmentKind, ChatKind, ChatRef, DeliveryReceipt, DeliveryState, DeliveryStatus,
    InboundMessage, OutboundMessage, Sender,
};
pub use platform::{InboundSink, LinkObserver, PlatformSender, SendError, SubmitError, Submitted};
pub use split::{LengthUnit, split_message, split_message_fitting};
