fn main() {
    println!("tidemark-limits {}", env!("CARGO_PKG_VERSION"));
}
