//! Line statistics for C callers: the crate's own code is bitcode (the toolchain's
//! -Clinker-plugin-lto), the standard library it pulls in is native.

use std::ffi::CStr;
use std::os::raw::c_char;

/// The longest line (in bytes) of a NUL-terminated text.
#[no_mangle]
pub extern "C" fn linestats_longest(text: *const c_char) -> usize {
    let bytes = unsafe { CStr::from_ptr(text) }.to_bytes();
    bytes.split(|&b| b == b'\n').map(<[u8]>::len).max().unwrap_or(0)
}

/// How many distinct lines a NUL-terminated text has.
#[no_mangle]
pub extern "C" fn linestats_distinct(text: *const c_char) -> usize {
    let bytes = unsafe { CStr::from_ptr(text) }.to_bytes();
    let mut lines: Vec<&[u8]> = bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()).collect();
    lines.sort_unstable();
    lines.dedup();
    lines.len()
}
