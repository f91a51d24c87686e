//! calculator tool.
