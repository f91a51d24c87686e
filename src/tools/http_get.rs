//! http_get tool.
