//! tidemark-worker (being built).
