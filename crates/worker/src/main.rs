//! `tidemark`: the worker binary. Everything is in the library
//! ([`tidemark_worker::cli`]); this only picks the allocator and calls it.

// The data path allocates a few small blocks per record (strings of the
// record, its key and item bytes), freed on other threads; mimalloc served
// a 200k-record replay with 19% less CPU than glibc malloc (2.37 s against
// 2.93 s, three alternating runs each). Built with `no_thp` (workspace
// Cargo.toml): with transparent huge pages, each page mimalloc purged and
// reused came back as a fresh 2 MiB fault to clear (~11% of the replay's
// CPU in `clear_page_erms`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    tidemark_worker::cli::main()
}
