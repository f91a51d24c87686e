//! delegate tool.
