//! What a bad environment is reported as: each setting that cannot be used, with its value
//! and what belongs there, all of them at once.

/// Every setting of an environment that cannot be used, in the order read: a start names
/// them all at once rather than one per attempt. Never empty.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct SettingsErrors(pub(super) Vec<SettingsError>);

impl SettingsErrors {
    /// The problems, in the order the settings were read.
    pub fn iter(&self) -> impl Iterator<Item = &SettingsError> {
        self.0.iter()
    }

    /// How many settings cannot be used (at least 1).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Always false: there is at least one problem.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The problem, when there is exactly one.
    pub fn single(&self) -> Option<&SettingsError> {
        match self.0.as_slice() {
            [one] => Some(one),
            _ => None,
        }
    }
}

impl std::fmt::Display for SettingsErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.as_slice() {
            [one] => write!(f, "{one}"),
            all => {
                write!(f, "{} invalid settings:", all.len())?;
                all.iter().try_for_each(|e| write!(f, "\n  {e}"))
            }
        }
    }
}

/// A setting with a value we cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid setting {name}={value:?}: {problem}")]
pub struct SettingsError {
    /// The environment variable or flag, e.g. `GRPC_PORT`.
    pub name: String,
    /// The value as given.
    pub value: String,
    /// Why it cannot be used, in the setting's terms.
    pub problem: String,
}
