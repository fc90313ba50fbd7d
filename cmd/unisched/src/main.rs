//! The unisched binary.
#![forbid(unsafe_code)]
fn main() {}
