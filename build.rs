//! Release builds pack the binary's relative relocations (DT_RELR, `-z pack-relative-relocs`):
//! the dynamic loader then reads a bitmap of a few KiB at start instead of about 1 MiB of
//! 24-byte entries, so the binary is smaller and fewer of its pages are resident. The packed
//! binary needs glibc 2.36 or newer where it runs (it is built where it runs: natively, or in
//! the Dockerfile's Debian); linkers that do not know the option warn and link as before.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    // `sqlx::migrate!` embeds migrations/ at compile time but does not tell cargo to watch it:
    // without this line a new migration file left a warm build's binary without it.
    println!("cargo:rerun-if-changed=migrations");
    let release = std::env::var("PROFILE").is_ok_and(|p| p == "release");
    let linux_gnu = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|o| o == "linux")
        && std::env::var("CARGO_CFG_TARGET_ENV").is_ok_and(|e| e == "gnu");
    if release && linux_gnu {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
