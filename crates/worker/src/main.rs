fn main() {
    println!("tidemark {}", env!("CARGO_PKG_VERSION"));
}
