//! Text helpers exported to C.

use std::ffi::CStr;
use std::os::raw::c_char;

/// FNV-1a hash of a NUL-terminated string.
#[no_mangle]
pub extern "C" fn textkit_fnv1a(s: *const c_char) -> u64 {
    let bytes = unsafe { CStr::from_ptr(s) }.to_bytes();
    bytes.iter().fold(0xcbf29ce484222325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100000001b3))
}

/// The number of distinct words (split on ASCII whitespace) of a NUL-terminated string.
#[no_mangle]
pub extern "C" fn textkit_distinct_words(s: *const c_char) -> usize {
    let text = unsafe { CStr::from_ptr(s) }.to_string_lossy();
    let mut words: Vec<&str> = text.split_ascii_whitespace().collect();
    words.sort_unstable();
    words.dedup();
    words.len()
}
