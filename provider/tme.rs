//! Tag-matching engine.
