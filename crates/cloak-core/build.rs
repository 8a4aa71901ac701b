//! Compiles `src/long_double.c`: INCRBYFLOAT computes in C's `long double`, as Redis does.

fn main() {
    println!("cargo:rerun-if-changed=src/long_double.c");
    cc::Build::new()
        .file("src/long_double.c")
        .warnings(true)
        .compile("cloak_long_double");
}
