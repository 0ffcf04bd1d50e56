//! tidemark-writer (being built).
