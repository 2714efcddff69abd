//! [`Attached`]: a value a later stage attaches to a compiled limit once, for the life of the
//! rule set, so that it finds it again from the limit alone instead of looking it up by a
//! string key on every request (metrics keep a limit's stats counters there). Copying a limit
//! copies no attachment; a new rule set starts with none.
//!
//! Must not touch: what is attached (the attaching layer's type, seen here only as `Any`).

use std::any::Any;
use std::sync::{Arc, OnceLock};

/// At most one value, attached by whoever asks first.
#[derive(Default)]
pub struct Attached(OnceLock<Arc<dyn Any + Send + Sync>>);

impl Attached {
    /// The attached value if it is a `T`, attaching `init()` first when there is none.
    pub fn get_or_attach<T: Any + Send + Sync>(&self, init: impl FnOnce() -> T) -> Option<&T> {
        self.0
            .get_or_init(|| Arc::new(init()))
            .as_ref()
            .downcast_ref::<T>()
    }
}

impl Clone for Attached {
    fn clone(&self) -> Self {
        Attached::default()
    }
}

impl std::fmt::Debug for Attached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.0.get() {
            Some(_) => "Attached(set)",
            None => "Attached(none)",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Attached;

    #[test]
    fn the_first_value_stays_and_a_copy_starts_empty() {
        let slot = Attached::default();
        assert_eq!(slot.get_or_attach(|| 1u32), Some(&1));
        assert_eq!(slot.get_or_attach(|| 2u32), Some(&1), "attached once");
        assert_eq!(slot.get_or_attach(|| "other type"), None);
        assert_eq!(slot.clone().get_or_attach(|| 3u32), Some(&3));
    }
}
