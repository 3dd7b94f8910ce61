fn main() {
    std::process::exit(sparkctl::cli::main());
}
