fn main() {
    println!("hybridllm-frontend {}", env!("CARGO_PKG_VERSION"));
}
