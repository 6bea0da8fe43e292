#!/bin/sh
# Regenerates provider/ffi/bindings.rs from the installed libfabric headers.
# The output is checked in so that building gnix needs no libclang; the layout
# tests bindgen emits (and tests/abi_layout.rs) catch a header that disagrees.
set -e
cd "$(dirname "$0")/.."
bindgen provider/ffi/wrapper.h \
  --allowlist-type 'fi_.*|fid.*' --allowlist-var 'FI_.*' --blocklist-function '.*' \
  --no-prepend-enum-name --default-enum-style consts \
  --no-doc-comments --use-core \
  --raw-line '#![allow(non_camel_case_types, non_upper_case_globals, non_snake_case, dead_code, clippy::all)]' \
  -o provider/ffi/bindings.rs
# bindgen types each macro by its value; give the flag families the C types
# they are used with (errno: int; mr_mode bits: int; caps/flags/order: uint64_t).
sed -i -E \
  -e '/^pub const FI_EVENT:/!s/^pub const (FI_SUCCESS|FI_E[A-Z0-9]+|FI_ERRNO_OFFSET): u32 = /pub const \1: i32 = /' \
  -e 's/^pub const (FI_MR_(LOCAL|RAW|VIRT_ADDR|ALLOCATED|PROV_KEY|MMU_NOTIFY|RMA_EVENT|ENDPOINT|HMEM|COLLECTIVE)): u32 = /pub const \1: i32 = /' \
  -e '/^pub const FI_(MAJOR_VERSION|MINOR_VERSION|REVISION_VERSION|PROV_SPECIFIC|PROV_SPECIFIC_[A-Z]+|COLLECTIVE_OFFSET|LOG_PROV_FILTERED):/!s/^pub const (FI_[A-Z0-9_]+): u32 = /pub const \1: u64 = /' \
  provider/ffi/bindings.rs
# The FI_E* extended errno enum (FI_ETRUNC, FI_EAVAIL, ...) is an anonymous
# enum: give it the same i32 type as the errno macros.
ty=$(grep -oE 'pub const FI_EOTHER: _bindgen_ty_[0-9]+' provider/ffi/bindings.rs | awk '{print $4}')
sed -i -E "s/: $ty = /: i32 = /" provider/ffi/bindings.rs
