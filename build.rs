fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    // FI_LONG_DOUBLE(_COMPLEX) atomics: Rust has no long double, so
    // provider/nic/atomic.rs hands those to C. -std=c11 also turns off
    // floating-point contraction (GCC's GNU modes allow fused multiply-add),
    // so results are the plain IEEE ones.
    println!("cargo:rerun-if-changed=provider/nic/atomic_ld.c");
    cc::Build::new()
        .file("provider/nic/atomic_ld.c")
        .flag("-std=c11")
        .warnings(true)
        .extra_warnings(true)
        .compile("gnix_atomic_ld");
}
