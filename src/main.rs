fn main() {
    println!("eukhe {}", env!("CARGO_PKG_VERSION"));
}
