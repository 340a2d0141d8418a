//! The secret store: AES-256-GCM envelopes under a master keyring, bound to their reference
//! and field, decrypted late (only to answer the Connect config provider, to run a connection
//! test, or to scan Connect for leaks).

pub mod binding;
pub mod keyring;
pub mod resolve;
pub mod store;

use std::fmt;

pub use keyring::{Keyring, MasterKey};

/// A value that must never be printed: Debug redacts it and there is no Display.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret<T>(T);

impl<T> Secret<T> {
    pub fn new(value: T) -> Self {
        Secret(value)
    }

    /// The one way to reach the value; grep for it to audit every use.
    pub fn expose(&self) -> &T {
        &self.0
    }
}

impl<T> fmt::Debug for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl<'de, T: serde::Deserialize<'de>> serde::Deserialize<'de> for Secret<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        T::deserialize(d).map(Secret)
    }
}

#[cfg(test)]
mod tests {
    use super::Secret;

    #[test]
    fn debug_never_shows_the_value() {
        let s = Secret::new("hunter2-hunter2".to_string());
        assert_eq!(format!("{s:?}"), "Secret(***)");
        assert_eq!(s.expose(), "hunter2-hunter2");
    }
}
