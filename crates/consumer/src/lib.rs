//! tidemark-consumer (being built).
