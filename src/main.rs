fn main() {
    std::process::exit(sparkctl::main());
}
