//! The engine's limits on actor KV and ours on user keys and values: plain
//! numbers that the queue's limits and the stores share with [`super::kv`]
//! without importing it.

/// Longest user key, in bytes (the engine's 2048 minus framing and prefix):
/// 2043.
pub const MAX_KEY_SIZE: usize = ENGINE_MAX_KEY_SIZE - ENGINE_KEY_OVERHEAD - 1;
/// Longest value, in bytes.
pub const MAX_VALUE_SIZE: usize = 128 * 1024;

/// The engine's limit on an encoded key.
pub const ENGINE_MAX_KEY_SIZE: usize = 2048;
/// Bytes the engine adds to a key before checking [`ENGINE_MAX_KEY_SIZE`]:
/// 2 on engine 2.3, 4 on engine 3.0 (measured: it stores a 2044-byte key
/// and refuses 2045 bytes with "invalid filesystem operation"). The larger,
/// so that a key accepted here is stored by both engines and an actor's data
/// moves from one to the other (docs/storage.md).
pub const ENGINE_KEY_OVERHEAD: usize = 4;
/// Most keys the engine accepts in one get, put or delete.
pub const ENGINE_MAX_KEYS: usize = 128;
/// Most bytes (encoded keys plus values) the engine accepts in one put.
pub const ENGINE_MAX_PUT_PAYLOAD: usize = 976 * 1024;
