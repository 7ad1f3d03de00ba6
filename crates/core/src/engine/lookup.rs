//! The variable lookup the engine's steps take, so that tests pass a
//! closure where production reads the process environment.

/// A variable lookup; the process environment in production, a closure in
/// tests. `Sync` keeps the futures that hold it `Send` (they run on spawned tasks).
pub type Env<'a> = &'a (dyn Fn(&str) -> Option<String> + Sync);

/// The process environment, as an [`Env`].
pub(crate) fn process_env(name: &str) -> Option<String> {
    crate::env::get(name)
}
