//! tidemark-limits (being built).
