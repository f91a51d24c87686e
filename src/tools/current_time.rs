//! current_time tool.
